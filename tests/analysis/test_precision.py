"""analysis.precision: the tensor-core schemes emulated in the fp32 reference, judged by the
golden criterion, and the per-product search (benchmarks/precision_plan.py runs it on the official
shapes)."""
import numpy as np
import pytest
import torch

from mamba3_perf.analysis import limits, precision
from mamba3_perf.bench import prepare
from mamba3_perf.kernels import get_case
from mamba3_perf.kernels.reference import PRODUCTS, bwd_bwd_ref


@pytest.fixture(scope="module")
def trial():
    c = get_case("small-N16_P64_R4_C8")
    return precision.make_trial(c, prepare(c, device="cpu"))


def test_rounding_keeps_the_formats_bits():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, generator=g) * torch.exp2(torch.randint(-20, 20, (4096,), generator=g).float())
    t = precision.round_to(x, "tf32")
    assert not (t.numpy().view(np.uint32) & 0x1FFF).any()
    assert ((t - x).abs() <= x.abs() * 2.0 ** -11).all()
    b = precision.round_to(x, "bf16")
    assert torch.equal(b, x.bfloat16().float())
    for fmt, bits in (("bf16", 16), ("tf32", 22)):
        p = precision.split(x, fmt)
        assert ((p["hi"] + p["lo"] - x).abs() <= x.abs() * 2.0 ** -bits).all()
    with pytest.raises(ValueError, match="unknown input format"):
        precision.round_to(x, "fp8")


def test_schemes_order_by_cost_and_error():
    assert precision.ORDER[0] == "bf16" and precision.ORDER[-1] == "fp32"
    assert precision.scheme_cost("bf16x3") == 3 and precision.scheme_cost("tf32x3") == 6
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)
    exact = a.double() @ b.double()

    def err(s):
        return ((precision.product(a, b, s).double() - exact).norm() / exact.norm()).item()
    assert err("fp32") < err("tf32x3") < err("bf16x3") < err("tf32") < err("bf16")


def test_fp32_plan_is_the_reference_and_hook_names_every_product(trial):
    seen = []

    def mm(name, a, b):
        seen.append(name)
        return a @ b
    t = trial
    kw = dict(chunk_size=t.case.C, rotary_dim_divisor=t.case.rotary_dim_divisor)
    out = bwd_bwd_ref(**t.x, **kw, products=mm)
    assert set(seen) == set(PRODUCTS)
    assert {m for m, _ in limits.MATMULS} <= set(PRODUCTS)
    for k, v in out.items():
        assert (v is None and t.reference[k] is None) or torch.equal(v, t.reference[k]), k
    r = precision.worst({}, [t])
    assert precision.passes(r) and max(r.values()) < 0.25  # the reference against itself: 1 / FACTOR


def test_one_bf16_pass_fails_and_three_pass(trial):
    """What the criterion sees: all-bf16 misses the fp32-level gradients by orders of magnitude;
    three bf16 passes keep them in."""
    bad = precision.worst({p: "bf16" for p in PRODUCTS}, [trial])
    assert bad["DSSDA"] > 10 and bad["DFACTOR"] > 10
    assert precision.passes(precision.worst({p: "bf16x3" for p in PRODUCTS}, [trial]))
    with pytest.raises(ValueError, match="unknown products"):
        precision.products_hook({"k.q": "bf16"})
    with pytest.raises(ValueError, match="unknown schemes"):
        precision.products_hook({"k . q^T": "fp8"})


def test_search_finds_a_passing_plan_no_dearer_than_uniform(trial):
    res = precision.search([trial], products=["k . q^T", "PsiV . dPhiO^T", "(lkq) . dPhiO"])
    assert res.alone["k . q^T"] == "bf16x3" and res.alone["(lkq) . dPhiO"] == "bf16"
    assert res.uniform == "bf16x3"
    assert precision.passes(res.plan_ratios)
    assert precision.passes(precision.worst(res.plan, [trial]))  # judged again, not taken on trust
    for name, scheme in res.plan.items():  # never below its own minimum, never above the uniform one
        assert precision.ORDER.index(res.alone[name]) <= precision.ORDER.index(scheme) <= precision.ORDER.index("bf16x3")
    assert ("(lkq) . dPhiO", "bf16x3", "bf16") in res.lowered
    # the tried table records every scheme below the chosen one as failing
    for name, scheme in res.alone.items():
        below = precision.ORDER[:precision.ORDER.index(scheme)]
        assert all(not precision.passes(res.tried[name][s]) for s in below)


def test_chunk_cost_scales_with_the_passes():
    c = get_case("N128_P64_R4_C16")
    assert sum(limits.chunk_matmul_flops(c).values()) == limits.matmul_flops(c) // (c.B * c.H * c.nchunks)
    one = precision.chunk_tensor_us(c, "bf16", limits.H100)
    assert precision.chunk_tensor_us(c, "tf32x3", limits.H100) == pytest.approx(6 * one)
    assert one == pytest.approx(8.39e6 / (7.9e14 / 132) * 1e6, rel=1e-3)


def test_fold_is_judged_in_its_own_formulation(trial):
    """worst(fold_diag=True) runs the reference in stage45's formulation: at fp32 it passes as the
    reference does; at one bf16 pass for every product, the folded diagonal terms ride on the
    weighted scores' rounding instead of the qk_dot terms' own, so DQ's ratio changes."""
    fp32 = {p: "fp32" for p in PRODUCTS}
    assert precision.passes(precision.worst(fp32, [trial], fold_diag=True))
    one = {p: "bf16" for p in PRODUCTS}
    plain, folded = (precision.worst(one, [trial], fold_diag=f) for f in (False, True))
    assert plain["DQ"] != folded["DQ"]
    assert plain["DV"] == folded["DV"]  # the value side does not see the fold
