"""stage19_splitdot: the hand-split TF32 passes of common.fdot, checked on the CPU with CUDA's
TF32 emulated (conftest.cuda_precisions), and where its split precision is chosen."""
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from mamba3_perf.kernels import get_case, make_inputs
from mamba3_perf.kernels.bwd_bwd import common, stage19_splitdot
from mamba3_perf.kernels.checking import check_stage


@triton.jit
def _split_kernel(X, HI, LO, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    hi, lo = common.tf32_split(tl.load(X + o))
    tl.store(HI + o, hi)
    tl.store(LO + o, lo)


def test_tf32_split_is_exact_and_rounds_to_nearest_tf32():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, generator=g) * torch.exp2(torch.randint(-30, 30, (4096,), generator=g).float())
    # ties: a set bit 12 alone below the TF32 mantissa rounds away from zero
    x[:4] = torch.tensor([1 + 2.0 ** -11, -(1 + 2.0 ** -11), 1 + 3 * 2.0 ** -11, 2.0 ** -11])
    hi, lo = torch.empty_like(x), torch.empty_like(x)
    _split_kernel[(1,)](x, hi, lo, BLOCK=4096)
    assert torch.equal(hi + lo, x)
    bits = hi.numpy().view(np.uint32)
    assert not (bits & 0x1FFF).any()  # 10 mantissa bits left
    assert (lo.abs() <= x.abs() * 2.0 ** -11).all()  # to nearest
    assert hi[:4].tolist() == [1 + 2.0 ** -10, -(1 + 2.0 ** -10), 1 + 2.0 ** -9, 2.0 ** -11]


def test_split_precision_only_in_its_scope_and_only_for_the_fp32_level_dots():
    assert common.dot_precision("cuda") == "tf32x3"
    with common.split_tf32x3():
        assert common.dot_precision("cuda") == common.SPLIT_TF32X3
        assert common.dot_precision("cuda", low=True) == "tf32"
        assert common.dot_precision("cpu") == "ieee"
    assert common.dot_precision("cuda") == "tf32x3"


@pytest.mark.parametrize("states_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("case_id", ["pw-1", "pw-2", "small-N128_P64_R4_C16", "small-N128_P64_R2_C32",
                                     "small-N64_P128_R4_C16"])
def test_split_passes_the_golden_with_tf32_emulated(cuda_precisions, case_id, states_dtype):
    """Every fp32-level dot as three TF32 passes: within the golden bound (a single pass, or the
    hi.hi pass alone, is not: test_mixprec.test_split_is_what_passes)."""
    c = get_case(case_id)
    rows = check_stage("stage19_splitdot", c, inputs=make_inputs(c, states_dtype=states_dtype))
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]


def test_dropping_the_low_passes_fails(cuda_precisions, monkeypatch):
    """The check above can fail: with lo zeroed (fdot = the hi.hi pass, one TF32 pass of
    rounded operands) the fp32-level gradients miss the bound."""
    monkeypatch.setattr(common, "tf32_split", _hi_only)
    c = get_case("pw-1")
    rows = check_stage("stage19_splitdot", c, inputs=make_inputs(c, states_dtype=torch.float32))
    assert {"DSSDA", "DFACTOR"} <= {r.gradient for r in rows if not r.passed}


_split = common.tf32_split


@triton.jit
def _hi_only(x):
    hi, _lo = _split(x)
    return hi, x * 0.0


@pytest.mark.parametrize("case_id,aux", [
    ("small-N64_P128_R4_C16", False), ("small-N128_P128_R4_C8", True), ("small-N128_P64_R4_C16", True),
    ("small-N128_P64_R1_C64", True), ("small-N16_P64_R4_C8", True),
])
def test_the_aux_keeps_tritons_passes_by_the_measured_rule(case_meta, case_id, aux):
    assert stage19_splitdot.splits_aux(case_meta(case_id)) is aux


def test_the_aux_can_be_left_to_triton():
    with common.split_tf32x3(aux=False):
        assert common.dot_precision("cuda", aux=True) == "tf32x3"
        assert common.dot_precision("cuda") == common.SPLIT_TF32X3
    with common.split_tf32x3():
        assert common.dot_precision("cuda", aux=True) == common.SPLIT_TF32X3
