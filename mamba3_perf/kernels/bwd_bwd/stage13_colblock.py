"""stage13_colblock: stage12 with the pre and post kernels on 16-column blocks.

stage11's pre and post kernels take a whole chunk's [C, R, N] q / k tiles in one program of 8
warps: ptxas (sm_90, Triton 3.6) gives both 255 registers per thread with spills at N = 128, so
one program of 8 warps fits an SM (12.5 % occupancy) for what is a streaming, memory-bound job.
Each column n needs only itself and its rotation partner n +- N/2 (loaded separately), so the
same kernels run on a (chunks, N / 16) grid, 16 columns per program (DANGLES: a share of the
angles per program; the chunk's scalars, and PsiV / dPhiO where written, by column block 0).
ptxas at 8 warps and 16 columns: 40-80 registers, no spills, on every official shape (pre at
N = 128, P = 64, R = 4, C = 16: 255 registers and 168 B of spill stores -> 64 registers), so up
to four programs per SM. Same arithmetic per element: outputs bit-identical to stage12.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage11_steptrig, stage12_pipeaux
from mamba3_perf.kernels.registry import StageSpec, register_stage

COL_BLOCK = 16  # columns per pre / post program


def run(x: dict, out: dict, meta) -> None:
    stage11_steptrig.run_with(x, out, meta, col_block=COL_BLOCK,
                              aux_launch=stage12_pipeaux.aux_launch(meta))


STAGE = register_stage(StageSpec(
    name="stage13_colblock",
    parent="stage12_pipeaux",
    summary="the pre and post kernels on a (chunks, N / 16) grid, 16 columns per program: "
            "64-80 registers instead of 255, several programs per SM",
    entry=run,
    kernels=stage11_steptrig.STAGE.kernels,
    zero_outputs=False,
))
