"""stage1_pre: a ``pre`` kernel on a (B,H,nchunks) grid precomputes the discretization
(gamma, trap_scale, exp(da_cs), exp(da_cs_rev), chunk decay, the masked decay matrix), the
rotated and pre-rotation q/k, PsiV and dPhiO into fp32 scratch; the scan reads them and
keeps everything else of stage0's loop."""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.bwd_bwd.common import (
    CHUNK_LAUNCH, LOOP_LAUNCH, PRE_SCRATCH, alloc_scratch, blocks, chunk_frame, dot_precision,
    fused_chunk_body, fused_rows, load_angles_cs, load_psiv_dphio, load_qk_rotated, load_qkd,
    load_rows, load_state_tile, load_time, rot_cols, scalar_ptr_or_dummy, store_chunk_scalars, store_rows,
    store_value_sums, sub_chunk, wt_rows,
)
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage


@triton.jit
def store_value_rows(DOUT, V, MV, MO, PSIV_S, DPHIO_S, b, h, bhc, i, tpos, ri, p, S, H, P,
                     R: tl.constexpr, CR: tl.constexpr, REDUCE_O: tl.constexpr):
    """A chunk's PsiV and dPhiO rows [C*R, len(p)] from the inputs into the pre scratch."""
    _v, _psi, psiv, dphio = load_psiv_dphio(DOUT, V, MV, MO, b, h, tpos, ri, p, S, H, P, R, REDUCE_O)
    store_rows(PSIV_S, psiv, bhc, i, p, P, CR)
    store_rows(DPHIO_S, dphio, bhc, i, p, P, CR)


@triton.jit
def bwd_bwd_pre_kernel(
    DOUT, Q, K, V, QBIAS, KBIAS, MV, MO, DACS, DACSREV, DT, TRAP, SEGSUM, ANG,
    QB_S, KB_S, QR_S, KR_S, PSIV_S, DPHIO_S, GAM_S, TS_S, ECS_S, EREV_S, WT_S, DECAY_S,
    S, H, G, N, P, RD,
    C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr, REDUCE_O: tl.constexpr,
    INPUTS: tl.constexpr,
):
    """INPUTS (stage10): QB, KB, PsiV and dPhiO are not stored; their readers load the inputs."""
    b, h, c, bh, bhc, i, ti, ri, tpos, tc = chunk_frame(S, H, C, R)
    hq = h // (H // G)
    CR: tl.constexpr = C * R
    n, partner, sgn, jn, rot = rot_cols(N, RD, BN)
    p = tl.arange(0, BP)
    qb, _qbp, qr, _cs, _sn = load_qk_rotated(Q, QBIAS, ANG, b, h, hq, tpos, ri, n, partner, sgn, jn, rot, S, H, G, N, RD, R)
    kb, _kbp, kr, _cs2, _sn2 = load_qk_rotated(K, KBIAS, ANG, b, h, hq, tpos, ri, n, partner, sgn, jn, rot, S, H, G, N, RD, R)
    store_rows(QR_S, qr, bhc, i, n, N, CR)
    store_rows(KR_S, kr, bhc, i, n, N, CR)
    if not INPUTS:
        store_rows(QB_S, qb, bhc, i, n, N, CR)
        store_rows(KB_S, kb, bhc, i, n, N, CR)
        store_value_rows(DOUT, V, MV, MO, PSIV_S, DPHIO_S, b, h, bhc, i, tpos, ri, p, S, H, P, R, CR, REDUCE_O)
    store_chunk_scalars(DT, TRAP, DACS, DACSREV, SEGSUM, GAM_S, TS_S, ECS_S, EREV_S, WT_S, DECAY_S,
                        bh, bhc, c, tc, S, C)


