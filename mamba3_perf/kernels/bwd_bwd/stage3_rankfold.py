"""stage3_rankfold: for R == 4 the aux kernel folds rank and chunk into C*R rows and does its
contractions as a few large matmuls (k.q^T, PsiV.dPhiO^T, their masked products with dPhiO,
q and k, the diagonal's block-masked products) instead of 2*R*R tiny ones; other R keep the
generic aux. Rows are fused as t*R + r, upstream's order (the seed's Ascend code used
r*C + t; the order changes no matmul)."""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.bwd_bwd import stage1_pre, stage2_aux
from mamba3_perf.kernels.bwd_bwd.common import (
    AUX_SCRATCH, CHUNK_LAUNCH, PRE_SCRATCH, alloc_scratch, blocks, chunk_frame, chunk_local,
    dot_precision, load_qkd, load_rows, load_state_tile, load_time, scalar_ptr_or_dummy,
    state_q_terms, store_rows, wt_rows,
)
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage


@triton.jit
def bwd_bwd_aux_rankfold_kernel(
    QKDOT, STATES, DSKIP,
    QB_S, KB_S, QR_S, KR_S, PSIV_S, DPHIO_S, GAM_S, TS_S, ECS_S, EREV_S, WT_S, DECAY_S,
    DPSIV_S, DKS_S, DQR_S, DQD_S, DKD_S, DDP_S,
    DSSDA, DGAM, DDACS,
    S, H, N, P,
    C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr, HAS_D: tl.constexpr,
    PREC: tl.constexpr,
):
    b, h, c, bh, bhc, i, ti, ri, tpos, tc = chunk_frame(S, H, C, R)
    CR: tl.constexpr = C * R
    n = tl.arange(0, BN)
    p = tl.arange(0, BP)
    gamma = load_time(GAM_S, bh, tpos, S)
    ts = load_time(TS_S, bh, tpos, S)
    ecs = load_time(ECS_S, bh, tpos, S)
    qb = load_rows(QB_S, bhc, i, n, N, CR)
    kb = load_rows(KB_S, bhc, i, n, N, CR)
    qr = load_rows(QR_S, bhc, i, n, N, CR)
    ks = load_rows(KR_S, bhc, i, n, N, CR) * ts[:, None]
    psiv = load_rows(PSIV_S, bhc, i, p, P, CR)
    dphio = load_rows(DPHIO_S, bhc, i, p, P, CR)
    wt = wt_rows(WT_S, bhc, ti, C)
    qkd, same = load_qkd(QKDOT, bh, tpos, ti, ri, S, R)
    if HAS_D:
        dskip = tl.load(DSKIP + h)
    else:
        dskip = 0.0
    dssda, dgam, dpsiv, dks, dqr, dq_diag, dk_diag, dd_part = chunk_local(
        ks, qr, qb, kb, psiv, dphio, wt, qkd, same, gamma, dskip, C, R, HAS_D, PREC)
    st = load_state_tile(STATES, bhc, n, p, N, P)
    ddacs, dq_inter = state_q_terms(dphio, st, qr, ecs, C, R, PREC)
    tl.store(DSSDA + (bhc * C + tc[:, None]) * C + tc[None, :], dssda)
    tl.store(DGAM + bh * S + c * C + tc, dgam)
    tl.store(DDACS + bh * S + c * C + tc, ddacs)
    store_rows(DPSIV_S, dpsiv, bhc, i, p, P, CR)
    store_rows(DKS_S, dks, bhc, i, n, N, CR)
    store_rows(DQR_S, dqr + dq_inter, bhc, i, n, N, CR)
    store_rows(DQD_S, dq_diag, bhc, i, n, N, CR)
    store_rows(DKD_S, dk_diag, bhc, i, n, N, CR)
    tl.store(DDP_S + bhc, tl.sum(dd_part, axis=0))


def launch_aux_rankfold(x: dict, s: dict, out: dict, meta) -> None:
    bk = blocks(meta)
    launching.launch(bwd_bwd_aux_rankfold_kernel, (meta.B * meta.H * meta.nchunks,))(
        x["qk_dot"], x["states"], scalar_ptr_or_dummy(x["d"], x["mimo_v"]),
        *stage1_pre.scratch_args(s), *stage2_aux.aux_scratch_args(s),
        out["DSSDA"], out["DGAMMA"], out["DDA_CS"],
        meta.S, meta.H, meta.N, meta.P,
        C=meta.C, R=meta.R, BN=bk["BN"], BP=bk["BP"], HAS_D=meta.has_d, PREC=dot_precision(x["q"].device),
        **CHUNK_LAUNCH,
    )


def launch_aux_for(x: dict, s: dict, out: dict, meta, *, fold_ranks=(4,), rank_loop: bool = False) -> None:
    """The rank-folded aux where R is in ``fold_ranks``, the generic one elsewhere."""
    if meta.R in fold_ranks:
        launch_aux_rankfold(x, s, out, meta)
    else:
        stage2_aux.launch_aux(x, s, out, meta, rank_loop=rank_loop)


def run(x: dict, out: dict, meta) -> None:
    s = alloc_scratch(meta, x["q"].device, PRE_SCRATCH + AUX_SCRATCH)
    stage1_pre.launch_pre(x, s, meta)
    launch_aux_for(x, s, out, meta)
    stage2_aux.launch_scan(x, s, out, meta)


STAGE = register_stage(StageSpec(
    name="stage3_rankfold",
    parent="stage2_aux",
    summary="R == 4: aux folds rank and chunk into C*R rows, a few large matmuls instead of many R x R tiny ones",
    entry=run,
    kernels=(KernelSpec("bwd_bwd_pre_kernel", Tag.PRE),
             KernelSpec("bwd_bwd_aux_rankfold_kernel", Tag.AUX, "chunk-local work as C*R-row matmuls"),
             KernelSpec("bwd_bwd_aux_kernel", Tag.AUX),
             KernelSpec("bwd_bwd_scan_kernel", Tag.SCAN)),
))
