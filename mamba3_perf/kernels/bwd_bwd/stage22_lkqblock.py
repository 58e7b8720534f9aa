"""stage22_lkqblock (experiment): stage21 with the aux's first N loop (k.q^T) on 32-column blocks.

The loop accumulates lkq = sum over N of ks qr^T, a chain of dots each waiting on the last; 32
columns a step halve its steps. ptxas (Triton 3.6, specialized as on the H200) at
N128_P64_R4_C16: the aux's spill stores 644 -> 572 B per thread.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage21_halves
from mamba3_perf.kernels.registry import StageSpec, register_stage

LKQ_BLOCK = 32


def run(x: dict, out: dict, meta) -> None:
    stage21_halves.run_with(x, out, meta, lkq_block=LKQ_BLOCK)


STAGE = register_stage(StageSpec(
    name="stage22_lkqblock",
    parent="stage21_halves",
    summary="the aux's k.q^T loop on 32-column blocks (half the steps of its dependent dot chain)",
    entry=run,
    kernels=stage21_halves.STAGE.kernels,
    zero_outputs=False,
))
