"""stage40_termsring: stage39 with, on chunk pairs at P = 128, the Gluon state_terms' TMA ring of
one slot: two state_terms programs per SM where one ran.

Where a chunk has C*R = 32 rows at P = 128 (N128_P128_R4_C8 on the official grid) state_terms
takes two chunks a program (stage31) at 131088 B of shared memory, one program of one warpgroup
per SM, and was the largest kernel of stage39 there with the aux (1529 and 1522 us of 4604 on an
H100). Its ring of two slots holds each step's blocks (dstates, states, k and dK rows of both
chunks) one step ahead; one slot (terms_gluon.TERMS_RING = 1: each step's copies issued once the
step before is done with the slot) takes one slot of every block less, 98312 B, under the 113 KB
two programs per SM take, at 255 registers (ptxas, Triton 3.6, sm_90: ``benchmarks/ptxas_stage.py
stage40_termsring 128 128 4 8 --kernel state_terms``; 4 B of spill stores a thread against 20).
Measured on an H100 (NVIDIA H100 80GB HBM3, SM 1980 MHz, torch 2.11.0, Triton 3.6.0; golden in
both settings; ``benchmarks/sweep_knob.py --cases N128_P128_R4_C8,N64_P128_R4_C16 --stage
stage39_auxregs --knob terms_gluon.TERMS_RING=2,1``, records/h100-sweep-termsring-16eb925.json),
state_terms / the stage in us, two slots -> one:

* N128_P128_R4_C8: 1529 / 4604 -> 1236 / 4318 (1.066x)
* N64_P128_R4_C16 (one chunk a program, two programs per SM either way): 542 / 1937 -> 583 / 1982
  (slower: not taken)

So only on chunk pairs at P = 128 (:func:`changes`); elsewhere, and where the Gluon state_terms
does not run (no Hopper GPU), this stage is stage39.

Side by side with stage38 and the live upstream TileLang kernel on the official grid, one process
per case, two rounds (same H100 kind; ``bash benchmarks/h200_ladder.sh /tmp/run 345 565 official
stage38_bf16aux,stage40_termsring,tilelang 2 16 stage``; records/h100-termsring-vs-tilelang-
0eb40f2.json): golden 132/132; stage40 / stage38 1.025x in geomean (N128_P128_R4_C8 4563 -> 4247
us); against TileLang on that H100 0.982x in geomean (stage38 0.958x), from 0.703x on
N256_P64_R4_C8 to 1.517x on N32_P64_R4_C16. Not yet run on the H200.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage34_poststeps, stage38_bf16aux, stage39_auxregs
from mamba3_perf.kernels.bwd_bwd.common import chunks_per_program
from mamba3_perf.kernels.registry import StageSpec, register_stage

# knob (benchmarks/sweep_knob.py --knob stage40_termsring.TERMS_RING1=0,1): 0 runs stage39
TERMS_RING1: bool = True

# the P at which it changes stage39 (with two chunks a state_terms program)
TERMS_RING1_P: int = 128


def changes(meta) -> bool:
    """Whether this stage launches anything other than stage39's kernels for ``meta``: P =
    :data:`TERMS_RING1_P` with two chunks a state_terms program (stage31's pairs: C*R = 32, an even
    number of chunks)."""
    return TERMS_RING1 and meta.P == TERMS_RING1_P and chunks_per_program(meta, True) == 2


def keywords(x: dict, meta) -> dict:
    """This stage's stage38_bf16aux.run_with keywords for ``x`` and ``meta``: stage39's, and where
    :func:`changes`, state_terms on a TMA ring of one slot."""
    return {**stage39_auxregs.keywords(x, meta), **({"terms_ring": 1} if changes(meta) else {})}


def run(x: dict, out: dict, meta) -> None:
    stage38_bf16aux.run_with(x, out, meta, **keywords(x, meta))


STAGE = register_stage(StageSpec(
    name="stage40_termsring",
    parent="stage39_auxregs",
    summary="stage39 with, on chunk pairs at P = 128, the Gluon state_terms' TMA ring of one slot: "
            "two state_terms programs per SM where one ran",
    entry=run,
    kernels=stage34_poststeps.STAGE.kernels,
    zero_outputs=False,
    hopper_only=True,
))
