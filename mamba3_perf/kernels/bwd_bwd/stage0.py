"""stage0: the baseline. One program per (batch, head) walks the chunks in reverse and does
everything inside that loop, in upstream's order: discretization, rotary, chunk-local
matmuls, the dstates-dependent terms, the dstates update and every write-back."""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.bwd_bwd.common import (
    LOOP_LAUNCH, blocks, dot_precision, fused_chunk_body, fused_rows, load_psiv_dphio,
    load_qk_rotated, load_qkd, load_state_tile, rot_cols, scalar_ptr_or_dummy, step_scalars,
    store_value_sums, wt_from_segsum,
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
    nc = S // C
    i, ti, ri = fused_rows(C, R)
    n, partner, sgn, jn, rot = rot_cols(N, RD, BN)
    p = tl.arange(0, BP)
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
        v, psi, psiv, dphio = load_psiv_dphio(DOUT, V, MV, MO, b, h, tpos, ri, p, S, H, P, R, REDUCE_O)
        wt = wt_from_segsum(SEGSUM, bhc, ti, C)
        qkd, same = load_qkd(QKDOT, bh, tpos, ti, ri, S, R)
        da_end = tl.load(DACS + bh * S + c * C + C - 1)
        decay = tl.exp(da_end)
        st = load_state_tile(STATES, bhc, n, p, N, P)

        dstates, dmv_c, dd_part = fused_chunk_body(
            DSSDA, DGAM, DV, DDACSREV, DFAC, DDA, DDACS, DQ, DK, DANG,
            qb, qbp, qr, kb, kbp, kr, cs, sn, gamma, ts, ecs, erev, v, psi, psiv, dphio, wt, qkd,
            same, st, decay, dstates, dskip, b, h, c, bh, bhc, i, n, partner, sgn, jn, rot, p,
            S, H, N, P, RD, C, R, BN, BP, BRD, HAS_D, PREC)
        dmv += dmv_c
        dd += dd_part


    store_value_sums(DMV, DD, dmv, tl.sum(dd, axis=0), bh, p, P, R, HAS_D)


def _launch_fused(x: dict, out: dict, meta):
    dummy = x["q_bias"]
    launching.launch(bwd_bwd_fused_kernel, (meta.B * meta.H,))(
        x["dout"], x["q"], x["k"], x["v"], x["q_bias"], x["k_bias"], x["mimo_v"],
        scalar_ptr_or_dummy(x["mimo_o"], dummy), x["states"], x["qk_dot"], x["da_cs"],
        x["da_cs_rev"], x["dt"], x["trap"], x["segsum"], x["angles"], scalar_ptr_or_dummy(x["d"], dummy),
        out["DQ"], out["DK"], out["DV"], out["DMIMO_V"], out["DANGLES"], out["DFACTOR"], out["DGAMMA"],
        out["DDA"], out["DSSDA"], out["DDA_CS_REV"], out["DDA_CS"], scalar_ptr_or_dummy(out["DD"], out["DDA"]),
        meta.S, meta.H, meta.G, meta.N, meta.P, meta.RD,
        C=meta.C, R=meta.R, REDUCE_O=meta.reduce_o, HAS_D=meta.has_d, PREC=dot_precision(x["q"].device),
        **LOOP_LAUNCH, **blocks(meta),
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
