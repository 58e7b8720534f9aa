"""stage18_widechunk: stage17 with the post kernel on 16 warps where its tile is large.

The pre and post kernels hold a chunk's whole [C, R, N] q / k tiles (rotary, its inverse,
DANGLES) and do no dot. stage17 launches them on 8 warps: at N128_P64_R4_C16 the post kernel
takes 254 registers and 688 B of spill stores per thread, one program (8 warps) per SM, and the
pre kernel, capped at 128 registers (stage16), 942 B (ptxas for sm_90). With no dot there is no
warpgroup shape to keep (the TF32 wgmma N = 8 fault of triton#10629 concerns the dot kernels
only), so the same programs can spread over 16 warps: half the tile elements per thread, at
most 128 registers (the register file / 512 threads), 16 warps per SM; ptxas counts 422 and
100 B of spill stores.

Measured on the H200 against stage17, one process per case, interleaved over 2 rounds, golden
288/288 in each run:

* both kernels on 16 warps (records/h200-widechunk-0962c2f.json): 0.93-1.07x; per kernel on
  N128_P64_R4_C16 (records/profile-N128_P64_R4_C16-widechunk-0962c2f/) the post kernel gained
  (608 -> 520 us) and the pre kernel lost (303 -> 419 us: one 16-warp program per SM where the
  capped 8-warp kernel ran two), so the pre kernel stays as stage16 launches it (that run's
  code: commit 0962c2f);
* the post kernel alone on 16 warps (records/h200-widechunk-c82ff08.json): 1.017-1.090x where
  its [C, R, N] tile has C*R*N >= 8192 elements and N <= 128 (N128_P64_R4_C16 3.94 -> 3.85 ms,
  N128_P64_R1_C64 1.27 -> 1.17), 1.002x at N256_P64_R4_C8, 0.95-0.99x where C*R*N = 4096 or
  fewer (the N <= 64 shapes, N128_P128_R4_C8, the regular shape): there 8 warps hold the
  tile without spilling much, and 16 only halve the programs per SM.

So :func:`widens` takes the post kernel to 16 warps where C*R*N >= 8192 (the same threshold as
stage16's cap of the pre kernel); elsewhere this stage is stage17.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage17_scanpass
from mamba3_perf.kernels.bwd_bwd.common import CHUNK_LAUNCH
from mamba3_perf.kernels.registry import StageSpec, register_stage

WIDE_LAUNCH = dict(CHUNK_LAUNCH, num_warps=16)
WIDE_ELEMS = 8192  # [C, R, N] tile elements from which the post kernel runs on 16 warps


def widens(meta) -> bool:
    """Whether the post kernel runs on 16 warps for ``meta``: where its [C, R, N] tile has
    WIDE_ELEMS elements or more (module docstring; the pre kernel stays as stage16 launches it)."""
    return meta.C * meta.R * meta.N >= WIDE_ELEMS


def run_with(x: dict, out: dict, meta, **kw) -> None:
    """stage18's pipeline; ``kw``: more stage17_scanpass.run_with keywords (stage20), a
    ``post_launch`` among them in place of this stage's (stage25)."""
    kw.setdefault("post_launch", WIDE_LAUNCH if widens(meta) else None)
    stage17_scanpass.run_with(x, out, meta, **kw)


def run(x: dict, out: dict, meta) -> None:
    run_with(x, out, meta)


STAGE = register_stage(StageSpec(
    name="stage18_widechunk",
    parent="stage17_scanpass",
    summary="the post kernel (no dots) on 16 warps where its [C, R, N] tile has 8192+ elements: "
            "half the tile per thread, fewer spills, twice the warps per SM",
    entry=run,
    kernels=stage17_scanpass.STAGE.kernels,
    zero_outputs=False,
))
