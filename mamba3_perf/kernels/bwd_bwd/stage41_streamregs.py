"""stage41_streamregs: stage40 with, where the Triton streamed aux runs on bf16 parts at P = 64 and
N > 16, its registers capped at 168: three streamed aux programs per SM where two ran.

Where a chunk has C*R = 32 rows at P = 64 (N16_P64_R4_C8 and N256_P64_R4_C8 on the official
grid) the aux is stage7's streamed Triton kernel: the Gluon aux takes such chunks only in pairs at
P = 128 (stage31_chunkpairs.AUX_PAIRS_MIN_P). Under the bf16 split (stage37) it compiles to 250
registers a thread and 30720 B of shared memory on N256_P64_R4_C8: two programs of 4 warps per SM
by registers. Capped at 168 (65536 registers over three programs of 128 threads) it spills 8 B a
thread (ptxas, Triton 3.6, sm_90: ``benchmarks/ptxas_stage.py stage40_termsring 256 64 4 8 --kernel
aux --maxnreg 168``; at 128, four programs, 180 B). stage16_regcap caps it so at N <= 16 (one
16-column block; :func:`stage16_regcap.caps`), where it measured faster on the TF32 parts of that
time; it measured slower at N = 64 and 128 there (C*R = 64 shapes, which the Gluon aux has taken
since stage24).

Measured on an H100 (NVIDIA H100 80GB HBM3, SM 1980 MHz, torch 2.11.0, Triton 3.6.0; golden in
every setting; ``benchmarks/sweep_launch.py --cases N256_P64_R4_C8,N16_P64_R4_C8 --stage
stage40_termsring --sweep stream=4:1,4:1:168,4:1:200``, one process,
records/h100-sweep-streamregs-401b227.json), the streamed aux / the stage in us:

* N256_P64_R4_C8: uncapped 1875 / 5215, capped at 168 1711 / 5037 (1.035x), at 200 (still two
  programs) 1879 / 5200
* N16_P64_R4_C8 (capped at 168 by stage16 already, so the same launch in all three): 465 / 1144,
  465 / 1148, 462 / 1148

So the cap where stage16's rule does not already set it: P = 64, C*R = 32, N > 16, the bf16 split
(:func:`changes`; the TF32 parts compile to 255 registers, which the cap was not measured on), on
a Hopper GPU (where it was measured). Elsewhere, on other GPUs and on the interpreter, this stage
is stage40 (its outputs are stage40's bit for bit).

Side by side with stage40 and the live upstream TileLang kernel on the official grid, one process
per case, two rounds (same H100 kind; ``bash benchmarks/h200_ladder.sh /tmp/run 345 565 official
stage40_termsring,stage41_streamregs,tilelang 2 16 stage``, records/h100-streamregs-vs-termsring-
73800e9.json, and N256_P64_R4_C8 again alone with TileLang's compile given 440 s,
records/h100-streamregs-vs-tilelang-n256-f7c1c51.json): golden 132/132; stage41 / stage40 1.033x
and 1.030x on N256_P64_R4_C8, the same kernels elsewhere; against TileLang on that H100 0.978x in
geomean (0.724x on N256_P64_R4_C8, 1.485x on N32_P64_R4_C16). Not yet run on the H200.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import (
    stage16_regcap, stage34_poststeps, stage37_bf16split, stage38_bf16aux, stage40_termsring,
)
from mamba3_perf.kernels.bwd_bwd.common import is_hopper
from mamba3_perf.kernels.registry import StageSpec, register_stage

# knob (benchmarks/sweep_knob.py --knob stage41_streamregs.STREAM_REGS=0,1): 0 runs stage40
STREAM_REGS: bool = True

# the streamed aux's registers a thread where this stage changes stage40: three programs of 128
# threads in an SM's 65536, stage16_regcap's NARROW_CAP
STREAM_MAXNREG: int = stage16_regcap.NARROW_CAP

# the P and the rows of a chunk at which it does (the streamed aux on the official grid at P = 64)
STREAM_REGS_P: int = 64
STREAM_REGS_ROWS: int = 32


def changes(x: dict, meta) -> bool:
    """Whether this stage launches anything other than stage40's kernels for ``x`` and ``meta``:
    the streamed aux (P = :data:`STREAM_REGS_P`, C*R = :data:`STREAM_REGS_ROWS`) on bf16 parts
    (stage37_bf16split.splits_bf16) where stage16_regcap does not cap it already (N > 16)."""
    return (STREAM_REGS and meta.P == STREAM_REGS_P and meta.C * meta.R == STREAM_REGS_ROWS
            and stage16_regcap.caps(meta)["aux"] is None and stage37_bf16split.splits_bf16(x))


def keywords(x: dict, meta) -> dict:
    """This stage's stage38_bf16aux.run_with keywords for ``x`` and ``meta``: stage40's, and where
    :func:`changes` on a Hopper GPU, the streamed aux at :data:`STREAM_MAXNREG` registers a thread."""
    own = {"stream_maxnreg": STREAM_MAXNREG} if changes(x, meta) and is_hopper(x["q"].device) else {}
    return {**stage40_termsring.keywords(x, meta), **own}


def run(x: dict, out: dict, meta) -> None:
    stage38_bf16aux.run_with(x, out, meta, **keywords(x, meta))


STAGE = register_stage(StageSpec(
    name="stage41_streamregs",
    parent="stage40_termsring",
    summary="stage40 with, at P = 64 on chunks of 32 rows and N > 16, the streamed Triton aux on "
            "bf16 parts capped at 168 registers: three aux programs per SM where two ran",
    entry=run,
    kernels=stage34_poststeps.STAGE.kernels,
    zero_outputs=False,
    hopper_only=True,
))
