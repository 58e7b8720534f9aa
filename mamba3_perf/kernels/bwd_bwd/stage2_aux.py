"""stage2_aux: an ``aux`` kernel on (B,H,nchunks) does all chunk-local work that does not read
dstates (DSSDA, DGAMMA, DDA_CS, the qk_dot diagonal correction, the local dPsiV/dK/dQ parts and
the q.state term); the ``scan`` keeps only what depends on dstates, then finishes q/k.

This aux is the generic one: it walks (r_k, r_q) rank pairs and does each contraction as a
C x C tiny dot (a broadcast-reduce where C < 16, below tl.dot's tile). stage3 folds it.
"""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.bwd_bwd import stage1_pre
from mamba3_perf.kernels.bwd_bwd.common import (
    AUX_SCRATCH, CHUNK_LAUNCH, LOOP_LAUNCH, PRE_SCRATCH, alloc_scratch, blocks, chunk_coords, dot_precision,
    dstates_step, fdot, finalize_qk, fused_rows, load_angles_cs, load_rows, load_state_tile, load_time,
    rot_cols, scalar_ptr_or_dummy, scan_step_operands, state_k_terms, store_rows, store_value_sums,
    value_grads, vec_to_time,
)
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage


@triton.jit
def tiny_dot(a, b, USE_DOT: tl.constexpr, PREC: tl.constexpr):
    """a [M,K] @ b [K,N] for rank-pair tiles: tl.dot where the tile allows, else broadcast-sum."""
    if USE_DOT:
        return fdot(a, b, PREC)
    else:
        return tl.sum(a[:, :, None] * b[None, :, :], axis=1)


@triton.jit
def _pair_k(rk, rq, acc_psiv, acc_dks, acc_dkd, dssda, dgam, ks_k, psiv_k, wt, gamma,
            QR_S, DPHIO_S, QB_S, QKDOT, bh, bhc, tpos, tc, n, p, S, N, P,
            C: tl.constexpr, R: tl.constexpr, USE_DOT: tl.constexpr, PREC: tl.constexpr):
    """Key-rank rk x query-rank rq: contributions to rank rk's dPsiV, dK (local), dK (diag)."""
    CR: tl.constexpr = C * R
    iq = tc * R + rq
    qr_q = load_rows(QR_S, bhc, iq, n, N, CR)
    dphio_q = load_rows(DPHIO_S, bhc, iq, p, P, CR)
    qb_q = load_rows(QB_S, bhc, iq, n, N, CR)
    lkq = tiny_dot(ks_k, tl.trans(qr_q), USE_DOT, PREC)  # [C(k), C(q)]
    dkq = tiny_dot(psiv_k, tl.trans(dphio_q), USE_DOT, PREC)
    dssda += lkq * dkq
    acc_psiv += tiny_dot(lkq * wt, dphio_q, USE_DOT, PREC)
    acc_dks += tiny_dot(dkq * wt, qr_q, USE_DOT, PREC)
    qk = tl.load(QKDOT + ((bh * S + tpos) * R + rq) * R + rk).to(tl.float32)  # qk_dot[t, r_out=rq, r_in=rk]
    pd = tl.sum(psiv_k * dphio_q, axis=1)
    acc_psiv += (gamma * qk)[:, None] * dphio_q
    dgam += qk * pd
    acc_dkd += (gamma * pd)[:, None] * qb_q
    return acc_psiv, acc_dks, acc_dkd, dssda, dgam


