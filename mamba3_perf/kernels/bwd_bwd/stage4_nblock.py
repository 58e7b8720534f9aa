"""stage4_nblock: when N*P > 8192 the scan keeps dstates in blocks of BN rows of N (BN <= 64,
a power of two that divides N when one >= 16 does; masks cover any N, e.g. 96 or 192) and
walks the chunks once per block, accumulating the cross-block sums (dPsiV, DFACTOR,
DDA_CS_REV, DDA) in HBM scratch; a second loop then finishes DV and q/k."""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.bwd_bwd import stage1_pre, stage2_aux, stage3_rankfold
from mamba3_perf.kernels.bwd_bwd.common import (
    AUX_SCRATCH, LOOP_LAUNCH, PRE_SCRATCH, alloc_scratch, blocks, dot_precision, dstates_step, fdot,
    finalize_qk, fused_rows, load_angles_cs, load_rows, pow2, rot_cols, scalar_ptr_or_dummy,
    scan_step_operands, store_rows, store_value_sums, value_grads, vec_to_time,
)
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage

NBLOCK_THRESHOLD = 8192  # N*P above which dstates no longer stays whole in one program


def nblock_size(N: int) -> int:
    """BN: the largest of 64, 32, 16 that divides N; else 64 (or N's power of two) with masks."""
    for bn in (64, 32, 16):
        if N % bn == 0:
            return bn
    return min(64, pow2(N))


@triton.jit
def _accumulate(X, val, off, first):
    """X[off] = val on the first N block, X[off] += val after (X may be uninitialised before)."""
    old = tl.load(X + off)
    tl.store(X + off, tl.where(first, val, old + val))


@triton.jit
def bwd_bwd_scan_nblock_kernel(
    V, MV, STATES, ANG,
    QB_S, KB_S, QR_S, KR_S, PSIV_S, DPHIO_S, GAM_S, TS_S, ECS_S, EREV_S, WT_S, DECAY_S,
    DPSIV_S, DKS_S, DQR_S, DQD_S, DKD_S, DDP_S, DKR_S,
    DQ, DK, DV, DMV, DANG, DFAC, DDA, DDACSREV, DD,
    S, H, N, P, RD,
    C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, BNB: tl.constexpr, BP: tl.constexpr,
    BRD: tl.constexpr, HAS_D: tl.constexpr, FINALIZE: tl.constexpr, PREC: tl.constexpr,
):
    bh = tl.program_id(0).to(tl.int64)
    b = bh // H
    h = bh % H
    CR: tl.constexpr = C * R
    nc = S // C
    i, ti, ri = fused_rows(C, R)
    p = tl.arange(0, BP)
    mp = p < P
    tc = tl.arange(0, C)
    # phase 1: one reverse walk over the chunks per block of N
    for nb in range(0, tl.cdiv(N, BNB)):
        cols = nb * BNB + tl.arange(0, BNB)
        first = nb == 0
        dstates = tl.zeros([BNB, BP], dtype=tl.float32)
        for cc in range(0, nc):
            c = nc - 1 - cc
            bhc = bh * nc + c
            tpos = c * C + ti
            ts, erev, ecs, kr, ks, qr, psiv, dphio, decay, st = scan_step_operands(
                TS_S, EREV_S, ECS_S, KR_S, QR_S, PSIV_S, DPHIO_S, DECAY_S, STATES,
                bh, bhc, tpos, i, cols, p, S, N, P, CR)
            part = fdot(ks, dstates, PREC) * erev[:, None]
            store_rows(DPSIV_S, load_rows(DPSIV_S, bhc, i, p, P, CR) + part, bhc, i, p, P, CR)
            dk_raw = fdot(psiv, tl.trans(dstates), PREC)
            dks = load_rows(DKS_S, bhc, i, cols, N, CR) + dk_raw * erev[:, None]
            store_rows(DKR_S, dks * ts[:, None], bhc, i, cols, N, CR)
            toff = bh * S + c * C + tc
            _accumulate(DDACSREV, vec_to_time(tl.sum(ks * dk_raw, axis=1), C, R), toff, first)
            _accumulate(DFAC, vec_to_time(tl.sum(kr * dks, axis=1), C, R), toff, first)
            dda = decay * tl.sum(tl.sum(st * dstates, axis=1), axis=0)
            _accumulate(DDA, tl.zeros([C], dtype=tl.float32) + dda, toff, first)
            dstates = dstates_step(dstates, decay, qr, dphio, ecs, PREC)
        tl.debug_barrier()
    # phase 2: the value side and (FINALIZE) the q/k finish, per chunk
    n, partner, sgn, jn, rot = rot_cols(N, RD, BN)
    psi = tl.load(MV + (h * R + ri[:, None]) * P + p[None, :], mask=mp[None, :], other=0.0)
    dmv = tl.zeros([R, BP], dtype=tl.float32)
    dd = 0.0
    for c in range(0, nc):
        bhc = bh * nc + c
        tpos = c * C + ti
        v = tl.load(V + ((b * S + tpos[:, None]) * H + h) * P + p[None, :], mask=mp[None, :], other=0.0).to(tl.float32)
        dv, dmv_c = value_grads(load_rows(DPSIV_S, bhc, i, p, P, CR), psi, v, C, R, BP)
        dmv += dmv_c
        tl.store(DV + ((b * S + c * C + tc[:, None]) * H + h) * P + p[None, :],
                 dv.to(DV.dtype.element_ty), mask=mp[None, :])
        if FINALIZE:
            cs, sn = load_angles_cs(ANG, b, h, tpos, n, jn, rot, S, H, N, RD)
            finalize_qk(DQ, DK, DANG, load_rows(DQR_S, bhc, i, n, N, CR), load_rows(DKR_S, bhc, i, n, N, CR),
                        load_rows(QB_S, bhc, i, n, N, CR), load_rows(QB_S, bhc, i, partner, N, CR),
                        load_rows(KB_S, bhc, i, n, N, CR), load_rows(KB_S, bhc, i, partner, N, CR),
                        cs, sn, load_rows(DQD_S, bhc, i, n, N, CR), load_rows(DKD_S, bhc, i, n, N, CR),
                        b, h, c, i, n, partner, sgn, jn, rot, S, H, N, RD, C, R, BN, BRD, PREC)
        dd += tl.load(DDP_S + bhc)
    store_value_sums(DMV, DD, dmv, dd, bh, p, P, R, HAS_D)


