"""stage38_bf16aux: stage37 with, at P = 128, the Gluon aux's bf16 path taken further: on two
chunks a program too, the cached states' TMA slot as dQ's wgmma operand, and the states in a ring
of one slot, so that the aux runs two programs per SM on both P = 128 shapes of the official grid.

stage37 runs the Gluon aux over bf16 parts (aux_gluon.BF16) only with one chunk a program: with two
(C*R = 32, stage31), the increments take each chunk's 32 of the 64 K columns, 64 bytes into a
128-byte swizzle line of a bf16 row, where no wgmma operand may start. aux_gluon.BF16_PAIRS holds
those two buffers ((dPhiO exp(da_cs))^T and the block's q parts) in the 64-byte swizzle, where the
second chunk's slice starts a line, and runs dPhiO against the second chunk's states in two passes
as against the first's. This stage takes it where stage37 runs the Gluon aux in pairs with TF32
parts (stage31_chunkpairs.AUX_PAIRS_MIN_P: P = 128, N128_P128_R4_C8 on the official grid). At
N256_P64_R4_C8 (where the stage as first written, 1995c12, took it too) it keeps stage37's Triton
aux and wave pass: the Gluon aux in pairs on bf16 parts (188 registers, 86 KB, no spills there)
measured slower on an H100, 1906 + 748 us (aux + scan) against 1876 + 669 us, the stage 5301
against 5177 us (records/h100-sweep-bf16aux-1995c12.json).

With bf16 parts and bf16 cached states, the states block a step of the N walk is already the
bf16 operand dQ's cached-state term needs: aux_gluon.STATES_OPERAND reads the TMA slot as the
wgmma operand instead of copying it to a buffer of its own each step. On N64_P128_R4_C16 that
buffer (4 KB) is what held the aux to one program per SM: 118800 -> 114704 B of shared memory at
255 registers, two programs per SM (ptxas, Triton 3.6, sm_90). The states also take a ring of
one slot (aux_gluon.STATES_SLOTS = 1): N128_P128_R4_C8's aux in pairs 122896 -> 114712 B, two
programs per SM where one ran.

All three only at P = 128 (:data:`STAGE38_MIN_P`; N64_P128_R4_C16 and N128_P128_R4_C8 on the
official grid), the shapes where they measured faster; elsewhere this stage is stage37, so that
every shape it changes has been checked against the golden on a GPU.

Measured on an H100 (NVIDIA H100 80GB HBM3, SM 1980 MHz, torch 2.11.0, Triton 3.6.0; golden in
every setting; benchmarks/sweep_knob.py, each comparison in one process; records/h100-sweep-
bf16aux-1995c12.json and -bf16aux-N128_P64-1995c12.json: the stage against stage37 by its knob
BF16AUX; records/h100-sweep-states-slots-1995c12.json and -states-slots-p64-1995c12.json:
aux_gluon.STATES_SLOTS = 2, 1), the aux / the stage in us:

* N64_P128_R4_C16: stage37 1156 / 2315, with STATES_OPERAND 793 / 1941, one states slot 786 / 1930
* N128_P128_R4_C8: stage37 (TF32 parts in pairs) 2177 / 5244, bf16 parts in pairs 1864 / 4921,
  one states slot 1513 / 4568
* N128_P64_R4_C16: stage37 917 / 2261, STATES_OPERAND 901 / 2252; one states slot 898 / 2250
  (not taken: see :data:`STAGE38_MIN_P`)
* N256_P64_R4_C8: in pairs with two states slots 1910, one 1959 (slower; not taken)

On the H200, side by side with stage37 and the live upstream TileLang kernel on the official grid
(records/h200-bf16aux-vs-tilelang-b4446e5.json, three rounds, golden 132/132): the stage 2215 ->
1842 us on N64_P128_R4_C16 and 4963 -> 4219 us on N128_P128_R4_C8 (1.203x, 1.176x), the same
kernels as stage37 elsewhere; 1.075x faster than TileLang in geomean (stage37 1.042x).

Where the Gluon aux does not take bf16 parts (no Hopper GPU, not 16-bit inputs and bf16 cached
states: stage37's split) this stage is stage37.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage34_poststeps, stage37_bf16split
from mamba3_perf.kernels.registry import StageSpec, register_stage


# knob (benchmarks/sweep_knob.py --knob stage38_bf16aux.BF16AUX=0,1): 0 runs stage37, for per-kernel
# times of both in one process
BF16AUX: bool = True


# the smallest P at which this stage changes stage37 (the Gluon aux's states operand from its TMA
# slot, from a ring of one slot; its bf16 parts in pairs, where stage37 pairs only at P = 128): at
# P = 64 one states slot measured slower (N256_P64_R4_C8) or within noise (N128_P64_R4_C16), and
# the states operand alone 0.4 % faster on N128_P64_R4_C16 (2261 -> 2252 us on an H100), not taken
STAGE38_MIN_P: int = 128

# knob: the slots of the Gluon aux's states ring at P >= STAGE38_MIN_P (aux_gluon.STATES_SLOTS); 2
# for a sweep against one
STATES_SLOTS: int = 1


def changes(meta) -> bool:
    """Whether this stage launches anything other than stage37's kernels on ``meta``'s shape."""
    return meta.P >= STAGE38_MIN_P


def run_with(x: dict, out: dict, meta, **extra) -> None:
    """stage37's run; at P >= :data:`STAGE38_MIN_P` the Gluon aux on bf16 parts in pairs too,
    reading its states operand from the TMA slot of a ring of one slot. ``extra``: more
    stage37_bf16split.run_with keywords, over this stage's (stage39-41: their ``keywords``)."""
    if not (BF16AUX and changes(meta)):
        return stage37_bf16split.run_with(x, out, meta, **extra)
    own = dict(states_operand=True, bf16_pairs=True, states_slots=STATES_SLOTS)
    stage37_bf16split.run_with(x, out, meta, **{**own, **extra})


def run(x: dict, out: dict, meta) -> None:
    run_with(x, out, meta)


STAGE = register_stage(StageSpec(
    name="stage38_bf16aux",
    parent="stage37_bf16split",
    summary="stage37 with, at P = 128, the Gluon aux's bf16 parts also on two chunks a program (the "
            "increments' buffers in the 64-byte swizzle), its states' TMA slot as dQ's wgmma operand "
            "and a states ring of one slot: two aux programs per SM where one ran",
    entry=run,
    kernels=stage34_poststeps.STAGE.kernels,
    zero_outputs=False,
))
