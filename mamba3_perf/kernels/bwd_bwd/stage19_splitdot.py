"""stage19_splitdot: stage18 with its fp32-level dots split into three TF32 passes by hand.

On CUDA every dot an fp32-level output needs runs as tf32x3. Triton 3.6 lowers each such dot to
three wgmma (lo.hi, hi.lo, hi.hi of the operands rounded to TF32), waits for each before issuing
the next, and between the second and the third replaces NaN in the partial sum by 0: one compare
and one select per accumulator element. In state_terms' N loop on N128_P64_R4_C16 (two such dots
per 16-row block) that guard alone is 80 of the loop's 686 SASS instructions (40 FSETP.NAN, 40
FSEL; `benchmarks/ptxas_stage.py` with Triton 3.6), and the kernel waits on latency, not on the
tensor cores. Here the same three passes are written out (common.fdot with SPLIT_TF32X3):
the same split rounding and order on one accumulator, no NaN guard (the operands are finite:
every input is), and the passes chained with no wait in between. Everything else is stage18.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage18_widechunk
from mamba3_perf.kernels.bwd_bwd.common import split_tf32x3
from mamba3_perf.kernels.registry import StageSpec, register_stage


def run(x: dict, out: dict, meta) -> None:
    with split_tf32x3():
        stage18_widechunk.run(x, out, meta)


STAGE = register_stage(StageSpec(
    name="stage19_splitdot",
    parent="stage18_widechunk",
    summary="CUDA: the fp32-level dots as three TF32 passes written out (no NaN guard on the "
            "partial sum, no wait between the passes) instead of Triton's tf32x3",
    entry=run,
    kernels=stage18_widechunk.STAGE.kernels,
    zero_outputs=False,
))
