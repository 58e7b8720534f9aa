"""stage18_auxsplit: where it splits the aux, and its two aux kernels (with the dstates terms
they leave for the scan) against the golden: every diagonal / input / sum variant of the
streamed aux is reached by the pairwise and tail sets (N = 16: diagonal terms in the aux, scratch
operands) and the small official shapes (diagonal terms in the post kernel, input operands, late
sums), plus one chunk and a P that is no power of two (the increment's masks)."""
import pytest

from mamba3_perf.kernels import api, cases, get_case, make_inputs
from mamba3_perf.kernels.bwd_bwd import stage18_auxsplit
from mamba3_perf.kernels.cases import Case
from mamba3_perf.kernels.checking import check_stage


def _meta(case):
    return api.validate(**make_inputs(case), chunk_size=case.C, rotary_dim_divisor=case.rotary_dim_divisor)


@pytest.mark.parametrize("case,split", [
    (get_case("small-N128_P64_R4_C16"), True), (get_case("small-N16_P64_R4_C8"), True),
    (get_case("small-N128_P64_R1_C64"), True),
    (Case(id="CR128", B=1, S=32, H=2, G=1, N=16, P=16, R=8, C=16, dtype="float32"), False),
], ids=lambda v: getattr(v, "id", str(v)))
def test_splits_where_the_streamed_aux_folds(case, split):
    assert stage18_auxsplit.splits_aux(_meta(case)) is split


CASES = [c for s in ("pairwise", "tail") for c in cases(s)] + [
    get_case("small-N64_P64_R4_C16"), get_case("small-N128_P32_R4_C16"),
    Case(id="one-chunk", B=1, S=16, H=2, G=1, N=16, P=16, R=2, C=16, dtype="bfloat16"),
    Case(id="two-chunks-P24", B=2, S=32, H=2, G=2, N=32, P=24, R=2, C=16, dtype="float32"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_split_aux_matches_golden(monkeypatch, case):
    calls = []
    launch = stage18_auxsplit.launch_split_aux
    monkeypatch.setattr(stage18_auxsplit, "launch_split_aux", lambda *a, **k: calls.append(1) or launch(*a, **k))
    rows = check_stage("stage18_auxsplit", case)
    assert calls, "the split aux did not run"
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]
