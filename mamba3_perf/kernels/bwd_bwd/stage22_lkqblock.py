"""stage22_lkqblock: stage21 with the aux's first N loop (k.q^T) on 32-column blocks.

The aux's first loop accumulates lkq = sum over N of ks qr^T, a chain of dots each waiting on
the last, 16 columns a step (stage7's AUX_NBLOCK, which the second loop's [C*R, 16] result
tiles need). With 32 columns a step the chain has half the steps; the second loop keeps 16.
ptxas (Triton 3.6, specialized as on the H200) at N128_P64_R4_C16: the aux's spill stores 644
-> 572 B per thread.

Measured on the H200 against stage21, per-kernel device time, both stages in one process
(`perf profile`, golden all passed). First on every shape of five (records/profile-*-lkqblock-09c88e0/):
the aux 1601 -> 1513 us on N128_P64_R4_C16, 3181 -> 3054 on N128_P64_R8_C8, 1092 -> 1046 on
N64_P64_R4_C16, 839 -> 826 on N32_P64_R4_C16, but 2084 -> 2196 on N64_P128_R4_C16 (0.977x in
all), whose [C*R, P] operands of 8192 elements already fill the aux's registers (stage19 and
stage20 found the same bound). So :func:`widens_lkq` takes it where C*R*P < 8192
(stage19_splitdot.splits_aux). With that rule over the official grid and regular-8x512x16x8
(records/profile-grid-lkqblock-2c277c1/): 1.010-1.030x where it applies (N128_P64_R4_C16 3620
-> 3527 us, N128_P128_R4_C8 7121 -> 6917, N128_P64_R1_C64 972 -> 945), 1.005x and 1.001x where
it does not (N16: a 16-column N, N64_P128); 1.019x in geomean over the official cases.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage19_splitdot, stage21_halves
from mamba3_perf.kernels.registry import StageSpec, register_stage

LKQ_BLOCK = 32  # N columns per step of the aux's first loop where widens_lkq


def widens_lkq(meta) -> bool:
    """Whether the aux's first loop takes LKQ_BLOCK columns a step for ``meta`` (module
    docstring): where its [C*R, P] operands have fewer than 8192 elements."""
    return stage19_splitdot.splits_aux(meta)


def run_with(x: dict, out: dict, meta, **kw) -> None:
    """stage22's pipeline; ``kw``: more stage21_halves.run_with keywords (stage23)."""
    stage21_halves.run_with(x, out, meta, lkq_block=LKQ_BLOCK if widens_lkq(meta) else None, **kw)


def run(x: dict, out: dict, meta) -> None:
    run_with(x, out, meta)


STAGE = register_stage(StageSpec(
    name="stage22_lkqblock",
    parent="stage21_halves",
    summary="the aux's k.q^T loop on 32-column blocks where its [C*R, P] operands are < 8192 "
            "elements (half the steps of its dependent dot chain)",
    entry=run,
    kernels=stage21_halves.STAGE.kernels,
    zero_outputs=False,
))
