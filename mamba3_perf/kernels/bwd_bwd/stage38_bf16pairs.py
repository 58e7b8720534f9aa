"""stage38_bf16pairs: stage37 with the Gluon aux on bf16 parts where it runs two chunks a program,
and on two chunks a program at N256_P64_R4_C8's C*R = 32 as well.

stage37 runs the Gluon aux over bf16 parts (aux_gluon.BF16) only with one chunk a program: with two
(C*R = 32, stage31), the increments take each chunk's 32 of the 64 K columns, 64 bytes into a
128-byte swizzle line of a bf16 row, where no wgmma operand may start. aux_gluon.BF16_PAIRS holds
those two buffers ((dPhiO exp(da_cs))^T and the block's q parts) in the 64-byte swizzle, where the
second chunk's slice starts a line, and runs dPhiO against the second chunk's states in two passes
as against the first's. ptxas (Triton 3.6, sm_90; `benchmarks/ptxas_stage.py stage37_bf16split N
P R C --kernel aux --knob aux_gluon.BF16_PAIRS=0,1 --knob stage31_chunkpairs.AUX_PAIRS_MIN_P=64`):
on N128_P128_R4_C8 176 -> 131 KB of shared memory, 260 -> 116 B of spill stores (255 registers);
on N256_P64_R4_C8 255 registers with 44 B of spills -> 188 without, 110 -> 86 KB.

stage31 kept the Triton aux and its wave pass at N256_P64_R4_C8 because the Gluon aux in pairs,
with TF32 parts, measured slower there (stage31_chunkpairs.AUX_PAIRS_MIN_P); with bf16 parts this
stage runs it in pairs wherever it takes C*R = 32 in pairs, P = 64 included.

Where the Gluon aux does not take bf16 parts (no Hopper GPU, not 16-bit inputs and bf16 cached
states: stage37's split) this stage is stage37.
"""
from __future__ import annotations

import torch

from mamba3_perf.kernels.bwd_bwd import stage24_gluonaux, stage34_poststeps, stage37_bf16split
from mamba3_perf.kernels.bwd_bwd.stage37_bf16split import splits_bf16
from mamba3_perf.kernels.registry import StageSpec, register_stage


def takes_pairs(x: dict, meta) -> bool:
    """Whether this stage changes stage37 on ``x``: stage37's bf16 split with bf16 cached states
    (the Gluon aux's bf16 parts) on a shape where the Gluon aux takes C*R = 32 only in pairs."""
    return (splits_bf16(x) and x["states"].dtype == torch.bfloat16
            and stage24_gluonaux.uses_gluon_aux(x, meta, wide_p=True, chunk_pairs=True)
            and not stage24_gluonaux.uses_gluon_aux(x, meta, wide_p=True, chunk_pairs=False))


def run(x: dict, out: dict, meta) -> None:
    """stage37's run, with the Gluon aux in pairs on bf16 parts where :func:`takes_pairs`."""
    pairs = dict(aux_pairs=True, bf16_pairs=True) if takes_pairs(x, meta) else {}
    stage37_bf16split.run_with(x, out, meta, **pairs)


STAGE = register_stage(StageSpec(
    name="stage38_bf16pairs",
    parent="stage37_bf16split",
    summary="stage37 with the Gluon aux's bf16 parts also on two chunks a program (the increments' "
            "buffers in the 64-byte swizzle), and the Gluon aux in pairs at P = 64 too",
    entry=run,
    kernels=stage34_poststeps.STAGE.kernels,
    zero_outputs=False,
))
