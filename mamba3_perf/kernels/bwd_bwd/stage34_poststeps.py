"""stage34_poststeps: stage33 with stage11's post kernel on fewer time steps per program where a
chunk has C = 8 steps.

stage25 chose the post kernel's steps per program ([steps, R, N] tiles of 2048 elements, at most
8 steps; the whole chunk at R >= 8) from an H200 sweep of 16, 8 and 4 steps. On an H100,
sweeping 1 and 2 as well (`benchmarks/sweep_knob.py --stage stage33_chunksum --knob
stage25_subchunk.POST_STEPS=... --knob stage25_subchunk.POST_WARPS=...`, golden in every
combination; records/h100-sweep-poststeps-c8-c21a2ad.json, h100-sweep-poststeps-r8-c21a2ad.json,
h100-sweep-poststeps-c21a2ad.json):

* where stage11's post kernel runs a chunk of C*R = 32 rows at N >= 128 (N256_P64_R4_C8,
  N128_P128_R4_C8), one step per program ([1, 4, N] tiles, 4 warps) took the post kernel from
  1189 to 842 us and from 671 to 428 us, the whole stage 5.0 % and 4.3 % faster (ptxas: 71
  registers a thread instead of 128, 48 instead of 151, so 7 and 10 of its 4-warp blocks an SM
  instead of 4 and 3, to hide the global loads it waits on);
* at R = 8, C = 8 (N128_P64_R8_C8), half chunks of 4 steps on 8 warps instead of whole chunks on
  16: the post kernel 1243 -> 1181 us, the stage 1.2 % faster;
* on the eight other official shapes one or two steps made the post kernel slower (1 step:
  N64_P64_R4_C16 218 -> 404 us, N128_P64_R4_C16 412 -> 526, N16_P64_R4_C8 81 -> 218), so
  stage25's rule stays there.

The same post kernels and arithmetic as stage33, launched on sub-chunks (prod.launch_post's
``steps``); portable Triton, so this stage runs everywhere stage33 does.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage21_halves, stage25_subchunk, stage33_chunksum
from mamba3_perf.kernels.bwd_bwd.common import CHUNK_LAUNCH
from mamba3_perf.kernels.registry import StageSpec, register_stage


def post_plan(meta) -> dict:
    """The post kernel's steps and launch for ``meta`` where this stage changes them (module
    docstring), else {}: one step where stage11's post kernel runs C*R = 32 rows at N >= 128; four
    steps on 8 warps at R >= 8, C = 8."""
    if meta.R >= 8 and meta.C == 8:
        return dict(post_steps=4, post_launch=dict(CHUNK_LAUNCH, num_warps=8))
    if meta.C * meta.R == 32 and meta.C == 8 and meta.N >= 128 and stage21_halves.post_kernel(meta) is None:
        return dict(post_steps=1)
    return {}


def plan(x: dict, meta) -> dict:
    """This stage's keywords over stage25's: stage33's and :func:`post_plan`'s."""
    return dict(stage33_chunksum.plan(x, meta), **post_plan(meta))


def run(x: dict, out: dict, meta) -> None:
    stage25_subchunk.run_with(x, out, meta, **plan(x, meta))


STAGE = register_stage(StageSpec(
    name="stage34_poststeps",
    parent="stage33_chunksum",
    summary="stage33 with stage11's post kernel on one step per program where C*R = 32 and N >= 128, "
            "and on half chunks of 8 warps at R = 8, C = 8",
    entry=run,
    kernels=stage33_chunksum.STAGE.kernels,
    zero_outputs=False,
))
