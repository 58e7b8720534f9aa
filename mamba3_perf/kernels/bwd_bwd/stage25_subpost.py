"""stage25_subpost: stage24 with the post kernel on sub-chunks: fewer time steps per program.

The post kernel (inverse rotary, the diagonal terms, DANGLES; no dots) moves ~1 GB on
N128_P64_R4_C16 and is bound by neither memory nor arithmetic: Nsight Compute counted 0.87 GB of
DRAM traffic for stage17's post kernel in 597 us there (1.5 TB/s of the H200's 4.8), 254
registers and 12 % of the warps active (records/ncu-N128_P64_R4_C16/stage17_scanpass-stalls-raw.csv);
stage18 spread its [C, R, N] tile over 16 warps, still one program per SM. Every post kernel
reads per-step rows only (a step's C*R fused scratch rows, its angles, its diagonal weight
block) and a chunk's rows are contiguous in every scratch buffer, so the same kernels launched
with C = ``steps`` < C run on sub-chunks: smaller tiles per program, more programs per SM, the
same arithmetic (prod.launch_post's ``steps``). :func:`post_steps` and :func:`post_launch` say
how many steps and warps per program; ``STEPS`` / ``WARPS`` override them for a sweep
(benchmarks/sweep_knob.py).
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage24_gluonaux
from mamba3_perf.kernels.bwd_bwd.common import CHUNK_LAUNCH
from mamba3_perf.kernels.registry import StageSpec, register_stage

STEPS: int | None = None  # time steps per post program in place of post_steps' rule (a sweep's)
WARPS: int | None = None  # warps per post program in place of post_launch's rule (a sweep's)


def post_steps(meta) -> int:
    """Time steps per post program for ``meta``."""
    if STEPS is not None:
        return min(STEPS, meta.C)
    return max(meta.C // 2, 1)


def post_launch(meta) -> dict | None:
    """The post kernel's launch options for ``meta`` (None: stage18's choice)."""
    if WARPS is not None:
        return dict(CHUNK_LAUNCH, num_warps=WARPS)
    return None


def run(x: dict, out: dict, meta) -> None:
    kw = dict(post_steps=post_steps(meta))
    launch = post_launch(meta)
    if launch is not None:
        kw["post_launch"] = launch
    stage24_gluonaux.run_with(x, out, meta, **kw)


STAGE = register_stage(StageSpec(
    name="stage25_subpost",
    parent="stage24_gluonaux",
    summary="the post kernel on sub-chunks (fewer time steps per program): smaller tiles, more "
            "programs per SM, the same arithmetic",
    entry=run,
    kernels=stage24_gluonaux.STAGE.kernels,
    zero_outputs=False,
))
