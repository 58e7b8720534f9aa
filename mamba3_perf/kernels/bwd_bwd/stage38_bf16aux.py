"""stage38_bf16aux: stage37 with the Gluon aux's bf16 path taken further: on two chunks a program
too (at N256_P64_R4_C8's C*R = 32 as well), and the cached states' TMA slot as dQ's wgmma operand.

stage37 runs the Gluon aux over bf16 parts (aux_gluon.BF16) only with one chunk a program: with two
(C*R = 32, stage31), the increments take each chunk's 32 of the 64 K columns, 64 bytes into a
128-byte swizzle line of a bf16 row, where no wgmma operand may start. aux_gluon.BF16_PAIRS holds
those two buffers ((dPhiO exp(da_cs))^T and the block's q parts) in the 64-byte swizzle, where the
second chunk's slice starts a line, and runs dPhiO against the second chunk's states in two passes
as against the first's. ptxas (Triton 3.6, sm_90; `benchmarks/ptxas_stage.py stage37_bf16split N
P R C --kernel aux --knob aux_gluon.BF16_PAIRS=0,1 --knob stage31_chunkpairs.AUX_PAIRS_MIN_P=64`):
on N128_P128_R4_C8 176 -> 131 KB of shared memory, 260 -> 116 B of spill stores (255 registers);
on N256_P64_R4_C8 255 registers with 44 B of spills -> 188 without, 110 -> 86 KB. stage31 kept the
Triton aux and its wave pass at N256_P64_R4_C8 because the Gluon aux in pairs, with TF32 parts,
measured slower there (stage31_chunkpairs.AUX_PAIRS_MIN_P); with bf16 parts this stage runs it in
pairs wherever it takes C*R = 32 in pairs, P = 64 included.

With bf16 parts and bf16 cached states, the states block a step of the N walk is already the
bf16 operand dQ's cached-state term needs: aux_gluon.STATES_OPERAND reads the TMA slot as the
wgmma operand instead of copying it to a buffer of its own each step. On N64_P128_R4_C16 that
buffer (4 KB) is what held the aux to one program per SM: 118800 -> 114704 B of shared memory at
255 registers, two programs per SM (ptxas as above, --knob aux_gluon.STATES_OPERAND=1); at P <= 64
one copy and one fence a step fewer, 2 KB less.

Where the Gluon aux does not take bf16 parts (no Hopper GPU, not 16-bit inputs and bf16 cached
states: stage37's split) this stage is stage37.
"""
from __future__ import annotations

import torch

from mamba3_perf.kernels.bwd_bwd import stage24_gluonaux, stage34_poststeps, stage37_bf16split
from mamba3_perf.kernels.bwd_bwd.stage37_bf16split import splits_bf16
from mamba3_perf.kernels.registry import StageSpec, register_stage


# knob (benchmarks/sweep_knob.py --knob stage38_bf16aux.BF16AUX=0,1): 0 runs stage37, for per-kernel
# times of both in one process
BF16AUX: bool = True


def takes_pairs(x: dict, meta) -> bool:
    """Whether this stage runs the Gluon aux in pairs where stage37 does not, or with TF32 parts:
    stage37's bf16 split with bf16 cached states (the Gluon aux's bf16 parts) on a shape where the
    Gluon aux takes C*R = 32 only in pairs."""
    return (splits_bf16(x) and x["states"].dtype == torch.bfloat16
            and stage24_gluonaux.uses_gluon_aux(x, meta, wide_p=True, chunk_pairs=True)
            and not stage24_gluonaux.uses_gluon_aux(x, meta, wide_p=True, chunk_pairs=False))


def run(x: dict, out: dict, meta) -> None:
    """stage37's run, the Gluon aux reading its states operand from the TMA slot, and in pairs on
    bf16 parts where :func:`takes_pairs`."""
    if not BF16AUX:
        return stage37_bf16split.run(x, out, meta)
    pairs = dict(aux_pairs=True, bf16_pairs=True) if takes_pairs(x, meta) else {}
    stage37_bf16split.run_with(x, out, meta, states_operand=True, **pairs)


STAGE = register_stage(StageSpec(
    name="stage38_bf16aux",
    parent="stage37_bf16split",
    summary="stage37 with the Gluon aux's bf16 parts also on two chunks a program (the increments' "
            "buffers in the 64-byte swizzle; in pairs at P = 64 too), and its states' TMA slot as "
            "dQ's wgmma operand (two programs per SM at P = 128)",
    entry=run,
    kernels=stage34_poststeps.STAGE.kernels,
    zero_outputs=False,
))
