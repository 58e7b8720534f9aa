"""stage18_widechunk: its measured rule (the post kernel on 16 warps where C*R*N >= 8192), and
that a widened launch is what runs."""
import pytest

from mamba3_perf.kernels import get_case
from mamba3_perf.kernels.bwd_bwd import prod, stage18_widechunk
from mamba3_perf.kernels.checking import check_stage


@pytest.mark.parametrize("case_id,post", [
    ("small-N128_P64_R4_C16", True), ("small-N128_P32_R4_C16", True), ("small-N128_P64_R1_C64", True),
    ("small-N128_P64_R8_C8", True), ("small-N256_P64_R4_C8", True),
    ("small-N128_P128_R4_C8", False), ("small-N64_P64_R4_C16", False), ("small-N16_P64_R4_C8", False),
    ("regular-1x64x4x2", False),
])
def test_widens_the_post_kernel_by_the_measured_rule(case_meta, case_id, post):
    assert stage18_widechunk.widens(case_meta(case_id)) is post


def test_the_post_kernel_launches_on_16_warps_and_matches_golden(monkeypatch):
    launches = []
    launch_post = prod.launch_post
    monkeypatch.setattr(prod, "launch_post", lambda *a, **k: launches.append(k.get("launch")) or launch_post(*a, **k))
    rows = check_stage("stage18_widechunk", get_case("small-N128_P64_R4_C16"))
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]
    assert launches and launches[0]["num_warps"] == 16
