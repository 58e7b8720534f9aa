"""stage17_scanpass: its shape rule, and its two pass kernels against the golden on shapes the
rule leaves to stage16 (forced on), with the edge set (one chunk: the scan's look-ahead masks)."""
import pytest

from mamba3_perf.kernels import cases
from mamba3_perf.kernels.bwd_bwd import stage17_scanpass
from mamba3_perf.kernels.checking import check_stage


@pytest.mark.parametrize("case_id,split", [
    ("small-N128_P64_R4_C16", True), ("small-N32_P64_R4_C16", True), ("small-N64_P128_R4_C16", True),
    ("small-N128_P64_R8_C8", True), ("small-N128_P64_R1_C64", True),
    ("small-N16_P64_R4_C8", False), ("small-N256_P64_R4_C8", False), ("small-N128_P128_R4_C8", False),
    ("small-N128_P32_R4_C16", False),
])
def test_split_pass_follows_the_measured_rule(case_meta, case_id, split):
    assert stage17_scanpass.splits_pass(case_meta(case_id)) is split


FORCED = [c for s in ("pairwise", "tail", "edge") for c in cases(s)]


@pytest.mark.parametrize("case", FORCED, ids=lambda c: c.id)
def test_split_pass_matches_golden_where_forced(monkeypatch, case):
    monkeypatch.setattr(stage17_scanpass, "splits_pass", lambda meta: True)
    rows = check_stage("stage17_scanpass", case)
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]
