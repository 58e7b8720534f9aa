"""stage9_termsblock: stage8 with state_terms on narrow N blocks and one warpgroup.

After stage7/8 the state_terms kernel is the largest part left on 8x512x16x8 (H200 profile,
records/h200-fuseterms-297ca5a.json: ~690 of 2058 us). Its compute is two [CR, BNB] x [BNB, P]
products per N block, but with BNB up to 64 rows on 8 warps it held whole [64, P] tiles of
dstates, states, k and dK at once and spilled ~1.2 KB per thread (ptxas for sm_90, Triton 3.6)
at every P = 64 case. Here it walks N in blocks of max(16, TILE_ELEMS / P) rows (16 at P = 64)
on 4 warps (one warpgroup, so each wgmma keeps N >= 16: no triton#10629):

    spill stores per thread (state_terms, ptxas, Triton 3.6)   stage6..8   stage9
    N = P = 64, R = 4, C = 16                                    1264 B      112 B
    N = 128, P = 64, R = 8, C = 8                                1240 B       52 B
    N = 128, P = 64, R = 1, C = 64                               1156 B        0 B
    N = 128, P = 32, R = 4, C = 16                                680 B        0 B
    N = 64, P = 128, R = 4, C = 16                               2524 B      792 B
    N = P = 128, R = 4, C = 8 (keeps stage6's choice)             648 B     1000 B
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage7_streamaux
from mamba3_perf.kernels.registry import StageSpec, register_stage

TILE_ELEMS = 1024  # BNB * BP of a state_terms N block
LAUNCH = dict(num_warps=4, num_stages=1)


def terms_choice(meta) -> dict:
    """stage6_statepass.launch_state_terms keywords for ``meta`` ({} = stage6's choice): the
    narrow blocks wherever ptxas counted fewer spills with them on the official shapes, i.e.
    everywhere but P = 128 with C*R = 32 (there the whole [C*R, P] PsiV and dPsiV tiles that
    state_terms holds fill one warpgroup's registers; 64-row blocks on 8 warps spill less)."""
    narrow = meta.P <= 64 or meta.C * meta.R >= 64
    return dict(tile_elems=TILE_ELEMS, launch=LAUNCH) if narrow else {}


def run(x: dict, out: dict, meta) -> None:
    stage7_streamaux.run_with(x, out, meta, low_precision=True, terms=terms_choice(meta))


STAGE = register_stage(StageSpec(
    name="stage9_termsblock",
    parent="stage8_mixprec",
    summary="state_terms walks N in 16-row blocks on one warpgroup (at P = 64 its spills drop "
            "from ~1.2 KB to <= 112 B per thread)",
    entry=run,
    kernels=stage7_streamaux.STAGE.kernels,
    zero_outputs=False,
))