@triton.jit
def bwd_bwd_scan_full_kernel(
    V, MV, STATES, QKDOT, ANG, DSKIP,
    QB_S, KB_S, QR_S, KR_S, PSIV_S, DPHIO_S, GAM_S, TS_S, ECS_S, EREV_S, WT_S, DECAY_S,
    DQ, DK, DV, DMV, DANG, DFAC, DGAM, DDA, DSSDA, DDACSREV, DDACS, DD,
    S, H, N, P, RD,
    C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr, BRD: tl.constexpr,
    HAS_D: tl.constexpr, PREC: tl.constexpr,
):
    bh = tl.program_id(0).to(tl.int64)
    b = bh // H
    h = bh % H
    CR: tl.constexpr = C * R
    nc = S // C
    i, ti, ri = fused_rows(C, R)
    n, partner, sgn, jn, rot = rot_cols(N, RD, BN)
    p = tl.arange(0, BP)
    mp = p < P
    if HAS_D:
        dskip = tl.load(DSKIP + h)
    else:
        dskip = 0.0
    psi = tl.load(MV + (h * R + ri[:, None]) * P + p[None, :], mask=mp[None, :], other=0.0)
    dstates = tl.zeros([BN, BP], dtype=tl.float32)
    dmv = tl.zeros([R, BP], dtype=tl.float32)
    dd = tl.zeros([BP], dtype=tl.float32)
    for cc in range(0, nc):
        c = nc - 1 - cc
        bhc = bh * nc + c
        tpos = c * C + ti
        qb = load_rows(QB_S, bhc, i, n, N, CR)
        qbp = load_rows(QB_S, bhc, i, partner, N, CR)
        kb = load_rows(KB_S, bhc, i, n, N, CR)
        kbp = load_rows(KB_S, bhc, i, partner, N, CR)
        qr = load_rows(QR_S, bhc, i, n, N, CR)
        kr = load_rows(KR_S, bhc, i, n, N, CR)
        cs, sn = load_angles_cs(ANG, b, h, tpos, n, jn, rot, S, H, N, RD)
        psiv = load_rows(PSIV_S, bhc, i, p, P, CR)
        dphio = load_rows(DPHIO_S, bhc, i, p, P, CR)
        v = tl.load(V + ((b * S + tpos[:, None]) * H + h) * P + p[None, :], mask=mp[None, :], other=0.0).to(tl.float32)
        gamma = load_time(GAM_S, bh, tpos, S)
        ts = load_time(TS_S, bh, tpos, S)
        ecs = load_time(ECS_S, bh, tpos, S)
        erev = load_time(EREV_S, bh, tpos, S)
        wt = wt_rows(WT_S, bhc, ti, C)
        qkd, same = load_qkd(QKDOT, bh, tpos, ti, ri, S, R)
        decay = tl.load(DECAY_S + bhc)
        st = load_state_tile(STATES, bhc, n, p, N, P)
        dstates, dmv_c, dd_part = fused_chunk_body(
            DSSDA, DGAM, DV, DDACSREV, DFAC, DDA, DDACS, DQ, DK, DANG,
            qb, qbp, qr, kb, kbp, kr, cs, sn, gamma, ts, ecs, erev, v, psi, psiv, dphio, wt, qkd,
            same, st, decay, dstates, dskip, b, h, c, bh, bhc, i, n, partner, sgn, jn, rot, p,
            S, H, N, P, RD, C, R, BN, BP, BRD, HAS_D, PREC)
        dmv += dmv_c
        dd += dd_part
    store_value_sums(DMV, DD, dmv, tl.sum(dd, axis=0), bh, p, P, R, HAS_D)


def scratch_args(s: dict) -> tuple:
    return tuple(s[n] for n in PRE_SCRATCH)


