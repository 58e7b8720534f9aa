"""stage36_chainscan: stage34 with the dstates recurrence carried by the Gluon aux itself, as a
chained scan across its programs, so the scan kernel and two of DST's four passes over HBM go.

In stage34, where the Gluon aux runs (nine of the eleven official shapes), the aux stores each
chunk's dstates increment into DST ([B, H, nchunks, N, P] fp32), stage17's scan reads and rewrites
all of it in place, and state_terms reads it: four passes over a buffer of 0.27 GB
(N128_P64_R4_C16) to 1.07 GB (N128_P128_R4_C8, N256-sized), 43 % of the stage's DRAM bytes on
N128_P128_R4_C8 by the records of stage32 (README, "What bounds stage26's kernels now").

Here (aux_gluon's CHAIN) the aux's programs start in ticket order, every (b, h)'s last chunk
first, and at each step of their N walk wait for the next chunk's program to have stored that
block's dstates rows (a flag per chunk and step, acquire / release at GPU scope), read them back
from L2, apply stage17's scan step over their own chunks' increments and store the dstates of the
chunk before theirs. DST is written once and read once (by state_terms), the scan is not launched.
A program waits only on a lower ticket, so on a program that has started (gluon_common.chain_index).
The arithmetic of each dstates element is the scan's, in the same order (fp32 multiply-add per
chunk from the last), so DST holds the same values; elsewhere (no Gluon aux: N16_P64_R4_C8,
N256_P64_R4_C8, non-Hopper devices) this stage is stage34.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage25_subchunk, stage34_poststeps
from mamba3_perf.kernels.registry import StageSpec, register_stage


# steps of the aux's N walk a flag covers (aux_gluon's CHAIN): each flag's acquire and release
# fence the program's memory, so fewer flags cost less, while the program after must then wait
# for more of the walk before it. 0: no chain, stage34's launches (the sweep's baseline)
STEPS_PER_FLAG = 2


def run(x: dict, out: dict, meta) -> None:
    stage25_subchunk.run_with(x, out, meta, **stage34_poststeps.plan(x, meta), chain_scan=STEPS_PER_FLAG)


STAGE = register_stage(StageSpec(
    name="stage36_chainscan",
    parent="stage34_poststeps",
    summary="stage34 with the dstates scan carried across the Gluon aux's programs (chunks in ticket "
            "order, a flag per chunk and step): no scan kernel, DST written once",
    entry=run,
    kernels=stage34_poststeps.STAGE.kernels,
    zero_outputs=False,
    hopper_only=True,
))
