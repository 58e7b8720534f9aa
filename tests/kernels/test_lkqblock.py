"""stage22_lkqblock: its shape rule, and the aux's wider k.q^T steps against the golden where
forced on, on the forced-on sets' shapes with N > 16 (at N = 16 a step is the whole N either way;
N not a multiple of 32 included: the edge set's N = 24 and 48)."""
import pytest

from mamba3_perf.kernels import cases
from mamba3_perf.kernels.bwd_bwd import stage22_lkqblock
from mamba3_perf.kernels.checking import check_stage

FORCED = [c for s in ("pairwise", "tail", "edge") for c in cases(s) if c.N > 16]


@pytest.mark.parametrize("case_id,wide", [
    ("small-N128_P64_R4_C16", True), ("small-N128_P64_R8_C8", True), ("small-N32_P64_R4_C16", True),
    ("small-N64_P128_R4_C16", False),  # C*R*P = 8192
])
def test_wide_lkq_steps_follow_the_measured_rule(case_meta, case_id, wide):
    assert stage22_lkqblock.widens_lkq(case_meta(case_id)) is wide


@pytest.mark.parametrize("case", FORCED, ids=lambda c: c.id)
def test_wide_lkq_steps_match_golden_where_forced(monkeypatch, case):
    monkeypatch.setattr(stage22_lkqblock, "widens_lkq", lambda meta: True)
    rows = check_stage("stage22_lkqblock", case)
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]