@triton.jit
def _pair_q(rq, rk, acc_dqr, acc_dqd, dphio_q, wt, gamma, ts,
            KR_S, PSIV_S, KB_S, bhc, tc, n, p, N, P,
            C: tl.constexpr, R: tl.constexpr, USE_DOT: tl.constexpr, PREC: tl.constexpr):
    """Query-rank rq x key-rank rk: contributions to rank rq's dQ (local) and dQ (diag)."""
    CR: tl.constexpr = C * R
    ik = tc * R + rk
    ks_k = load_rows(KR_S, bhc, ik, n, N, CR) * ts[:, None]
    psiv_k = load_rows(PSIV_S, bhc, ik, p, P, CR)
    kb_k = load_rows(KB_S, bhc, ik, n, N, CR)
    dkq = tiny_dot(psiv_k, tl.trans(dphio_q), USE_DOT, PREC)
    acc_dqr += tiny_dot(tl.trans(dkq * wt), ks_k, USE_DOT, PREC)
    pd = tl.sum(psiv_k * dphio_q, axis=1)
    acc_dqd += (gamma * pd)[:, None] * kb_k
    return acc_dqr, acc_dqd


@triton.jit
def _key_rank(rk, dssda, dgam, wt, gamma, ts, dskip,
              KR_S, PSIV_S, QR_S, DPHIO_S, QB_S, QKDOT, DPSIV_S, DKS_S, DKD_S,
              bh, bhc, c, tc, n, p, S, N, P, C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr,
              BP: tl.constexpr, HAS_D: tl.constexpr, RANK_LOOP: tl.constexpr,
              USE_DOT: tl.constexpr, PREC: tl.constexpr):
    CR: tl.constexpr = C * R
    ik = tc * R + rk
    tpos = c * C + tc
    ks_k = load_rows(KR_S, bhc, ik, n, N, CR) * ts[:, None]
    psiv_k = load_rows(PSIV_S, bhc, ik, p, P, CR)
    acc_psiv = tl.zeros([C, BP], dtype=tl.float32)
    acc_dks = tl.zeros([C, BN], dtype=tl.float32)
    acc_dkd = tl.zeros([C, BN], dtype=tl.float32)
    if RANK_LOOP:
        for rq in range(R):
            acc_psiv, acc_dks, acc_dkd, dssda, dgam = _pair_k(
                rk, rq, acc_psiv, acc_dks, acc_dkd, dssda, dgam, ks_k, psiv_k, wt, gamma,
                QR_S, DPHIO_S, QB_S, QKDOT, bh, bhc, tpos, tc, n, p, S, N, P, C, R, USE_DOT, PREC)
    else:
        for rq in tl.static_range(R):
            acc_psiv, acc_dks, acc_dkd, dssda, dgam = _pair_k(
                rk, rq, acc_psiv, acc_dks, acc_dkd, dssda, dgam, ks_k, psiv_k, wt, gamma,
                QR_S, DPHIO_S, QB_S, QKDOT, bh, bhc, tpos, tc, n, p, S, N, P, C, R, USE_DOT, PREC)
    if HAS_D:
        acc_psiv += dskip * load_rows(DPHIO_S, bhc, ik, p, P, CR)
    store_rows(DPSIV_S, acc_psiv, bhc, ik, p, P, CR)
    store_rows(DKS_S, acc_dks, bhc, ik, n, N, CR)
    store_rows(DKD_S, acc_dkd, bhc, ik, n, N, CR)
    return dssda, dgam