def launch_pre(x: dict, s: dict, meta, *, inputs: bool = False, kernel=None, launch: dict | None = None,
               steps: int | None = None, heads_inner: bool = False, qk_inputs: bool = False,
               rot_inline: bool = False) -> None:
    """``inputs``: leave QB, KB, PSIV, DPHIO unwritten (stage10's readers load the inputs);
    ``kernel``: another pre kernel of the same signature (stage11); ``launch``: its launch
    options (default CHUNK_LAUNCH; stage16); ``steps``: time steps per program, a divisor of the
    chunk size, for a ``kernel`` that takes SUB (stage21's halves kernel; stage25): launched
    with C = ``steps`` and SUB = C / steps times the programs; ``heads_inner``: for the same
    kernel, program ids in (b, chunk, head) order (common.chunk_coords' HEADS_INNER);
    ``qk_inputs``: without ``inputs``, leave QB and KB unwritten but store PsiV and dPhiO (stage11's
    and stage21's kernels, QK_INPUTS; stage7_streamaux.run_with's ``qk_inputs``); ``rot_inline``: cos /
    sin of the angles to s["COS"] / s["SIN"] and no QR / KR (stage11's and stage21's kernels,
    ROT_CS; stage7_streamaux.run_with's ``rot_inline``)."""
    extra = dict(HEADS_INNER=True) if heads_inner else {}
    if rot_inline:
        extra.update(ROT_CS=True, COS_S=s["COS"], SIN_S=s["SIN"])
    if qk_inputs and not inputs:
        extra["QK_INPUTS"] = True
    sub = sub_chunk(meta, steps)
    if sub is not meta:
        meta, extra = sub, dict(extra, SUB=meta.C // sub.C)
    bk = blocks(meta)
    launching.launch(kernel or bwd_bwd_pre_kernel, (meta.B * meta.H * meta.nchunks,))(
        x["dout"], x["q"], x["k"], x["v"], x["q_bias"], x["k_bias"], x["mimo_v"],
        scalar_ptr_or_dummy(x["mimo_o"], x["mimo_v"]), x["da_cs"], x["da_cs_rev"], x["dt"], x["trap"],
        x["segsum"], x["angles"], *scratch_args(s),
        meta.S, meta.H, meta.G, meta.N, meta.P, meta.RD,
        C=meta.C, R=meta.R, BN=bk["BN"], BP=bk["BP"], REDUCE_O=meta.reduce_o, INPUTS=inputs,
        **extra, **(launch or CHUNK_LAUNCH),
    )


def launch_scan_full(x: dict, s: dict, out: dict, meta) -> None:
    launching.launch(bwd_bwd_scan_full_kernel, (meta.B * meta.H,))(
        x["v"], x["mimo_v"], x["states"], x["qk_dot"], x["angles"], scalar_ptr_or_dummy(x["d"], x["mimo_v"]),
        *scratch_args(s),
        out["DQ"], out["DK"], out["DV"], out["DMIMO_V"], out["DANGLES"], out["DFACTOR"], out["DGAMMA"],
        out["DDA"], out["DSSDA"], out["DDA_CS_REV"], out["DDA_CS"], scalar_ptr_or_dummy(out["DD"], out["DDA"]),
        meta.S, meta.H, meta.N, meta.P, meta.RD,
        C=meta.C, R=meta.R, HAS_D=meta.has_d, PREC=dot_precision(x["q"].device), **LOOP_LAUNCH, **blocks(meta),
    )


def run(x: dict, out: dict, meta) -> None:
    s = alloc_scratch(meta, x["q"].device, PRE_SCRATCH)
    launch_pre(x, s, meta)
    launch_scan_full(x, s, out, meta)


STAGE = register_stage(StageSpec(
    name="stage1_pre",
    parent="stage0",
    summary="pre kernel (B,H,nchunks) precomputes discretization, rotated/pre-rotation q/k, PsiV, dPhiO",
    entry=run,
    kernels=(KernelSpec("bwd_bwd_pre_kernel", Tag.PRE, "discretization, rotary, PsiV/dPhiO into scratch"),
             KernelSpec("bwd_bwd_scan_full_kernel", Tag.SCAN, "stage0's loop reading the pre scratch")),
))
