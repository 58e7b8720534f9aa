"""How many tensor-core passes each bwd_bwd product needs, measured on the fp32 reference.

Tensor cores take bf16 or TF32 inputs. A product that must be good to fp32 level is built from
several passes over split operands (x = hi + lo, each part rounded to the input format), as
Triton's tf32x3 does. This module emulates such schemes inside the fp32 reference (its
``products`` hook, :data:`reference.PRODUCTS`), judges the 12 gradients by the golden criterion
(accuracy.check: error <= 5 x the fp32 reference's + 1e-5), and searches for the cheapest scheme
per product that keeps every gradient within it. The result says how much tensor work one chunk
of a fused kernel must do at the least, before any question of how well a kernel issues it.

What the emulation assumes: each pass rounds its operands to nearest (bf16: torch's RNE; TF32:
ties away, as PTX cvt.rna.tf32.f32), multiplies exactly and accumulates in fp32 (fp32 matmul of
the rounded parts), small passes first; everything between products stays fp32, as in the
reference. A tensor core's own TF32 truncation of a ``lo`` part is not modelled.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from mamba3_perf.analysis.limits import DeviceSpec, chunk_matmul_flops
from mamba3_perf.kernels.accuracy import check
from mamba3_perf.kernels.cases import Case, get_case
from mamba3_perf.kernels.reference import GRADIENTS, PRODUCTS, bwd_bwd_ref

# scheme -> (input format, passes as (part of a, part of b)); "hi" is the operand rounded to
# the format, "lo" the rounded remainder x - hi. "fp32" is the plain fp32 product.
SCHEMES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "bf16": ("bf16", (("hi", "hi"),)),
    "bf16x2a": ("bf16", (("lo", "hi"), ("hi", "hi"))),
    "bf16x2b": ("bf16", (("hi", "lo"), ("hi", "hi"))),
    "tf32": ("tf32", (("hi", "hi"),)),
    "bf16x3": ("bf16", (("lo", "hi"), ("hi", "lo"), ("hi", "hi"))),
    "tf32x3": ("tf32", (("lo", "hi"), ("hi", "lo"), ("hi", "hi"))),
    "fp32": ("fp32", ()),
}
# Cost of one pass in dense bf16-pass units: the TF32 tensor rate is half the bf16 rate (H100 /
# H200: 494.7 against 989.4 TFLOP/s dense); an fp32 product runs on the CUDA cores, 67 TFLOP/s
# fp32 FMA against the same 989.4 (H100 SXM5 spec sheet): about 15 bf16 passes.
PASS_COST = {"bf16": 1.0, "tf32": 2.0}
FP32_COST = 15.0


def scheme_cost(scheme: str) -> float:
    """Tensor work of ``scheme`` in bf16-pass units (see :data:`PASS_COST`)."""
    fmt, passes = SCHEMES[scheme]
    return FP32_COST if fmt == "fp32" else PASS_COST[fmt] * len(passes)


# the order the search tries schemes in: cheapest first, ties in the order listed
ORDER = tuple(sorted(SCHEMES, key=lambda s: (scheme_cost(s), list(SCHEMES).index(s))))


def round_to(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """fp32 ``x`` rounded to ``fmt`` ('bf16': nearest-even; 'tf32': 10 mantissa bits, nearest
    with ties away from zero), returned as fp32."""
    x = x.float()
    if fmt == "bf16":
        return x.to(torch.bfloat16).float()
    if fmt == "tf32":
        bits = x.contiguous().view(torch.int32)
        return torch.bitwise_and(bits + 0x1000, -0x2000).view(torch.float32)
    raise ValueError(f"unknown input format {fmt!r}; expected bf16 or tf32")


def split(x: torch.Tensor, fmt: str) -> dict[str, torch.Tensor]:
    """``x`` as {"hi", "lo"}: hi = x rounded to ``fmt``, lo = (x - hi) rounded to it."""
    hi = round_to(x, fmt)
    return {"hi": hi, "lo": round_to(x.float() - hi, fmt)}


def product(a: torch.Tensor, b: torch.Tensor, scheme: str) -> torch.Tensor:
    """a @ b as ``scheme`` computes it (fp32 accumulation of the passes, small ones first)."""
    fmt, passes = SCHEMES[scheme]
    if fmt == "fp32":
        return a.float() @ b.float()
    pa, pb = split(a, fmt), split(b, fmt)
    acc = None
    for part_a, part_b in passes:
        term = pa[part_a] @ pb[part_b]
        acc = term if acc is None else acc + term
    return acc


def products_hook(plan: dict[str, str]) -> Callable:
    """The reference's ``products`` hook for ``plan`` (product name -> scheme; fp32 where absent)."""
    unknown = set(plan) - set(PRODUCTS)
    if unknown:
        raise ValueError(f"unknown products {sorted(unknown)}; known: {', '.join(PRODUCTS)}")
    bad = {s for s in plan.values() if s not in SCHEMES}
    if bad:
        raise ValueError(f"unknown schemes {sorted(bad)}; known: {', '.join(SCHEMES)}")

    def mm(name: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return product(a, b, plan.get(name, "fp32"))
    return mm


# ------------------------------------------------------------------------------ judging
@dataclass
class Trial:
    """One case's inputs with its golden and fp32 reference outputs."""

    case: Case
    x: dict
    golden: dict
    reference: dict


def make_trial(case: Case, x: dict) -> Trial:
    from mamba3_perf.kernels.checking import oracles

    g, r = oracles(x, case)
    return Trial(case, x, g, r)


def worst(plan: dict[str, str], trials: Iterable[Trial], *, fold_diag: bool = False) -> dict[str, float]:
    """Per gradient, the largest error / bound over ``trials`` of the reference run at ``plan``
    (<= 1 everywhere: the plan passes the golden criterion on every trial); ``fold_diag``: in
    stage45's formulation (reference.bwd_bwd_ref's, the qk_dot diagonal terms through the
    weighted scores' products)."""
    hook = products_hook(plan)
    out = dict.fromkeys(GRADIENTS, 0.0)
    for t in trials:
        cand = bwd_bwd_ref(**t.x, chunk_size=t.case.C, rotary_dim_divisor=t.case.rotary_dim_divisor,
                           products=hook, fold_diag=fold_diag)
        for row in check(cand, t.golden, t.reference):
            out[row.gradient] = max(out[row.gradient], row.err / row.bound)
    return out


def passes(ratios: dict[str, float]) -> bool:
    return all(v <= 1.0 for v in ratios.values())


# ------------------------------------------------------------------------------ search
@dataclass
class PlanSearch:
    """The search's findings: each product's cheapest passing scheme with the others fp32
    (``alone``, with the worst gradient ratio of every scheme tried), the cheapest single scheme
    that passes for every product at once (``uniform``), and the plan from there (``plan``): each
    product lowered, one at a time, to the cheapest scheme that keeps every gradient in bound with
    the others as they stand (``lowered``: (product, from, to))."""

    alone: dict[str, str] = field(default_factory=dict)
    tried: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    uniform: str = ""
    plan: dict[str, str] = field(default_factory=dict)
    plan_ratios: dict[str, float] = field(default_factory=dict)
    lowered: list[tuple[str, str, str]] = field(default_factory=list)


def search(trials: list[Trial], products: Iterable[str] = PRODUCTS, *, progress=None) -> PlanSearch:
    """Cheapest scheme per product alone (schemes in :data:`ORDER`); the cheapest uniform scheme
    that passes; then, from that plan, each product (most FLOPs first; the qk_dot terms last) taken
    down to the cheapest scheme at or above its ``alone`` minimum that keeps the whole plan passing.
    Each step keeps a passing plan, so the result passes by construction (and is judged again)."""
    products = list(products)
    res = PlanSearch()

    def judge(plan, name, scheme):
        r = worst(plan, trials)
        if progress:
            progress(name, scheme, r)
        return r

    for name in products:
        res.tried[name] = {}
        for scheme in ORDER:
            r = judge({name: scheme}, name, scheme)
            res.tried[name][scheme] = r
            if passes(r):
                res.alone[name] = scheme
                break
    for scheme in ORDER:
        ratios = judge({p: scheme for p in products}, "all", scheme)
        if passes(ratios):
            res.uniform = scheme
            break
    plan = {p: res.uniform for p in products}
    order = sorted(products, key=lambda p: -_product_weight(p))
    for name in order:
        lo = ORDER.index(res.alone.get(name, res.uniform))
        for scheme in ORDER[lo:ORDER.index(plan[name])]:
            cand = dict(plan, **{name: scheme})
            r = judge(cand, name, scheme)
            if passes(r):
                res.lowered.append((name, plan[name], scheme))
                plan, ratios = cand, r
                break
    res.plan, res.plan_ratios = plan, ratios
    return res


def _product_weight(name: str) -> int:
    """A product's FLOPs on a chunk of N128_P64_R4_C16 (the order the search lowers them in); the
    qk_dot terms, not in limits.MATMULS, 0."""
    return chunk_matmul_flops(get_case("N128_P64_R4_C16")).get(name, 0)


# ------------------------------------------------------------------------------ cost
def chunk_tensor_us(case: Case, plan: dict[str, str] | str, device: DeviceSpec) -> float:
    """µs of one SM's tensor cores for one chunk's products at ``plan`` (a plan dict, or one
    scheme for every product), at the device's dense bf16 rate shared over its SMs. The products
    are limits.MATMULS (limits.chunk_matmul_flops): the qk_dot terms are elementwise work in a
    kernel and left out."""
    per_sm = device.bf16_matrix_flops / device.sm_count
    total = sum(f * scheme_cost(plan if isinstance(plan, str) else plan.get(name, "fp32"))
                for name, f in chunk_matmul_flops(case).items())
    return total / per_sm * 1e6