@triton.jit
def _query_rank(rq, ddacs, dd, wt, gamma, ts, ecs, st,
                KR_S, PSIV_S, KB_S, QR_S, DPHIO_S, DQR_S, DQD_S,
                bhc, tc, n, p, N, P, C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr,
                RANK_LOOP: tl.constexpr, USE_DOT: tl.constexpr, PREC: tl.constexpr):
    CR: tl.constexpr = C * R
    iq = tc * R + rq
    dphio_q = load_rows(DPHIO_S, bhc, iq, p, P, CR)
    qr_q = load_rows(QR_S, bhc, iq, n, N, CR)
    acc_dqr = tl.zeros([C, BN], dtype=tl.float32)
    acc_dqd = tl.zeros([C, BN], dtype=tl.float32)
    if RANK_LOOP:
        for rk in range(R):
            acc_dqr, acc_dqd = _pair_q(rq, rk, acc_dqr, acc_dqd, dphio_q, wt, gamma, ts,
                                       KR_S, PSIV_S, KB_S, bhc, tc, n, p, N, P, C, R, USE_DOT, PREC)
    else:
        for rk in tl.static_range(R):
            acc_dqr, acc_dqd = _pair_q(rq, rk, acc_dqr, acc_dqd, dphio_q, wt, gamma, ts,
                                       KR_S, PSIV_S, KB_S, bhc, tc, n, p, N, P, C, R, USE_DOT, PREC)
    # inter-chunk q term: reads the cached state, not dstates
    dq_raw = tiny_dot(dphio_q, tl.trans(st), USE_DOT, PREC)
    ddacs += tl.sum(qr_q * dq_raw, axis=1)
    acc_dqr += dq_raw * ecs[:, None]
    dd += tl.sum(dphio_q * load_rows(PSIV_S, bhc, iq, p, P, CR), axis=0)
    store_rows(DQR_S, acc_dqr, bhc, iq, n, N, CR)
    store_rows(DQD_S, acc_dqd, bhc, iq, n, N, CR)
    return ddacs, dd


@triton.jit
def bwd_bwd_aux_kernel(
    QKDOT, STATES, DSKIP,
    QB_S, KB_S, QR_S, KR_S, PSIV_S, DPHIO_S, GAM_S, TS_S, ECS_S, EREV_S, WT_S, DECAY_S,
    DPSIV_S, DKS_S, DQR_S, DQD_S, DKD_S, DDP_S,
    DSSDA, DGAM, DDACS,
    S, H, N, P,
    C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr, HAS_D: tl.constexpr,
    RANK_LOOP: tl.constexpr, USE_DOT: tl.constexpr, PREC: tl.constexpr,
):
    nc = S // C
    b, h, c, bh, bhc = chunk_coords(H, nc)
    tc = tl.arange(0, C)
    n = tl.arange(0, BN)
    p = tl.arange(0, BP)
    tpos = c * C + tc
    gamma = load_time(GAM_S, bh, tpos, S)
    ts = load_time(TS_S, bh, tpos, S)
    ecs = load_time(ECS_S, bh, tpos, S)
    wt = tl.load(WT_S + (bhc * C + tc[:, None]) * C + tc[None, :])
    st = load_state_tile(STATES, bhc, n, p, N, P)
    if HAS_D:
        dskip = tl.load(DSKIP + h)
    else:
        dskip = 0.0
    dssda = tl.zeros([C, C], dtype=tl.float32)
    dgam = tl.zeros([C], dtype=tl.float32)
    ddacs = tl.zeros([C], dtype=tl.float32)
    dd = tl.zeros([BP], dtype=tl.float32)
    if RANK_LOOP:
        for rk in range(R):
            dssda, dgam = _key_rank(rk, dssda, dgam, wt, gamma, ts, dskip, KR_S, PSIV_S, QR_S, DPHIO_S, QB_S, QKDOT,
                                    DPSIV_S, DKS_S, DKD_S, bh, bhc, c, tc, n, p, S, N, P, C, R, BN, BP,
                                    HAS_D, RANK_LOOP, USE_DOT, PREC)
        for rq in range(R):
            ddacs, dd = _query_rank(rq, ddacs, dd, wt, gamma, ts, ecs, st, KR_S, PSIV_S, KB_S, QR_S, DPHIO_S,
                                    DQR_S, DQD_S, bhc, tc, n, p, N, P, C, R, BN, RANK_LOOP, USE_DOT, PREC)
    else:
        for rk in tl.static_range(R):
            dssda, dgam = _key_rank(rk, dssda, dgam, wt, gamma, ts, dskip, KR_S, PSIV_S, QR_S, DPHIO_S, QB_S, QKDOT,
                                    DPSIV_S, DKS_S, DKD_S, bh, bhc, c, tc, n, p, S, N, P, C, R, BN, BP,
                                    HAS_D, RANK_LOOP, USE_DOT, PREC)
        for rq in tl.static_range(R):
            ddacs, dd = _query_rank(rq, ddacs, dd, wt, gamma, ts, ecs, st, KR_S, PSIV_S, KB_S, QR_S, DPHIO_S,
                                    DQR_S, DQD_S, bhc, tc, n, p, N, P, C, R, BN, RANK_LOOP, USE_DOT, PREC)
    tl.store(DSSDA + (bhc * C + tc[:, None]) * C + tc[None, :], dssda)
    tl.store(DGAM + bh * S + tpos, dgam)
    tl.store(DDACS + bh * S + tpos, ddacs)
    tl.store(DDP_S + bhc, tl.sum(dd, axis=0))


