"""stage20_auxinc: its shape rule, the aux's increments against stage19's increment kernel
(bit for bit on the interpreter) and against the golden where forced on."""
import pytest
import torch

from mamba3_perf.kernels import cases, get_case, make_inputs
from mamba3_perf.kernels.bwd_bwd import stage17_scanpass, stage20_auxinc
from mamba3_perf.kernels.checking import check_stage, run_stage


@pytest.mark.parametrize("case_id,forms", [
    ("small-N128_P64_R4_C16", True), ("small-N128_P64_R8_C8", True), ("small-N128_P64_R1_C64", True),
    ("small-N64_P128_R4_C16", False),  # C*R*P = 8192
])
def test_increments_follow_the_measured_rule(case_meta, case_id, forms):
    assert stage20_auxinc.forms_increments(case_meta(case_id)) is forms


def test_the_pass_launches_no_increment_kernel_where_the_aux_forms_them(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("stage20 launched the increment kernel")

    monkeypatch.setattr(stage17_scanpass, "launch_increments", refuse)
    c = get_case("small-N128_P64_R4_C16")
    rows = check_stage("stage20_auxinc", c)
    assert all(r.passed for r in rows)
    with pytest.raises(AssertionError, match="increment kernel"):
        run_stage("stage19_splitdot", make_inputs(c), c)


@pytest.mark.parametrize("case_id", ["small-N128_P64_R4_C16", "small-N64_P64_R4_C16", "small-N128_P64_R2_C32"])
def test_same_outputs_as_stage19(case_id):
    """The aux forms the same dot as the increment kernel: equal outputs on the interpreter."""
    c = get_case(case_id)
    x = make_inputs(c)
    a, b = run_stage("stage19_splitdot", x, c), run_stage("stage20_auxinc", x, c)
    for name, t in a.items():
        if t is not None:
            assert torch.equal(t, b[name]), name


FORCED = [c for s in ("pairwise", "tail", "edge") for c in cases(s)]


@pytest.mark.parametrize("case", FORCED, ids=lambda c: c.id)
def test_aux_increments_match_golden_where_forced(monkeypatch, case):
    monkeypatch.setattr(stage17_scanpass, "splits_pass", lambda meta: True)
    monkeypatch.setattr(stage20_auxinc, "forms_increments", lambda meta: True)
    rows = check_stage("stage20_auxinc", case)
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]
