"""stage12_pipeaux: stage11 with the streamed aux's two N loops software-pipelined.

The streamed aux (stage7) launched with num_stages=1: its loop over 16-column blocks of N waited
on each block's loads (rows of QR / KR scratch, q / k, the cached-state tile) before the dots that
use them, at one or two blocks of 4 warps per SM. Launched with num_stages=3, Triton's pipeliner
issues the next blocks' loads into shared memory while the current block computes. Measured on
the H200 (benchmarks/sweep_launch.py on stage10, records/h200-sweep-launch-d788887.json, aux
device time per call):

    case                 num_stages=1   2        3
    N64_P64_R4_C16       1402 us        1312     1244
    N128_P64_R4_C16      2410           2077     1878
    N16_P64_R4_C8         691            628      639
    N128_P64_R2_C32      1208           1084      986
    N64_P128_R4_C16      2530           2322     2789

so :func:`aux_launch` takes 3 stages where P <= 64 and 2 at P = 128 (its [C*R, 128] tiles leave
less room: three stages made that aux slower). The same sweep found no better launch for the
state pass, state_terms, pre or post kernels than the ones they have. Everything else is stage11.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage7_streamaux, stage11_steptrig
from mamba3_perf.kernels.registry import StageSpec, register_stage


def aux_launch(meta) -> dict:
    """The streamed aux's launch options for ``meta`` (module docstring)."""
    return dict(stage7_streamaux.STREAM_LAUNCH, num_stages=3 if meta.P <= 64 else 2)


def run(x: dict, out: dict, meta) -> None:
    stage11_steptrig.run_with(x, out, meta, aux_launch=aux_launch(meta))


STAGE = register_stage(StageSpec(
    name="stage12_pipeaux",
    parent="stage11_steptrig",
    summary="the streamed aux's N loops software-pipelined (3 stages where P <= 64, 2 at P = 128)",
    entry=run,
    kernels=stage11_steptrig.STAGE.kernels,
    zero_outputs=False,
))
