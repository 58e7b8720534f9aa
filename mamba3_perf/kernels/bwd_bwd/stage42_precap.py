"""stage42_precap: stage41 with, where stage11's pre kernel runs uncapped on 8 warps at P = 128, its
registers capped at 80: three pre programs per SM where two ran.

At P = 128 stage21 has no halves pre kernel (its [C, R, N / 2] tiles are the P <= 64 shapes'), so
the pre kernel is stage11's on whole chunks, 8 warps. Where its [C, R, N] tile holds fewer than
8192 elements stage16_regcap leaves it uncapped (:func:`stage16_regcap.caps`): 97 registers a
thread on N128_P128_R4_C8 and 112 on N64_P128_R4_C16, two programs of 256 threads in an SM's
65536 registers. At 80 three fit; ptxas (Triton 3.6, sm_90: ``benchmarks/ptxas_stage.py
stage41_streamregs N 128 4 C --kernel pre --maxnreg 80``) counts no spills on N128_P128_R4_C8 and
32 B a thread on N64_P128_R4_C16.

Measured on an H100 (NVIDIA H100 80GB HBM3, SM 1980 MHz, torch 2.11.0, Triton 3.6.0; golden in
every setting; ``benchmarks/sweep_launch.py --cases N128_P128_R4_C8,N64_P128_R4_C16 --stage
stage41_streamregs --sweep chunk=8:3,8:3:80,8:3:96``, one process per case,
records/h100-sweep-precap-e74275a.json), the pre kernel's device time, us, uncapped / 80 / 96:

* N128_P128_R4_C8: 351 / 282 / 353
* N64_P128_R4_C16: 186 / 168 / 190

(96 registers still fit only two programs.) So :func:`changes`: stage11's pre kernel (no halves
kernel for ``meta``) where stage16 does not cap it, on a Hopper GPU (where the cap was measured).
Elsewhere, on other GPUs and on the interpreter, this stage is stage41 (its outputs are stage41's
bit for bit). Laddered beside stage41 and TileLang on the official grid on an H100, golden 132/132
(records/h100-precap-postcap-vs-tilelang-37a5626.json): 1.016x over stage41 on N128_P128_R4_C8,
1.009x on N64_P128_R4_C16, 1.003x in geomean; 0.981x of TileLang's speed in geomean. Not yet run on
the H200 (README, "stage42_precap").
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage16_regcap, stage21_halves, stage34_poststeps, stage38_bf16aux
from mamba3_perf.kernels.bwd_bwd import stage41_streamregs
from mamba3_perf.kernels.bwd_bwd.common import is_hopper
from mamba3_perf.kernels.registry import StageSpec, register_stage

# knob (benchmarks/sweep_knob.py --knob stage42_precap.PRE_REGS=0,1): 0 runs stage41
PRE_REGS: bool = True

# the pre kernel's registers a thread where this stage changes stage41: three programs of 256
# threads in an SM's 65536
PRE_MAXNREG: int = 80


def changes(meta) -> bool:
    """Whether this stage launches anything other than stage41's kernels for ``meta``: stage11's
    pre kernel (stage21 has none on halves for ``meta``: P = 128) where stage16_regcap leaves it
    uncapped ([C, R, N] tiles of fewer than 8192 elements)."""
    return (PRE_REGS and stage21_halves.pre_kernel(meta) is None
            and stage16_regcap.caps(meta)["pre"] is None)


def keywords(x: dict, meta) -> dict:
    """This stage's stage38_bf16aux.run_with keywords for ``x`` and ``meta``: stage41's, and where
    :func:`changes` on a Hopper GPU, the pre kernel at :data:`PRE_MAXNREG` registers a thread
    (stage16_regcap.run_with's ``pre_maxnreg``)."""
    own = {"pre_maxnreg": PRE_MAXNREG} if changes(meta) and is_hopper(x["q"].device) else {}
    return {**stage41_streamregs.keywords(x, meta), **own}


def run(x: dict, out: dict, meta) -> None:
    stage38_bf16aux.run_with(x, out, meta, **keywords(x, meta))


STAGE = register_stage(StageSpec(
    name="stage42_precap",
    parent="stage41_streamregs",
    summary="stage41 with, at P = 128 where it runs uncapped, stage11's pre kernel capped at 80 "
            "registers: three pre programs of 8 warps per SM where two ran",
    entry=run,
    kernels=stage34_poststeps.STAGE.kernels,
    zero_outputs=False,
    hopper_only=True,
))
