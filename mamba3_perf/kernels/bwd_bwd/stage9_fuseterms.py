"""stage9_fuseterms: the state pass runs before the aux, and the aux does state_terms' work.

In stage6..8 the aux and state_terms are two (B,H,nchunks) kernels that each walk N over the
same chunk: the aux writes the local dK and dPsiV to scratch (DKS, DPSIV) for state_terms to
read back, and both load the rotated k rows, PsiV and the cached-state tile. The state pass
needs only the pre kernel's q rows, dPhiO and decays, so it can run first; then the streamed aux
(with ``TERMS``) finds DST[c] ready and, in its second N loop, adds the dstates terms to the
tiles it already holds, stores dK in its final rotated form and, after the loop, DV and this
chunk's DMIMO_V part. One launch and the DKS / DPSIV round trips fewer; precisions as stage8.
Where the aux does not fold (C*R > 64) this is stage8.
"""
from __future__ import annotations

import torch

from mamba3_perf.kernels.bwd_bwd import prod, stage1_pre, stage6_statepass, stage7_streamaux
from mamba3_perf.kernels.bwd_bwd.common import PRE_SCRATCH, alloc_scratch
from mamba3_perf.kernels.registry import StageSpec, register_stage

# the aux's scratch that the fused aux neither writes nor reads
UNUSED_SCRATCH = ("DPSIV", "DKS")
SCRATCH = PRE_SCRATCH + ("DQR", "DQD", "DKD", "DDP", "DKR", "DST", "DMVP")


def run(x: dict, out: dict, meta) -> None:
    if not stage7_streamaux.folds(meta):
        stage7_streamaux.run_with(x, out, meta, low_precision=True)
        return
    s = alloc_scratch(meta, x["q"].device, SCRATCH)
    s.update({n: torch.empty(0, dtype=torch.float32, device=x["q"].device) for n in UNUSED_SCRATCH})
    stage1_pre.launch_pre(x, s, meta)
    stage6_statepass.launch_state_pass(x, s, meta)
    stage7_streamaux.launch_aux(x, s, out, meta, low_precision=True, terms=True)
    stage6_statepass.launch_chunk_sum(x, s, out, meta)
    prod.launch_post(x, s, out, meta)


STAGE = register_stage(StageSpec(
    name="stage9_fuseterms",
    parent="stage8_mixprec",
    summary="the state pass runs first and the streamed aux adds the dstates terms in its own N "
            "loop (no state_terms kernel, no DKS / DPSIV scratch)",
    entry=run,
    kernels=stage7_streamaux.STAGE.kernels,
    zero_outputs=False,
))
