"""stage29_auxdq: the Gluon aux finishes dQ (aux_gluon's FIN) and state_terms dK, no post kernel.
On the interpreter: both sides finished as gluon_common.finish_pair forms them (replayed in torch
from the DQR / DKR rows of stage26's pipeline: conftest's finish_replay; the q side's diagonal
term reads the weight blocks transposed) give stage26's post kernel's DQ, DK and DANGLES. The Gluon
kernels compile for sm_90; they run on Hopper GPUs only (the golden check there:
tests/kernels/test_gluonaux.py)."""
import pytest
import torch

from mamba3_perf.bench import prepare
from mamba3_perf.kernels import get_case
from mamba3_perf.kernels.bwd_bwd import stage7_streamaux, stage28_termsdk, stage29_auxdq
from mamba3_perf.kernels.checking import check_stage


@pytest.mark.parametrize("case_id", ["small-N128_P64_R4_C16", "small-N64_P64_R4_C16", "small-N128_P64_R8_C8",
                                     "regular-1x64x4x2"])
def test_both_sides_finished_give_the_post_kernels_outputs(post_launch, finish_replay, case_id):
    x, s, want, meta, _kw = post_launch(case_id)
    dq, g_q = finish_replay(x, s, meta, "q")
    dk, g_k = finish_replay(x, s, meta, "k")
    torch.testing.assert_close(dq.to(want["DQ"].dtype), want["DQ"], rtol=1e-2, atol=1e-2)  # one 16-bit rounding
    torch.testing.assert_close(dk.to(want["DK"].dtype), want["DK"], rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(g_q + g_k, want["DANGLES"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case_id,fin", [("N128_P64_R4_C16", True), ("N64_P128_R4_C16", True),
                                         ("N32_P64_R4_C16", False), ("N128_P128_R4_C8", False)])
def test_plan(plan_on_hopper, case_id, fin):
    kw, parent = plan_on_hopper(stage29_auxdq.plan, stage28_termsdk.plan, case_id)
    assert kw == (dict(parent, finish_dq=True) if fin else parent)


def test_finish_dq_only_with_finish_dk(case_meta):
    case = get_case("small-N128_P64_R4_C16")
    with pytest.raises(ValueError, match="finish_dq"):
        stage7_streamaux.run_with(prepare(case, device="cpu"), {}, case_meta(case), low_precision=True,
                                  finish_dq=True)


def test_off_hopper_it_is_stage26():
    rows = check_stage("stage29_auxdq", get_case("small-N128_P64_R2_C32"))
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]


@pytest.mark.parametrize("shape,programs", [((128, 64, 4, 16), 2), ((64, 128, 4, 16), 1)])
def test_no_post_kernel_and_the_gluon_kernels_fit_for_sm90(compile_stage, shape, programs):
    """stage29's rule under the stand-in Hopper driver: no post kernel is launched, and the aux
    finishing dQ keeps its shared memory and programs per SM."""
    ks = compile_stage("stage29_auxdq", *shape, "")
    assert not any(name.startswith("bwd_bwd_post") for name in ks), sorted(ks)
    for name in ("bwd_bwd_aux_gluon_kernel", "bwd_bwd_state_terms_gluon_kernel"):
        assert ks[name]["programs_per_sm_by_shared"] >= programs, (name, ks[name]["shared"])