@triton.jit
def bwd_bwd_scan_kernel(
    V, MV, STATES, ANG,
    QB_S, KB_S, QR_S, KR_S, PSIV_S, DPHIO_S, GAM_S, TS_S, ECS_S, EREV_S, WT_S, DECAY_S,
    DPSIV_S, DKS_S, DQR_S, DQD_S, DKD_S, DDP_S, DKR_S,
    DQ, DK, DV, DMV, DANG, DFAC, DDA, DDACSREV, DD,
    S, H, N, P, RD,
    C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr, BRD: tl.constexpr,
    HAS_D: tl.constexpr, FINALIZE: tl.constexpr, PREC: tl.constexpr,
):
    """The reverse scan with dstates [N,P] resident: only what reads dstates, then (FINALIZE)
    the inverse rotary / diagonal / DANGLES, or (prod) dK in the rotated domain to scratch."""
    bh = tl.program_id(0).to(tl.int64)
    b = bh // H
    h = bh % H
    CR: tl.constexpr = C * R
    nc = S // C
    i, ti, ri = fused_rows(C, R)
    n, partner, sgn, jn, rot = rot_cols(N, RD, BN)
    p = tl.arange(0, BP)
    mp = p < P
    tc = tl.arange(0, C)
    psi = tl.load(MV + (h * R + ri[:, None]) * P + p[None, :], mask=mp[None, :], other=0.0)
    dstates = tl.zeros([BN, BP], dtype=tl.float32)
    dmv = tl.zeros([R, BP], dtype=tl.float32)
    dd = 0.0
    for cc in range(0, nc):
        c = nc - 1 - cc
        bhc = bh * nc + c
        tpos = c * C + ti
        ts, erev, ecs, kr, ks, qr, psiv, dphio, decay, st = scan_step_operands(
            TS_S, EREV_S, ECS_S, KR_S, QR_S, PSIV_S, DPHIO_S, DECAY_S, STATES,
            bh, bhc, tpos, i, n, p, S, N, P, CR)
        v = tl.load(V + ((b * S + tpos[:, None]) * H + h) * P + p[None, :], mask=mp[None, :], other=0.0).to(tl.float32)
        dpsiv_inter, dk_raw = state_k_terms(ks, psiv, dstates, erev, PREC)
        dpsiv = load_rows(DPSIV_S, bhc, i, p, P, CR) + dpsiv_inter
        dv, dmv_c = value_grads(dpsiv, psi, v, C, R, BP)
        dmv += dmv_c
        tl.store(DV + ((b * S + c * C + tc[:, None]) * H + h) * P + p[None, :],
                 dv.to(DV.dtype.element_ty), mask=mp[None, :])
        tl.store(DDACSREV + bh * S + c * C + tc, vec_to_time(tl.sum(ks * dk_raw, axis=1), C, R))
        dks = load_rows(DKS_S, bhc, i, n, N, CR) + dk_raw * erev[:, None]
        tl.store(DFAC + bh * S + c * C + tc, vec_to_time(tl.sum(kr * dks, axis=1), C, R))
        dkr = dks * ts[:, None]
        dda = decay * tl.sum(tl.sum(st * dstates, axis=1), axis=0)
        tl.store(DDA + bh * S + c * C + tc, tl.zeros([C], dtype=tl.float32) + dda)
        if FINALIZE:
            cs, sn = load_angles_cs(ANG, b, h, tpos, n, jn, rot, S, H, N, RD)
            finalize_qk(DQ, DK, DANG, load_rows(DQR_S, bhc, i, n, N, CR), dkr,
                        load_rows(QB_S, bhc, i, n, N, CR), load_rows(QB_S, bhc, i, partner, N, CR),
                        load_rows(KB_S, bhc, i, n, N, CR), load_rows(KB_S, bhc, i, partner, N, CR),
                        cs, sn, load_rows(DQD_S, bhc, i, n, N, CR), load_rows(DKD_S, bhc, i, n, N, CR),
                        b, h, c, i, n, partner, sgn, jn, rot, S, H, N, RD, C, R, BN, BRD, PREC)
        else:
            store_rows(DKR_S, dkr, bhc, i, n, N, CR)
        dstates = dstates_step(dstates, decay, qr, dphio, ecs, PREC)
        dd += tl.load(DDP_S + bhc)
    store_value_sums(DMV, DD, dmv, dd, bh, p, P, R, HAS_D)


