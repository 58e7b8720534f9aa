"""stage19_inlinerot: stage18 with the rotated q / k rows formed where they are read.

stage18's pre kernel writes the rotated rows QR and KR ([B,H,nc,C*R,N] fp32: 268 MB each on
N128_P64_R4_C16) and four kernels read them back from HBM: the streamed aux twice each (its two
N walks), the increment kernel QR, state_terms KR. ncu on stage17 (same kernels;
records/ncu-N128_P64_R4_C16/stage17_scanpass-stalls-raw.csv) counts 6.14 GB of DRAM traffic,
of which these rows are about 2.1 GB: 0.54 GB of the pre kernel's 0.60, ~1.07 of the aux's
2.17, ~0.27 of each of the increments' 0.59 and state_terms' 1.39.

Here the pre kernel writes only the per-step scalars and cos / sin of the angles
([B,H,S,RD] each, 17 MB at N = 128), and each reader forms its [C*R, NB] block of rotated rows
from the 16-bit q / k (8 MB each on the official grid, G = 1: every head reads the same rows,
so they stay in L2), the bias and the cos / sin rows, with the pre kernel's arithmetic
(common.rotated_rows): two 16-bit loads, the bias and trig loads and three multiply-adds per
element in place of one fp32 load from HBM. Where stage10's readers take the inputs (P <= 64,
32 <= N <= 128) and the aux folds; elsewhere this stage is stage18.
"""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels.bwd_bwd import stage7_streamaux, stage10_fewscratch, stage18_widechunk
from mamba3_perf.kernels.bwd_bwd.common import blocks, chunk_coords, store_chunk_scalars
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage

TRIG_LAUNCH = dict(num_warps=4)


@triton.jit
def bwd_bwd_pre_trig_kernel(
    DACS, DACSREV, DT, TRAP, SEGSUM, ANG,
    GAM_S, TS_S, ECS_S, EREV_S, WT_S, DECAY_S, COS_S, SIN_S,
    S, H, RD,
    C: tl.constexpr, BRD: tl.constexpr,
):
    """One chunk's per-step scalars (as every pre kernel stores them) and cos / sin of its
    angles, [C, RD] into COS / SIN [B,H,S,RD]: all the pre kernel leaves when the readers form
    the rotated rows themselves."""
    b, h, c, bh, bhc = chunk_coords(H, S // C)
    tc = tl.arange(0, C)
    j = tl.arange(0, BRD)[None, :]
    mj = j < RD
    tt = c * C + tc[:, None]
    a = tl.load(ANG + ((b * S + tt) * H + h) * RD + j, mask=mj, other=0.0)
    tl.store(COS_S + (bh * S + tt) * RD + j, tl.cos(a), mask=mj)
    tl.store(SIN_S + (bh * S + tt) * RD + j, tl.sin(a), mask=mj)
    store_chunk_scalars(DT, TRAP, DACS, DACSREV, SEGSUM, GAM_S, TS_S, ECS_S, EREV_S, WT_S, DECAY_S,
                        bh, bhc, c, tc, S, C)


def launch_pre_trig(x: dict, s: dict, meta, *, inputs: bool = True) -> None:
    """stage1_pre.launch_pre's signature; only with ``inputs`` (the readers load q / k, v, dout)."""
    if not inputs:
        raise ValueError("the trig pre kernel writes no q / k / value rows: its readers must load the inputs")
    bwd_bwd_pre_trig_kernel[(meta.B * meta.H * meta.nchunks,)](
        x["da_cs"], x["da_cs_rev"], x["dt"], x["trap"], x["segsum"], x["angles"],
        s["GAM"], s["TS"], s["ECS"], s["EREV"], s["WT"], s["DECAY"], s["COS"], s["SIN"],
        meta.S, meta.H, meta.RD,
        C=meta.C, BRD=blocks(meta)["BRD"], **TRIG_LAUNCH,
    )


def forms_rows(meta) -> bool:
    """Whether the readers form the rotated rows for ``meta``: where stage10's readers load the
    inputs (stage10_fewscratch.reads_inputs) and the aux folds (every official shape does)."""
    return stage10_fewscratch.reads_inputs(meta) and stage7_streamaux.folds(meta)


def run(x: dict, out: dict, meta) -> None:
    if forms_rows(meta):
        stage18_widechunk.run_with(x, out, meta, pre=launch_pre_trig, rot_in=True)
    else:
        stage18_widechunk.run(x, out, meta)


_S18 = stage18_widechunk.STAGE.kernels
STAGE = register_stage(StageSpec(
    name="stage19_inlinerot",
    parent="stage18_widechunk",
    summary="no rotated q / k rows in HBM: the pre kernel stores cos / sin per step, and the aux, "
            "increments and state_terms rotate the 16-bit q / k blocks they read",
    entry=run,
    # stage18's pre kernel stays in the list: the shapes outside forms_rows launch it
    kernels=(KernelSpec("bwd_bwd_pre_trig_kernel", Tag.PRE, "per-step scalars and cos / sin of the angles"),)
    + _S18,
    zero_outputs=False,
))
