"""stage19_splitdot: stage18 with its fp32-level dots split into three TF32 passes by hand.

On CUDA every dot an fp32-level output needs runs as tf32x3. Triton 3.6 lowers each such dot to
three wgmma (lo.hi, hi.lo, hi.hi of the operands rounded to TF32), waits for each before issuing
the next, and between the second and the third replaces NaN in the partial sum by 0: one compare
and one select per accumulator element. In state_terms' N loop on N128_P64_R4_C16 (two such dots
per 16-row block) that guard alone is 80 of the loop's 686 SASS instructions (40 FSETP.NAN, 40
FSEL; `benchmarks/ptxas_stage.py` with Triton 3.6), and the kernel waits on latency, not on the
tensor cores. Here the same three passes are written out (common.fdot with SPLIT_TF32X3):
the same split rounding and order on one accumulator, no NaN guard (the operands are finite:
every input is), and the passes chained with no wait in between. ptxas: state_terms' loop 686 ->
541 instructions, the aux's two N loops 285 -> 196 and 607 -> 576 (its spill stores 748 -> 852 B).

Measured on the H200 with every kernel split, against stage18, one process per case,
interleaved over 2 rounds, golden 288/288 (records/h200-splitdot-7463f20.json): 1.004-1.034x on
10 of the 11 official cases and regular-8x512x16x8, 0.959x on N64_P128_R4_C16; 1.012x in
geomean. Per kernel (`perf profile`, records/profile-*-splitdot-7463f20/): on N64_P128_R4_C16
the aux lost 2110 -> 2492 us while state_terms gained 1712 -> 1567 and the increments 320 -> 298;
on N128_P128_R4_C8 the aux gained 2194 -> 2133 and state_terms 3301 -> 3134; on
N128_P64_R4_C16 the aux 1381 -> 1351, state_terms unchanged. The instruction cut buys little
(the kernels wait on memory latency at two to four programs per SM, so the removed instructions
were mostly off the critical path), and the aux's [C*R, P] operands of 8192 elements (P = 128,
C*R = 64) take it past what its registers hold. So :func:`splits_aux` leaves the aux to Triton
where C*R*P >= 8192; every other fp32-level dot is split everywhere.

Measured with this rule, the same way (records/h200-splitdot-ce9dd71.json, golden 288/288):
1.005-1.035x on all 11 official cases (N64_P128_R4_C16 5.01 -> 4.84 ms: the aux as stage18's,
2110 us, state_terms 1707 -> 1565, records/profile-N64_P128_R4_C16-splitdot-ce9dd71/), 1.010x
on regular-8x512x16x8; 1.019x in geomean over the official cases.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage18_widechunk
from mamba3_perf.kernels.bwd_bwd.common import split_tf32x3
from mamba3_perf.kernels.registry import StageSpec, register_stage


AUX_ELEMS = 8192  # [C*R, P] operand elements from which the aux keeps Triton's tf32x3


def splits_aux(meta) -> bool:
    """Whether the streamed aux's fp32-level dots are split too for ``meta``: where its [C*R, P]
    operands have fewer than AUX_ELEMS elements (module docstring)."""
    return meta.C * meta.R * meta.P < AUX_ELEMS


def run_with(x: dict, out: dict, meta, **kw) -> None:
    """stage19's pipeline; ``kw``: more stage18_widechunk.run_with keywords (stage20)."""
    with split_tf32x3(aux=splits_aux(meta)):
        stage18_widechunk.run_with(x, out, meta, **kw)


def run(x: dict, out: dict, meta) -> None:
    run_with(x, out, meta)


STAGE = register_stage(StageSpec(
    name="stage19_splitdot",
    parent="stage18_widechunk",
    summary="CUDA: the fp32-level dots as three TF32 passes written out (no NaN guard on the "
            "partial sum, no wait between the passes) instead of Triton's tf32x3",
    entry=run,
    kernels=stage18_widechunk.STAGE.kernels,
    zero_outputs=False,
))
