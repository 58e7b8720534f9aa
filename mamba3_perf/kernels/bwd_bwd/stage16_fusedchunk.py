"""stage16_fusedchunk: one kernel per chunk does every chunk-local and dstates-dependent term.

stage15 runs six kernels: pre (rotated q / k and per-step scalars into fp32 scratch), the
streamed aux, the state pass, state_terms, chunk_sum and post; the [C*R, N] fp32 rows of
QR / KR / DKS / DQR / DKR pass through HBM between them, and each kernel reloads what the one
before it had in registers. Here:

* the state pass (stage6's loop, on stage15's tiles where uses_wave takes them) rotates its
  q columns itself from q, q_bias and the angles and takes exp(da_cs) and the chunk decay
  from da_cs: no pre kernel;
* ``fused_chunk`` on a (B, H, nchunks) grid reads only the 16-bit inputs, the cached states
  and the dstates the pass stored, and writes every output of its chunk. It walks the N
  columns in pairs of blocks (j, j + N/2), the columns rotate-half mixes, so q / k are rotated
  and dQ / dK un-rotated in registers, and DANGLES formed there: once over N for k.q^T and
  dPsiV's dstates term, once more for dK, dQ, the diagonal terms and the N sums;
* chunk_sum adds the chunks' DMIMO_V and D parts as before.

Shapes whose C*R fused rows do not make one tile of 16 to 64 (stage7_streamaux.folds) run
stage15.
"""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels.bwd_bwd import stage6_statepass, stage7_streamaux, stage15_passwave
from mamba3_perf.kernels.bwd_bwd.common import (
    alloc_scratch, angle_grad_pair, blocks, chunk_frame, dot_precision, load_psiv_dphio,
    load_qkd, pow2, rows_to_time, scalar_ptr_or_dummy, score_grads, score_weights,
    local_dpsiv, split_precisions, step_scalars, value_grads, vec_to_time, wt_from_segsum,
)
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage

FUSED_NBLOCK = 16  # columns per half-block: [C*R, 16] operand tiles, as the streamed aux's
FUSED_LAUNCH = dict(num_warps=4, num_stages=1)