def launch_scan_nblock(x: dict, s: dict, out: dict, meta, *, finalize: bool = True) -> None:
    launching.launch(bwd_bwd_scan_nblock_kernel, (meta.B * meta.H,))(
        x["v"], x["mimo_v"], x["states"], x["angles"],
        *stage1_pre.scratch_args(s), *stage2_aux.aux_scratch_args(s), s["DKR"],
        out["DQ"], out["DK"], out["DV"], out["DMIMO_V"], out["DANGLES"], out["DFACTOR"], out["DDA"],
        out["DDA_CS_REV"], scalar_ptr_or_dummy(out["DD"], out["DDA"]),
        meta.S, meta.H, meta.N, meta.P, meta.RD,
        C=meta.C, R=meta.R, BNB=nblock_size(meta.N), HAS_D=meta.has_d, FINALIZE=finalize,
        PREC=dot_precision(x["q"].device), **LOOP_LAUNCH, **blocks(meta),
    )


def uses_nblock(meta) -> bool:
    return meta.N * meta.P > NBLOCK_THRESHOLD


def launch_scan_for(x: dict, s: dict, out: dict, meta, *, finalize: bool = True) -> None:
    if uses_nblock(meta):
        launch_scan_nblock(x, s, out, meta, finalize=finalize)
    else:
        stage2_aux.launch_scan(x, s, out, meta, finalize=finalize)


def run(x: dict, out: dict, meta) -> None:
    s = alloc_scratch(meta, x["q"].device, PRE_SCRATCH + AUX_SCRATCH + ("DKR",))
    stage1_pre.launch_pre(x, s, meta)
    stage3_rankfold.launch_aux_for(x, s, out, meta)
    launch_scan_for(x, s, out, meta)


STAGE = register_stage(StageSpec(
    name="stage4_nblock",
    parent="stage3_rankfold",
    summary="N*P > 8192: the scan walks N in blocks of BN <= 64 with dstates and cross-block sums in HBM scratch",
    entry=run,
    kernels=(KernelSpec("bwd_bwd_pre_kernel", Tag.PRE),
             KernelSpec("bwd_bwd_aux_rankfold_kernel", Tag.AUX),
             KernelSpec("bwd_bwd_aux_kernel", Tag.AUX),
             KernelSpec("bwd_bwd_scan_kernel", Tag.SCAN),
             KernelSpec("bwd_bwd_scan_nblock_kernel", Tag.SCAN, "N-blocked reverse scan")),
))
