"""The fp32 explicit reference and the fp64 autograd golden must agree, and the golden must
be the true gradient of the forward it differentiates (checked by finite differences)."""
import pytest
import torch

from mamba3_perf.kernels import bwd_bwd_golden, bwd_bwd_ref, forward_cache, get_case, make_inputs
from mamba3_perf.kernels.accuracy import rel_error
from mamba3_perf.kernels.reference import GRADIENTS, _dphio, forward_output


def kw(c):
    return dict(chunk_size=c.C, rotary_dim_divisor=c.rotary_dim_divisor)


@pytest.mark.parametrize("case_id", ["pw-3", "pw-4", "pw-2", "tail-33", "tail-40", "tail-50",
                                     "small-N128_P64_R8_C8", "small-N128_P64_R1_C64"])
def test_reference_matches_golden_fp32(case_id):
    c = get_case(case_id).with_(dtype="float32")
    x = make_inputs(c, seed=1)
    ref, gold = bwd_bwd_ref(**x, **kw(c)), bwd_bwd_golden(**x, **kw(c))
    for name in GRADIENTS:
        if gold[name] is None:
            assert ref[name] is None
            continue
        assert ref[name].shape == gold[name].shape, name
        assert rel_error(ref[name], gold[name]) < 2e-6, name


def test_reference_matches_golden_low_precision():
    c = get_case("pw-6")  # fp16, reduce-O, D
    x = make_inputs(c)
    ref, gold = bwd_bwd_ref(**x, **kw(c)), bwd_bwd_golden(**x, **kw(c))
    # DQ/DK/DV are rounded to fp16 on output; DGAMMA/DMIMO_V see the fp16-cached qk_dot.
    for name in GRADIENTS:
        assert rel_error(ref[name], gold[name]) < 2e-3, name


@pytest.mark.parametrize("wrt,grad", [("v", "DV"), ("angles", "DANGLES"), ("q", None)])
def test_golden_is_the_gradient_of_the_forward(wrt, grad):
    """Directional finite differences of <y, dPhiO> (fp64) against the golden."""
    c = get_case("tail-33").with_(dtype="float32", G=2)
    x = {k: (v.double() if isinstance(v, torch.Tensor) else v) for k, v in make_inputs(c, seed=3).items()}
    gold = bwd_bwd_golden(**x, **kw(c))
    direction = torch.randn_like(x[wrt])
    dphio = _dphio(x["dout"], x["mimo_o"], c.R)

    def loss(t):
        return (forward_output(**{**x, wrt: t}, **kw(c)) * dphio).sum()

    eps = 1e-6
    fd = (loss(x[wrt] + eps * direction) - loss(x[wrt] - eps * direction)) / (2 * eps)
    if grad is None:  # q: DQ is per head, q per qk head; sum the heads of each group
        B, S, R, G, N = x["q"].shape
        dq = gold["DQ"].reshape(B, S, R, c.H, N).reshape(B, S, R, G, c.H // G, N).sum(4)
        an = (dq * direction).sum()
    else:
        an = (gold[grad] * direction).sum()
    assert torch.allclose(fd, an, rtol=1e-6, atol=1e-9), (float(fd), float(an))


def test_forward_cache_first_state_is_zero_and_qk_dot_is_bias_added_dot():
    c = get_case("pw-4")
    x = make_inputs(c)
    assert torch.count_nonzero(x["states"][:, :, 0]) == 0
    assert torch.count_nonzero(x["states"][:, :, 1]) > 0
    q = x["q"].float()[0, 5, :, 0] + x["q_bias"][0]  # h=0 reads qk head 0
    k = x["k"].float()[0, 5, :, 0] + x["k_bias"][0]
    torch.testing.assert_close(x["qk_dot"][0, 0, 5].float(), q @ k.T, rtol=1e-6, atol=1e-6)
