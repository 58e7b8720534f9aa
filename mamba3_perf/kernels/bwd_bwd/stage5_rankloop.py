"""stage5_rankloop: for R >= 6 or N*P > 8192 the generic aux walks rank pairs with a runtime
loop instead of static unrolling (smaller IR and compile time; R == 4 keeps the rank fold)."""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage1_pre, stage3_rankfold, stage4_nblock
from mamba3_perf.kernels.bwd_bwd.common import AUX_SCRATCH, PRE_SCRATCH, alloc_scratch
from mamba3_perf.kernels.registry import StageSpec, register_stage


def uses_rank_loop(meta) -> bool:
    return meta.R >= 6 or meta.N * meta.P > stage4_nblock.NBLOCK_THRESHOLD


def launch_aux(x: dict, s: dict, out: dict, meta) -> None:
    stage3_rankfold.launch_aux_for(x, s, out, meta, rank_loop=uses_rank_loop(meta))


def run(x: dict, out: dict, meta) -> None:
    s = alloc_scratch(meta, x["q"].device, PRE_SCRATCH + AUX_SCRATCH + ("DKR",))
    stage1_pre.launch_pre(x, s, meta)
    launch_aux(x, s, out, meta)
    stage4_nblock.launch_scan_for(x, s, out, meta)


STAGE = register_stage(StageSpec(
    name="stage5_rankloop",
    parent="stage4_nblock",
    summary="R >= 6 or N*P > 8192: generic aux uses a runtime rank loop instead of static unrolling",
    entry=run,
    kernels=stage4_nblock.STAGE.kernels,
))