def aux_scratch_args(s: dict) -> tuple:
    return tuple(s[n] for n in AUX_SCRATCH)


def launch_aux(x: dict, s: dict, out: dict, meta, *, rank_loop: bool = False) -> None:
    bk = blocks(meta)
    launching.launch(bwd_bwd_aux_kernel, (meta.B * meta.H * meta.nchunks,))(
        x["qk_dot"], x["states"], scalar_ptr_or_dummy(x["d"], x["mimo_v"]),
        *stage1_pre.scratch_args(s), *aux_scratch_args(s),
        out["DSSDA"], out["DGAMMA"], out["DDA_CS"],
        meta.S, meta.H, meta.N, meta.P,
        C=meta.C, R=meta.R, BN=bk["BN"], BP=bk["BP"], HAS_D=meta.has_d, RANK_LOOP=rank_loop,
        USE_DOT=meta.C >= 16, PREC=dot_precision(x["q"].device), **CHUNK_LAUNCH,
    )


def launch_scan(x: dict, s: dict, out: dict, meta, *, finalize: bool = True) -> None:
    launching.launch(bwd_bwd_scan_kernel, (meta.B * meta.H,))(
        x["v"], x["mimo_v"], x["states"], x["angles"],
        *stage1_pre.scratch_args(s), *aux_scratch_args(s), s.get("DKR", s["DKS"]),
        out["DQ"], out["DK"], out["DV"], out["DMIMO_V"], out["DANGLES"], out["DFACTOR"], out["DDA"],
        out["DDA_CS_REV"], scalar_ptr_or_dummy(out["DD"], out["DDA"]),
        meta.S, meta.H, meta.N, meta.P, meta.RD,
        C=meta.C, R=meta.R, HAS_D=meta.has_d, FINALIZE=finalize,
        PREC=dot_precision(x["q"].device), **LOOP_LAUNCH, **blocks(meta),
    )


def run(x: dict, out: dict, meta) -> None:
    s = alloc_scratch(meta, x["q"].device, PRE_SCRATCH + AUX_SCRATCH)
    stage1_pre.launch_pre(x, s, meta)
    launch_aux(x, s, out, meta)
    launch_scan(x, s, out, meta)


STAGE = register_stage(StageSpec(
    name="stage2_aux",
    parent="stage1_pre",
    summary="aux kernel (B,H,nchunks) takes all chunk-local work off the scan; the scan keeps what reads dstates",
    entry=run,
    kernels=(KernelSpec("bwd_bwd_pre_kernel", Tag.PRE),
             KernelSpec("bwd_bwd_aux_kernel", Tag.AUX, "chunk-local work, rank pair by rank pair"),
             KernelSpec("bwd_bwd_scan_kernel", Tag.SCAN, "dstates-dependent terms, dstates resident")),
))
