"""stage43_postcap: stage42 with, where stage34 runs stage11's post kernel on half chunks of 8
warps (R >= 8, C = 8), its registers capped at 80: three post programs per SM where two ran.

On N128_P64_R8_C8 the post kernel is the outlier of stage41's per-kernel times: 1174 us for 1.71
GB of compulsory bytes (1.46 TB/s, where the pre kernel, the scan and state_terms move theirs at
2.4-2.9 TB/s; records/h100-kernels-streamregs-dc9291a.json), and its source page
(records/ncu-source-post-r8-h100-e74275a/) puts 35 % of its stall samples on global loads (long
scoreboard): a latency-bound kernel, two programs of 256 threads an SM at 128 registers a thread.
At 80 three fit, with 228 B of spills a thread (ptxas, Triton 3.6, sm_90: ``benchmarks/ptxas_stage.py
stage42_precap 128 64 8 8 --kernel post --maxnreg 80``; at 64, four programs, 488 B), as stage42
did for the pre kernel at P = 128 (351 -> 282 us on N128_P128_R4_C8 with no spills).

So :func:`changes`: stage34's plan for ``meta`` launches the post kernel on 8 warps (R >= 8, C =
8), on a Hopper GPU. Elsewhere, on other GPUs and on the interpreter, this stage is stage42 (its
outputs are stage42's bit for bit). Written before it was measured: its first measurement is the
ladder beside stage42 and TileLang (README, "stage43_postcap").
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage34_poststeps, stage38_bf16aux, stage42_precap
from mamba3_perf.kernels.bwd_bwd.common import is_hopper
from mamba3_perf.kernels.registry import StageSpec, register_stage

# knob (benchmarks/sweep_knob.py --knob stage43_postcap.POST_REGS=0,1): 0 runs stage42
POST_REGS: bool = True

# the post kernel's registers a thread where this stage changes stage42: three programs of 256
# threads in an SM's 65536
POST_MAXNREG: int = 80


def changes(meta) -> bool:
    """Whether this stage launches anything other than stage42's kernels for ``meta``: stage34's
    post kernel on 8 warps (its plan at R >= 8, C = 8)."""
    launch = stage34_poststeps.post_plan(meta).get("post_launch")
    return bool(POST_REGS and launch and launch["num_warps"] == 8)


def keywords(x: dict, meta) -> dict:
    """This stage's stage38_bf16aux.run_with keywords for ``x`` and ``meta``: stage42's, and where
    :func:`changes` on a Hopper GPU, stage34's post launch at :data:`POST_MAXNREG` registers."""
    own = {}
    if changes(meta) and is_hopper(x["q"].device):
        own["post_launch"] = dict(stage34_poststeps.post_plan(meta)["post_launch"], maxnreg=POST_MAXNREG)
    return {**stage42_precap.keywords(x, meta), **own}


def run(x: dict, out: dict, meta) -> None:
    stage38_bf16aux.run_with(x, out, meta, **keywords(x, meta))


STAGE = register_stage(StageSpec(
    name="stage43_postcap",
    parent="stage42_precap",
    summary="stage42 with, at R = 8, C = 8, stage34's post kernel on 8 warps capped at 80 registers: "
            "three post programs per SM where two ran",
    entry=run,
    kernels=stage42_precap.STAGE.kernels,
    zero_outputs=False,
    hopper_only=True,
))
