"""stage26_widep: the Gluon aux at P = 128 with the inputs read there, the pre-rotation q / k from the
inputs where N > 128; golden on the interpreter (the Gluon side: tests/kernels/test_gluonaux.py's
P = 128 tests, through the same launches)."""
import pytest

from mamba3_perf.bench import prepare
from mamba3_perf.kernels import get_case
from mamba3_perf.kernels.bwd_bwd import stage24_gluonaux, stage26_widep
from mamba3_perf.kernels.checking import check_stage


@pytest.mark.parametrize("case_id,hopper,want", [
    ("N64_P128_R4_C16", True, dict(wide_p=True, inputs=True)),    # the Gluon aux at P = 128
    ("N64_P128_R4_C16", False, dict(wide_p=True)),                # the Triton aux: scratch kept
    ("N256_P64_R4_C8", True, dict(wide_p=True, qk_inputs=True)),  # N > 128
    ("N128_P128_R4_C8", True, dict(wide_p=True)),                 # C*R = 32: the Triton aux, N = 128
    ("N128_P64_R4_C16", True, dict(wide_p=True)),                 # stage25 as it is
])
def test_plan(monkeypatch, case_meta, case_id, hopper, want):
    small = get_case("small-" + case_id)
    monkeypatch.setattr(stage24_gluonaux, "is_hopper", lambda device: hopper)
    meta = case_meta(get_case(case_id).with_(B=1, S=small.S, H=2))
    assert stage26_widep.plan(prepare(small, device="cpu"), meta) == want  # 16-bit states, as benchmarked


@pytest.mark.parametrize("case_id", ["small-N256_P64_R4_C8", "small-N64_P128_R4_C16", "tail-40"])
def test_matches_golden(case_id):
    rows = check_stage("stage26_widep", get_case(case_id))
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]
