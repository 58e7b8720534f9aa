"""stage0: the baseline. One program per (batch, head) walks the chunks in reverse and does
everything inside that loop, in upstream's order: discretization, rotary, chunk-local
matmuls, the dstates-dependent terms, the dstates update and every write-back."""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels.bwd_bwd.common import (
    DEFAULT_PREC, angle_grad_cols, block_to_time, blocks, fold_angles, load_decay_blocks,
    load_psiv_dphio, load_qk_rotated, rot_cols, rows_to_time, scalar_ptr_or_dummy, step_scalars,
    unrotate, vec_to_time,
)
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage


@triton.jit
def bwd_bwd_fused_kernel(
    # inputs
    DOUT, Q, K, V, QBIAS, KBIAS, MV, MO, STATES, QKDOT, DACS, DACSREV, DT, TRAP, SEGSUM, ANG, DSKIP,
    # outputs
    DQ, DK, DV, DMV, DANG, DFAC, DGAM, DDA, DSSDA, DDACSREV, DDACS, DD,
    # sizes
    S, H, G, N, P, RD,
    # meta
    C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr, BRD: tl.constexpr,
    REDUCE_O: tl.constexpr, HAS_D: tl.constexpr, PREC: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    b = pid // H
    h = pid % H
    hq = h // (H // G)
    bh = b * H + h
    CR: tl.constexpr = C * R
    nc = S // C
    i = tl.arange(0, CR)
    ti = i // R
    ri = i % R
    n, partner, sgn, jn, rot = rot_cols(N, RD, BN)
    mn = n < N
    p = tl.arange(0, BP)
    mp = p < P
    tc = tl.arange(0, C)
    jj = tl.arange(0, BRD)
    if HAS_D:
        dskip = tl.load(DSKIP + h)
    else:
        dskip = 0.0

    dstates = tl.zeros([BN, BP], dtype=tl.float32)  # gradient w.r.t. the state leaving chunk c
    dmv = tl.zeros([R, BP], dtype=tl.float32)
    dd = tl.zeros([BP], dtype=tl.float32)
    for cc in range(0, nc):
        c = nc - 1 - cc
        bhc = bh * nc + c
        tpos = c * C + ti
        # --- discretization, rotary, PsiV / dPhiO
        gamma, ts, ecs, erev = step_scalars(DT, TRAP, DACS, DACSREV, bh, tpos, S)
        qb, qbp, qr, cs, sn = load_qk_rotated(Q, QBIAS, ANG, b, h, hq, tpos, ri, n, partner, sgn, jn, rot, S, H, G, N, RD, R)
        kb, kbp, kr, _cs, _sn = load_qk_rotated(K, KBIAS, ANG, b, h, hq, tpos, ri, n, partner, sgn, jn, rot, S, H, G, N, RD, R)
        ks = kr * ts[:, None]
        v, psi, psiv, dphio = load_psiv_dphio(DOUT, V, MV, MO, b, h, tpos, ri, p, S, H, P, R, REDUCE_O)
        wt, qkd, same = load_decay_blocks(SEGSUM, QKDOT, bhc, bh, tpos, ti, ri, S, C, R)
        da_end = tl.load(DACS + bh * S + c * C + C - 1)
        decay = tl.exp(da_end)
        st = tl.load(STATES + (bhc * N + n[:, None]) * P + p[None, :],
                     mask=mn[:, None] & mp[None, :], other=0.0).to(tl.float32)

        # --- chunk-local products
        lkq = tl.dot(ks, tl.trans(qr), input_precision=PREC)  # [CR(k), CR(q)]
        dkq = tl.dot(psiv, tl.trans(dphio), input_precision=PREC)  # [CR(k), CR(q)]
        dssda = block_to_time(lkq * dkq, C, R)
        tl.store(DSSDA + (bhc * C + tc[:, None]) * C + tc[None, :], dssda)
        dkqw = dkq * wt
        gd = tl.where(same, dkq, 0.0) * gamma[:, None]
        dgam = vec_to_time(tl.sum(qkd * dkq, axis=1), C, R)
        tl.store(DGAM + bh * S + c * C + tc, dgam)

        # --- dPsiV: inter-chunk (dstates) + intra-chunk + diagonal + D
        dpsiv = tl.dot(ks, dstates, input_precision=PREC) * erev[:, None]
        dpsiv += tl.dot(lkq * wt, dphio, input_precision=PREC)
        dpsiv += tl.dot(qkd, dphio, input_precision=PREC) * gamma[:, None]
        if HAS_D:
            dpsiv += dskip * dphio
            dd += tl.sum(dphio * psiv, axis=0)
        dv = rows_to_time(dpsiv * psi, C, R, BP)
        tl.store(DV + ((b * S + c * C + tc[:, None]) * H + h) * P + p[None, :],
                 dv.to(DV.dtype.element_ty), mask=mp[None, :])
        dmv += tl.sum(tl.reshape(dpsiv * v, (C, R, BP)), axis=0)

        # --- dK path (w.r.t. ks, then kr) and the ddA terms it feeds
        dk_raw = tl.dot(psiv, tl.trans(dstates), input_precision=PREC)  # [CR, BN]
        tl.store(DDACSREV + bh * S + c * C + tc, vec_to_time(tl.sum(ks * dk_raw, axis=1), C, R))
        dks = dk_raw * erev[:, None] + tl.dot(dkqw, qr, input_precision=PREC)
        tl.store(DFAC + bh * S + c * C + tc, vec_to_time(tl.sum(kr * dks, axis=1), C, R))
        dkr = dks * ts[:, None]

        # --- state passing: ddA, then the dQ path
        dda = decay * tl.sum(tl.sum(st * dstates, axis=1), axis=0)
        tl.store(DDA + bh * S + c * C + tc, tl.zeros([C], dtype=tl.float32) + dda)
        dq_raw = tl.dot(dphio, tl.trans(st), input_precision=PREC)  # [CR, BN]
        tl.store(DDACS + bh * S + c * C + tc, vec_to_time(tl.sum(qr * dq_raw, axis=1), C, R))
        dqr = dq_raw * ecs[:, None] + tl.dot(tl.trans(dkqw), ks, input_precision=PREC)

        # --- inverse rotary, angle gradient, diagonal (qk_dot) correction, write-back
        g = angle_grad_cols(dqr, qb, qbp, sgn, cs, sn) + angle_grad_cols(dkr, kb, kbp, sgn, cs, sn)
        dang = rows_to_time(fold_angles(g, jn, rot, RD, BN, BRD), C, R, BRD)
        tl.store(DANG + ((b * S + c * C + tc[:, None]) * H + h) * RD + jj[None, :], dang,
                 mask=(jj < RD)[None, :])
        dq = unrotate(dqr, partner, sgn, cs, sn, BN) + tl.dot(tl.trans(gd), kb, input_precision=PREC)
        dk = unrotate(dkr, partner, sgn, cs, sn, BN) + tl.dot(gd, qb, input_precision=PREC)
        orow = ((b * S * R + c * CR + i[:, None]) * H + h) * N + n[None, :]
        tl.store(DQ + orow, dq.to(DQ.dtype.element_ty), mask=mn[None, :])
        tl.store(DK + orow, dk.to(DK.dtype.element_ty), mask=mn[None, :])

        # --- dstates now becomes the gradient w.r.t. the state entering chunk c
        dstates = dstates * decay + tl.dot(tl.trans(qr), dphio * ecs[:, None], input_precision=PREC)

    r_ = tl.arange(0, R)
    tl.store(DMV + (bh * R + r_[:, None]) * P + p[None, :], dmv, mask=mp[None, :])
    if HAS_D:
        tl.store(DD + bh, tl.sum(dd, axis=0))


def _launch_fused(x: dict, out: dict, meta, *, prec: str = DEFAULT_PREC, num_warps: int = 4):
    dummy = x["q_bias"]
    bwd_bwd_fused_kernel[(meta.B * meta.H,)](
        x["dout"], x["q"], x["k"], x["v"], x["q_bias"], x["k_bias"], x["mimo_v"],
        scalar_ptr_or_dummy(x["mimo_o"], dummy), x["states"], x["qk_dot"], x["da_cs"],
        x["da_cs_rev"], x["dt"], x["trap"], x["segsum"], x["angles"], scalar_ptr_or_dummy(x["d"], dummy),
        out["DQ"], out["DK"], out["DV"], out["DMIMO_V"], out["DANGLES"], out["DFACTOR"], out["DGAMMA"],
        out["DDA"], out["DSSDA"], out["DDA_CS_REV"], out["DDA_CS"], scalar_ptr_or_dummy(out["DD"], out["DDA"]),
        meta.S, meta.H, meta.G, meta.N, meta.P, meta.RD,
        C=meta.C, R=meta.R, REDUCE_O=meta.reduce_o, HAS_D=meta.has_d, PREC=prec,
        num_warps=num_warps, **blocks(meta),
    )


def run(x: dict, out: dict, meta) -> None:
    _launch_fused(x, out, meta)


STAGE = register_stage(StageSpec(
    name="stage0",
    parent=None,
    summary="baseline: one program per (B,H), everything inside the reverse chunk loop",
    entry=run,
    kernels=(KernelSpec("bwd_bwd_fused_kernel", Tag.FUSED, "the whole bwd_bwd in one launch"),),
))
