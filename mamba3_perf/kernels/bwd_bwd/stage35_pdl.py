"""stage35_pdl: stage34 with every kernel launched as a programmatic dependent launch on Hopper.

A stage call is six kernels in a row on one stream (pre, aux, scan, state_terms, chunk sums,
post). Each one starts only once the one before it has finished and the GPU has launched it:
its blocks reach the SMs a launch latency after the last block of its predecessor ends, and the
SMs that predecessor's last wave leaves idle wait meanwhile. Timed on an H100 on the official
grid, stage34 took 1.171x TileLang's time in geomean launched one after another
(records/h100-poststeps-vs-tilelang-5f8d755.json) and 1.155x in CUDA-graph replays
(records/h100-poststeps-vs-tilelang-graph-e9d48ad.json, which leave out the host's launch work
but not the gaps between kernels), so the launches cost about 1.4 % there.

Here each kernel runs common.grid_dependency (gluon_common's in the Gluon ones) before anything
else: ``griddepcontrol.wait`` (the predecessor has finished, its stores visible), then
``griddepcontrol.launch_dependents``; and launches with ``launch_pdl`` (kernels.launching's
:func:`~mamba3_perf.kernels.launching.dependent_launches`), so the next kernel is launched as soon
as every block of this one has started, and its blocks wait on the SMs for this one to end.
The arithmetic and the kernels are stage34's; the constexpr PDL is False everywhere else, where
the call compiles to nothing. On Hopper GPUs only (common.is_hopper: compute capability 9;
griddepcontrol itself needs 9 or later): elsewhere (the interpreter, Ascend, other GPUs) this
stage is stage34. A kernel another plan of stage34 launches without the parameter (shapes off
the official grid) launches as in stage34: a plain launch waits for its whole predecessor.
"""
from __future__ import annotations

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.bwd_bwd import stage34_poststeps
from mamba3_perf.kernels.bwd_bwd.common import is_hopper
from mamba3_perf.kernels.registry import StageSpec, register_stage


def applies(x: dict) -> bool:
    """Whether this stage launches its kernels as dependent launches on ``x``'s device."""
    return is_hopper(x["q"].device)


def run(x: dict, out: dict, meta) -> None:
    with launching.dependent_launches(applies(x)):
        stage34_poststeps.run(x, out, meta)


STAGE = register_stage(StageSpec(
    name="stage35_pdl",
    parent="stage34_poststeps",
    summary="stage34 with each kernel a programmatic dependent launch (waits for its predecessor on the SM "
            "instead of behind a launch), Hopper only",
    entry=run,
    kernels=stage34_poststeps.STAGE.kernels,
    zero_outputs=False,
    hopper_only=True,
))
