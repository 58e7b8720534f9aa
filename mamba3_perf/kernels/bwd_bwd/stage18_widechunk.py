"""stage18_widechunk: stage17 with the pre and post kernels on 16 warps.

The pre and post kernels hold a chunk's whole [C, R, N] q / k tiles (rotary, its inverse,
DANGLES) and do no dot. stage17 launches them on 8 warps: at N128_P64_R4_C16 the post kernel
takes 254 registers and 688 B of spill stores per thread, one program (8 warps) per SM, and the
pre kernel, capped at 128 registers (stage16), 942 B (ptxas for sm_90). With no dot there is no
warpgroup shape to keep (the TF32 wgmma N = 8 fault of triton#10629 concerns the dot kernels
only), so the same programs can spread over 16 warps: half the tile elements per thread, at
most 128 registers (the register file / 512 threads), 16 warps per SM, and ptxas counts 422
and 96 B of spill stores. Everything else is stage17.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage17_scanpass
from mamba3_perf.kernels.bwd_bwd.common import CHUNK_LAUNCH
from mamba3_perf.kernels.registry import StageSpec, register_stage

WIDE_LAUNCH = dict(CHUNK_LAUNCH, num_warps=16)


def widens(meta) -> dict:
    """Whether the pre and the post kernel run on 16 warps for ``meta``."""
    return dict(pre=False, post=True)


def run(x: dict, out: dict, meta) -> None:
    w = widens(meta)
    stage17_scanpass.run_with(x, out, meta, pre_launch=WIDE_LAUNCH if w["pre"] else None,
                              post_launch=WIDE_LAUNCH if w["post"] else None)


STAGE = register_stage(StageSpec(
    name="stage18_widechunk",
    parent="stage17_scanpass",
    summary="the pre and post kernels (no dots) on 16 warps: half the tile per thread, fewer "
            "spills, twice the warps per SM",
    entry=run,
    kernels=stage17_scanpass.STAGE.kernels,
    zero_outputs=False,
))