@triton.jit
def _pair_cols(j, N):
    """Column indices of the pair (j, j + N/2) for first-half columns j; N (out of range, so
    masked) where j >= N/2."""
    mj = j < N // 2
    return tl.where(mj, j, N), tl.where(mj, j + N // 2, N)


@triton.jit
def _step_cos_sin(ANG, b, h, c, j, S, H, RD, C: tl.constexpr, R: tl.constexpr, NB: tl.constexpr):
    """cos / sin of the angles j of one chunk's steps on its fused rows, [C*R, NB]: taken once
    per step and broadcast over the ranks; 1 / 0 where j >= RD (an unrotated column)."""
    tc = tl.arange(0, C)
    a = tl.load(ANG + ((b * S + c * C + tc[:, None]) * H + h) * RD + j[None, :], mask=(j < RD)[None, :], other=0.0)
    cs = tl.reshape(tl.broadcast_to(tl.cos(a)[:, None, :], (C, R, NB)), (C * R, NB))
    sn = tl.reshape(tl.broadcast_to(tl.sin(a)[:, None, :], (C, R, NB)), (C * R, NB))
    return cs, sn


@triton.jit
def _row_ptrs(X, BIAS, b, h, hq, tpos, ri, S, G, N, R: tl.constexpr):
    """Pointers to column 0 of q or k ([B,S,R,G,N]) and of its bias ([H,R,N]) on one chunk's
    fused rows, [C*R] each: formed once, so a block's loads add only the column."""
    return X + (((b * S + tpos) * R + ri) * G + hq) * N, BIAS + (h * R + ri) * N


@triton.jit
def _pair_rows(xrow, brow, c1, c2, cs, sn, N):
    """q or k plus bias on columns c1 and c2 = c1 + N/2 of one chunk's fused rows (row pointers
    from _row_ptrs): the pre-rotation pair and the rotated pair (c x1 - s x2, s x1 + c x2)."""
    m1 = (c1 < N)[None, :]
    m2 = (c2 < N)[None, :]
    x1 = (tl.load(xrow[:, None] + c1[None, :], mask=m1, other=0.0).to(tl.float32)
          + tl.load(brow[:, None] + c1[None, :], mask=m1, other=0.0))
    x2 = (tl.load(xrow[:, None] + c2[None, :], mask=m2, other=0.0).to(tl.float32)
          + tl.load(brow[:, None] + c2[None, :], mask=m2, other=0.0))
    return x1, x2, cs * x1 - sn * x2, sn * x1 + cs * x2


@triton.jit
def _state_rows(base, cols, p, N, P):
    """Rows ``cols`` of an [N, P] state at ``base`` (one chunk's cached state or dstates), fp32."""
    return tl.load(base + cols[:, None] * P + p[None, :], mask=(cols < N)[:, None] & (p < P)[None, :],
                   other=0.0).to(tl.float32)


@triton.jit
def _dk_half(dkqw, psiv, qr, kr, ts, erev, ds, PREC: tl.constexpr):
    """One block of N columns of dK in the rotated domain (times trap_scale) and the row sums
    of its DDA_CS_REV and DFACTOR terms."""
    dk_raw = tl.dot(psiv, tl.trans(ds), input_precision=PREC)
    dks = tl.dot(dkqw, qr, input_precision=PREC) + dk_raw * erev[:, None]
    return dks * ts[:, None], tl.sum(kr * ts[:, None] * dk_raw, axis=1), tl.sum(kr * dks, axis=1)


@triton.jit
def _dq_half(dkqw, dphio, qr, kr, ts, ecs, st, PQ: tl.constexpr):
    """One block of N columns of dQ in the rotated domain and the row sums of its DDA_CS terms."""
    dq_raw = tl.dot(dphio, tl.trans(st), input_precision=PQ)
    dqr = tl.dot(tl.trans(dkqw), kr * ts[:, None], input_precision=PQ) + dq_raw * ecs[:, None]
    return dqr, tl.sum(qr * dq_raw, axis=1)


@triton.jit
def bwd_bwd_fused_chunk_kernel(
    Q, K, QBIAS, KBIAS, ANG, DOUT, V, MV, MO, QKDOT, STATES, DSKIP, DT, TRAP, DACS, DACSREV, SEGSUM,
    DST_S, DMVP_S, DDP_S,
    DQ, DK, DV, DANG, DFAC, DGAM, DDA, DSSDA, DDACSREV, DDACS,
    S, H, G, N, P, RD,
    C: tl.constexpr, R: tl.constexpr, NB: tl.constexpr, BP: tl.constexpr, HAS_D: tl.constexpr,
    REDUCE_O: tl.constexpr, PREC: tl.constexpr, PLO: tl.constexpr, PQ: tl.constexpr,
):
    """Every output of one chunk from the inputs, its cached state and the dstates it sees."""
    b, h, c, bh, bhc, i, ti, ri, tpos, tc = chunk_frame(S, H, C, R)
    CR: tl.constexpr = C * R
    hq = h // (H // G)
    half = N // 2
    p = tl.arange(0, BP)
    mp = p < P
    nb = tl.arange(0, NB)
    gamma, ts, ecs, erev = step_scalars(DT, TRAP, DACS, DACSREV, bh, tpos, S)
    qrow, qbrow = _row_ptrs(Q, QBIAS, b, h, hq, tpos, ri, S, G, N, R)
    krow, kbrow = _row_ptrs(K, KBIAS, b, h, hq, tpos, ri, S, G, N, R)
    dst = DST_S + bhc * N * P
    stb = STATES + bhc * N * P
    # k.q^T and dPsiV's dstates term: sums over all N
    lkq = tl.zeros([CR, CR], dtype=tl.float32)
    dpsiv_st = tl.zeros([CR, BP], dtype=tl.float32)
    for n0 in range(0, half, NB):
        c1, c2 = _pair_cols(n0 + nb, N)
        cs, sn = _step_cos_sin(ANG, b, h, c, n0 + nb, S, H, RD, C, R, NB)
        _qb1, _qb2, qr1, qr2 = _pair_rows(qrow, qbrow, c1, c2, cs, sn, N)
        _kb1, _kb2, kr1, kr2 = _pair_rows(krow, kbrow, c1, c2, cs, sn, N)
        ks1 = kr1 * ts[:, None]
        ks2 = kr2 * ts[:, None]
        lkq += tl.dot(ks1, tl.trans(qr1), input_precision=PREC)
        lkq += tl.dot(ks2, tl.trans(qr2), input_precision=PREC)
        dpsiv_st += tl.dot(ks1, _state_rows(dst, c1, p, N, P), input_precision=PREC)
        dpsiv_st += tl.dot(ks2, _state_rows(dst, c2, p, N, P), input_precision=PREC)
    v, psi, psiv, dphio = load_psiv_dphio(DOUT, V, MV, MO, b, h, tpos, ri, p, S, H, P, R, REDUCE_O)
    dkq = tl.dot(psiv, tl.trans(dphio), input_precision=PREC)  # [CR(k), CR(q)]
    qkd, same = load_qkd(QKDOT, bh, tpos, ti, ri, S, R)
    dssda, dgam = score_grads(lkq, dkq, qkd, C, R)
    tl.store(DSSDA + (bhc * C + tc[:, None]) * C + tc[None, :], dssda)
    toff = bh * S + c * C + tc
    tl.store(DGAM + toff, dgam)
    wt = wt_from_segsum(SEGSUM, bhc, ti, C)
    if HAS_D:
        dskip = tl.load(DSKIP + h)
    else:
        dskip = 0.0
    dpsiv, dd_part = local_dpsiv(lkq, wt, qkd, gamma, psiv, dphio, dskip, HAS_D, PREC)
    dpsiv += dpsiv_st * erev[:, None]
    dv, dmv = value_grads(dpsiv, psi, v, C, R, BP)
    tl.store(DV + ((b * S + c * C + tc[:, None]) * H + h) * P + p[None, :], dv.to(DV.dtype.element_ty),
             mask=mp[None, :])
    r_ = tl.arange(0, R)
    tl.store(DMVP_S + (bhc * R + r_[:, None]) * P + p[None, :], dmv, mask=mp[None, :])
    tl.store(DDP_S + bhc, tl.sum(dd_part, axis=0))
    dkqw, gd = score_weights(dkq, wt, same, gamma)
    orow = ((b * S * R + c * CR + i[:, None]) * H + h) * N
    drow = ((b * S + c * C + tc[:, None]) * H + h) * RD
    # the k side: dK (rotated domain, then back, plus its qk_dot diagonal term), DDA_CS_REV,
    # DFACTOR, and DANGLES' k part
    rev = tl.zeros([CR], dtype=tl.float32)
    fac = tl.zeros([CR], dtype=tl.float32)
    for n0 in range(0, half, NB):
        j = n0 + nb
        c1, c2 = _pair_cols(j, N)
        cs, sn = _step_cos_sin(ANG, b, h, c, j, S, H, RD, C, R, NB)
        qb1, qb2, qr1, qr2 = _pair_rows(qrow, qbrow, c1, c2, cs, sn, N)
        kb1, kb2, kr1, kr2 = _pair_rows(krow, kbrow, c1, c2, cs, sn, N)
        dkr1, rev1, fac1 = _dk_half(dkqw, psiv, qr1, kr1, ts, erev, _state_rows(dst, c1, p, N, P), PREC)
        dkr2, rev2, fac2 = _dk_half(dkqw, psiv, qr2, kr2, ts, erev, _state_rows(dst, c2, p, N, P), PREC)
        rev += rev1 + rev2
        fac += fac1 + fac2
        # the inverse rotation (x1, x2) <- (c x1 + s x2, c x2 - s x1)
        dk1 = cs * dkr1 + sn * dkr2 + tl.dot(gd, qb1, input_precision=PLO)
        dk2 = cs * dkr2 - sn * dkr1 + tl.dot(gd, qb2, input_precision=PLO)
        tl.store(DK + orow + c1[None, :], dk1.to(DK.dtype.element_ty), mask=(c1 < N)[None, :])
        tl.store(DK + orow + c2[None, :], dk2.to(DK.dtype.element_ty), mask=(c2 < N)[None, :])
        tl.store(DANG + drow + j[None, :], rows_to_time(angle_grad_pair(dkr1, dkr2, kb1, kb2, cs, sn), C, R, NB),
                 mask=(j < RD)[None, :])
    tl.store(DDACSREV + toff, vec_to_time(rev, C, R))
    tl.store(DFAC + toff, vec_to_time(fac, C, R))
    tl.debug_barrier()  # DANGLES' k part is read back below, by other threads of the program
    # the q side: dQ, DDA_CS, DANGLES' q part; and DDA
    qcs = tl.zeros([CR], dtype=tl.float32)
    acc_dda = tl.zeros([NB, BP], dtype=tl.float32)
    for n0 in range(0, half, NB):
        j = n0 + nb
        c1, c2 = _pair_cols(j, N)
        cs, sn = _step_cos_sin(ANG, b, h, c, j, S, H, RD, C, R, NB)
        qb1, qb2, qr1, qr2 = _pair_rows(qrow, qbrow, c1, c2, cs, sn, N)
        kb1, kb2, kr1, kr2 = _pair_rows(krow, kbrow, c1, c2, cs, sn, N)
        st1 = _state_rows(stb, c1, p, N, P)
        st2 = _state_rows(stb, c2, p, N, P)
        dqr1, qcs1 = _dq_half(dkqw, dphio, qr1, kr1, ts, ecs, st1, PQ)
        dqr2, qcs2 = _dq_half(dkqw, dphio, qr2, kr2, ts, ecs, st2, PQ)
        qcs += qcs1 + qcs2
        acc_dda += st1 * _state_rows(dst, c1, p, N, P) + st2 * _state_rows(dst, c2, p, N, P)
        dq1 = cs * dqr1 + sn * dqr2 + tl.dot(tl.trans(gd), kb1, input_precision=PLO)
        dq2 = cs * dqr2 - sn * dqr1 + tl.dot(tl.trans(gd), kb2, input_precision=PLO)
        tl.store(DQ + orow + c1[None, :], dq1.to(DQ.dtype.element_ty), mask=(c1 < N)[None, :])
        tl.store(DQ + orow + c2[None, :], dq2.to(DQ.dtype.element_ty), mask=(c2 < N)[None, :])
        dang = DANG + drow + j[None, :]
        mj = (j < RD)[None, :]
        tl.store(dang, tl.load(dang, mask=mj, other=0.0)
                 + rows_to_time(angle_grad_pair(dqr1, dqr2, qb1, qb2, cs, sn), C, R, NB), mask=mj)
    tl.store(DDACS + toff, vec_to_time(qcs, C, R))
    decay = tl.exp(tl.load(DACS + bh * S + c * C + C - 1))
    tl.store(DDA + toff, tl.zeros([C], dtype=tl.float32) + decay * tl.sum(tl.sum(acc_dda, axis=1), axis=0))


def launch_state_pass_rot(x: dict, s: dict, meta) -> None:
    """The state pass with qr rotated in it (no pre scratch), on stage15's transposed tiles where
    stage15_passwave.uses_wave takes them and on stage6's elsewhere."""
    wave = stage15_passwave.uses_wave(meta)
    if wave:
        bnb, bpb = stage15_passwave.wave_block(meta), pow2(meta.P)
        grid = (meta.B * meta.H, triton.cdiv(meta.N, bnb), 1)
    else:
        bnb, bpb = stage6_statepass.pass_tiles(meta)
        grid = (meta.B * meta.H, triton.cdiv(meta.N, bnb), triton.cdiv(meta.P, bpb))
    bwd_bwd_state_pass_rot_kernel[grid](
        s["DST"], *stage6_statepass.value_inputs(x), x["q"], x["q_bias"], x["angles"], x["da_cs"],
        meta.S, meta.H, meta.G, meta.N, meta.P, meta.RD,
        C=meta.C, R=meta.R, BNB=bnb, BPB=bpb, PREC=dot_precision(x["q"].device),
        REDUCE_O=meta.reduce_o, TRANS=wave, **stage6_statepass.PASS_LAUNCH,
    )


@triton.jit
def bwd_bwd_state_pass_rot_kernel(
    DST_S, DOUT, V, MV, MO, Q, QBIAS, ANG, DACS,
    S, H, G, N, P, RD,
    C: tl.constexpr, R: tl.constexpr, BNB: tl.constexpr, BPB: tl.constexpr, PREC: tl.constexpr,
    REDUCE_O: tl.constexpr, TRANS: tl.constexpr,
):
    """stage6_statepass.state_pass_loop on a (B*H, N/BNB, P/BPB) grid, its q columns rotated in
    the loop (ROT) and dPhiO from the inputs; TRANS: stage15's transposed [BPB, BNB] tiles."""
    stage6_statepass.state_pass_loop(
        DST_S, DOUT, DACS, DACS, DST_S, DOUT, V, MV, MO, tl.program_id(0).to(tl.int64),
        tl.program_id(1) * BNB + tl.arange(0, BNB), tl.program_id(2) * BPB + tl.arange(0, BPB),
        S, H, N, P, C, R, BNB, BPB, PREC, REDUCE_O, True, TRANS, Q, QBIAS, ANG, DACS, G, RD, True)


def launch_fused_chunk(x: dict, s: dict, out: dict, meta) -> None:
    fb = min(FUSED_NBLOCK, pow2(meta.N // 2))
    bwd_bwd_fused_chunk_kernel[(meta.B * meta.H * meta.nchunks,)](
        x["q"], x["k"], x["q_bias"], x["k_bias"], x["angles"], *stage6_statepass.value_inputs(x), x["qk_dot"],
        x["states"], scalar_ptr_or_dummy(x["d"], x["mimo_v"]), x["dt"], x["trap"], x["da_cs"], x["da_cs_rev"],
        x["segsum"], s["DST"], s["DMVP"], s["DDP"],
        out["DQ"], out["DK"], out["DV"], out["DANGLES"], out["DFACTOR"], out["DGAMMA"], out["DDA"], out["DSSDA"],
        out["DDA_CS_REV"], out["DDA_CS"],
        meta.S, meta.H, meta.G, meta.N, meta.P, meta.RD,
        C=meta.C, R=meta.R, NB=fb, BP=blocks(meta)["BP"], HAS_D=meta.has_d, REDUCE_O=meta.reduce_o,
        **split_precisions(x, low=True), **FUSED_LAUNCH,
    )


def run(x: dict, out: dict, meta) -> None:
    if not stage7_streamaux.folds(meta):
        stage15_passwave.run(x, out, meta)
        return
    s = alloc_scratch(meta, x["q"].device, ("DST", "DMVP", "DDP"))
    launch_state_pass_rot(x, s, meta)
    launch_fused_chunk(x, s, out, meta)
    stage6_statepass.launch_chunk_sum(x, s, out, meta)


STAGE = register_stage(StageSpec(
    name="stage16_fusedchunk",
    parent="stage15_passwave",
    summary="no pre kernel: the state pass rotates q itself, then one kernel per chunk does every "
            "chunk-local and dstates-dependent term from the inputs, rotating and un-rotating "
            "q / k in registers by column pairs (j, j + N/2)",
    entry=run,
    # stage15's kernels stay in the list: the shapes outside stage7_streamaux.folds launch them
    kernels=(KernelSpec("bwd_bwd_state_pass_rot_kernel", Tag.SCAN, "dstates recurrence, q rotated in the loop"),
             KernelSpec("bwd_bwd_fused_chunk_kernel", Tag.POST, "every output of a chunk from the inputs, "
                        "its cached state and its dstates"),) + stage15_passwave.STAGE.kernels,
    zero_outputs=False,
))
