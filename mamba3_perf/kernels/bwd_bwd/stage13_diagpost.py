"""stage13_diagpost: the qk_dot diagonal terms of dQ and dK move from the aux to the post kernel.

Those terms, dq_diag = gd^T kb and dk_diag = gd qb, have a block-diagonal weight gd (nonzero
only where key and query are the same step): per element of dQ or dK they are R multiply-adds.
The streamed aux of stages 7-12 forms them as two [C*R, C*R] x [C*R, 16] dots per N block,
loads the pre-rotation q and k for them (16-bit inputs plus bias, a gather per rank), and
stores both results as fp32 [C*R, N] rows (DQD, DKD) that the post kernel reads back: at
N128_P64_R4_C16 two of the seven 268 MB scratch tensors, written once and read once. Here the
aux stores only gd's same-step blocks, GDB [C*R, R] per chunk (R / N of the rows' size), and the
post kernel, which already holds each chunk's [C, R, N] tiles, adds sum_r g[t, r, .] x[t, r, :]
over the R ranks of the pre-rotation q / k rows, in fp32 (the aux ran them at one TF32 pass for
16-bit inputs: common.split_precisions' PLO).

Measured on the H200 with the terms moved on every shape (records/h200-diagpost-latesums-153be00.json,
stage12 / stage13 device time): 1.03-1.15x on the ten official and regular shapes with N >= 32
(N128_P64_R4_C16 4847 -> 4375 us: the aux 1865 -> 1387 us, the post kernel unchanged at ~610),
0.98x at N = 16, where the aux's two diagonal dots were 16 columns once per chunk. So
:func:`moves_diagonal` keeps stage12's aux at N < 32, and there this stage launches exactly
stage12. Where the aux does not fold (C*R > 64, not on the official grid) it runs stage12 too.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage11_steptrig, stage12_pipeaux
from mamba3_perf.kernels.registry import StageSpec, register_stage


def moves_diagonal(meta) -> bool:
    """Whether the post kernel forms the diagonal terms for ``meta``: N >= 32, where that
    measured faster than stage12 (module docstring)."""
    return meta.N >= 32


def run(x: dict, out: dict, meta) -> None:
    stage11_steptrig.run_with(x, out, meta, aux_launch=stage12_pipeaux.aux_launch(meta),
                              diag_blocks=moves_diagonal(meta))


STAGE = register_stage(StageSpec(
    name="stage13_diagpost",
    parent="stage12_pipeaux",
    summary="the qk_dot diagonal terms of dQ / dK are formed in the post kernel from per-step "
            "[R, R] weight blocks, not by two dots per N block in the aux stored as fp32 rows",
    entry=run,
    kernels=stage12_pipeaux.STAGE.kernels,
    zero_outputs=False,
))
