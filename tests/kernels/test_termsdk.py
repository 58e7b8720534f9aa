"""stage28_termsdk: state_terms finishes dK (terms_gluon's FIN), the post kernels do dQ alone
(K_DONE). On the interpreter: every post kernel the rule launches, given DK and DANGLES' k half as
state_terms' FIN leaves them (that arithmetic replayed in torch from the DKR rows stage26's
pipeline computes: conftest's finish_replay), ends with the outputs of the post kernel as stage26 runs it. The Gluon
kernel compiles for sm_90 (with stage29's flags, which take its FIN too: test_auxdq.py); it runs
on Hopper GPUs only (the golden check there: tests/kernels/test_gluonaux.py)."""
import pytest
import torch

from mamba3_perf.bench import prepare
from mamba3_perf.kernels import get_case
from mamba3_perf.kernels.bwd_bwd import prod, stage7_streamaux, stage27_rotinline, stage28_termsdk
from mamba3_perf.kernels.checking import check_stage

@pytest.mark.parametrize("case_id", [
    "small-N128_P64_R4_C16",  # stage21's post kernel, stage11's order
    "small-N128_P64_R1_C64",  # stage21's, DANGLES from registers
    "small-N64_P64_R4_C16",   # stage11's
    "small-N128_P64_R8_C8",   # stage11's on whole chunks
    "regular-1x64x4x2",       # GQA
])
def test_post_kernels_finish_what_state_terms_leaves(post_launch, finish_replay, case_id):
    x, s, want, meta, kw = post_launch(case_id)
    got = {k: v.clone() for k, v in want.items()}
    got["DQ"].fill_(float("nan"))
    got["DK"], got["DANGLES"] = finish_replay(x, s, meta, "k")
    got["DK"] = got["DK"].to(want["DK"].dtype)
    prod.launch_post(x, dict(s, DKR=torch.empty(0)), got, meta, **kw, k_done=True)  # no DKR read
    torch.testing.assert_close(got["DQ"], want["DQ"], rtol=0, atol=0)
    torch.testing.assert_close(got["DK"], want["DK"], rtol=1e-2, atol=1e-2)  # one 16-bit rounding
    torch.testing.assert_close(got["DANGLES"], want["DANGLES"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case_id,fin", [("N128_P64_R4_C16", True), ("N64_P128_R4_C16", True),
                                         ("N32_P64_R4_C16", False), ("N256_P64_R4_C8", False)])
def test_plan(plan_on_hopper, case_id, fin):
    kw, parent = plan_on_hopper(stage28_termsdk.plan, stage27_rotinline.plan, case_id)
    assert kw == (dict(parent, finish_dk=True) if fin else parent)


def test_finish_dk_only_with_rot_inline(case_meta):
    case = get_case("small-N128_P64_R4_C16")
    with pytest.raises(ValueError, match="finish_dk"):
        stage7_streamaux.run_with(prepare(case, device="cpu"), {}, case_meta(case), low_precision=True,
                                  finish_dk=True)


def test_off_hopper_it_is_stage26():
    rows = check_stage("stage28_termsdk", get_case("small-N64_P64_R4_C16"))
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]
