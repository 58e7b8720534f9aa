"""stage38_bf16aux: stage37 with the Gluon aux's bf16 path taken further: on two chunks a program
too, the cached states' TMA slot as dQ's wgmma operand, and at P = 128 the states in a ring of one
slot.

stage37 runs the Gluon aux over bf16 parts (aux_gluon.BF16) only with one chunk a program: with two
(C*R = 32, stage31), the increments take each chunk's 32 of the 64 K columns, 64 bytes into a
128-byte swizzle line of a bf16 row, where no wgmma operand may start. aux_gluon.BF16_PAIRS holds
those two buffers ((dPhiO exp(da_cs))^T and the block's q parts) in the 64-byte swizzle, where the
second chunk's slice starts a line, and runs dPhiO against the second chunk's states in two passes
as against the first's. This stage takes it wherever stage37 runs the Gluon aux in pairs
(stage31_chunkpairs.AUX_PAIRS_MIN_P: P = 128, N128_P128_R4_C8 on the official grid). At
N256_P64_R4_C8 it keeps stage37's Triton aux and wave pass: the Gluon aux in pairs on bf16 parts
(188 registers, 86 KB, no spills there) measured slower on an H100, 1906 + 748 us (aux + scan)
against 1876 + 669 us, the stage 5301 against 5177 us (records/h100-sweep-bf16aux-1995c12.json).

With bf16 parts and bf16 cached states, the states block a step of the N walk is already the
bf16 operand dQ's cached-state term needs: aux_gluon.STATES_OPERAND reads the TMA slot as the
wgmma operand instead of copying it to a buffer of its own each step. On N64_P128_R4_C16 that
buffer (4 KB) is what held the aux to one program per SM: 118800 -> 114704 B of shared memory at
255 registers, two programs per SM (ptxas, Triton 3.6, sm_90). At P = 128 (:data:`STATES_SLOTS_MIN_P`)
the states also take a ring of one slot (aux_gluon.STATES_SLOTS = 1): N128_P128_R4_C8's aux in
pairs 122896 -> 114712 B, two programs per SM where one ran.

Measured on an H100 (NVIDIA H100 80GB HBM3, SM 1980 MHz, torch 2.11.0, Triton 3.6.0; golden in
every setting; benchmarks/sweep_knob.py, records/h100-sweep-bf16aux-1995c12.json and
records/h100-sweep-states-slots-1995c12.json, the stage against stage37 by its knob BF16AUX in one
process), the aux / the stage in us:

* N64_P128_R4_C16: stage37 1156 / 2315, with STATES_OPERAND 793 / 1941, one states slot 786 / 1930
* N128_P128_R4_C8: stage37 (TF32 parts in pairs) 2177 / 5244, bf16 parts in pairs 1864 / 4921,
  one states slot 1513 / 4568
* N128_P64_R4_C16: stage37 917 / 2261, STATES_OPERAND 901 / 2252; one states slot 898 / 2250
  (within noise: P = 64 keeps two)
* N256_P64_R4_C8: in pairs with two states slots 1910, one 1959 (slower)

Where the Gluon aux does not take bf16 parts (no Hopper GPU, not 16-bit inputs and bf16 cached
states: stage37's split) this stage is stage37.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage34_poststeps, stage37_bf16split
from mamba3_perf.kernels.registry import StageSpec, register_stage


# knob (benchmarks/sweep_knob.py --knob stage38_bf16aux.BF16AUX=0,1): 0 runs stage37, for per-kernel
# times of both in one process
BF16AUX: bool = True


# the smallest P at which the states take a ring of one slot (aux_gluon.STATES_SLOTS = 1): faster at
# P = 128 on an H100, slower (N256_P64_R4_C8) or within noise (N128_P64_R4_C16) at P = 64
STATES_SLOTS_MIN_P: int = 128


def run(x: dict, out: dict, meta) -> None:
    """stage37's run, the Gluon aux on bf16 parts in pairs too, reading its states operand from the
    TMA slot, from a ring of one slot at P >= :data:`STATES_SLOTS_MIN_P`."""
    if not BF16AUX:
        return stage37_bf16split.run(x, out, meta)
    stage37_bf16split.run_with(x, out, meta, states_operand=True, bf16_pairs=True,
                               states_slots=1 if meta.P >= STATES_SLOTS_MIN_P else 2)


STAGE = register_stage(StageSpec(
    name="stage38_bf16aux",
    parent="stage37_bf16split",
    summary="stage37 with the Gluon aux's bf16 parts also on two chunks a program (the increments' "
            "buffers in the 64-byte swizzle), its states' TMA slot as dQ's wgmma operand, and at "
            "P = 128 a states ring of one slot (two aux programs per SM at P = 128)",
    entry=run,
    kernels=stage34_poststeps.STAGE.kernels,
    zero_outputs=False,
))
