"""stage6_statepass: the serial part shrinks to the one truly serial recurrence.

Everything the scan of the stages before does with dstates is linear in it, and dstates obeys
dstates_c = dstates_{c+1} * decay_{c+1} + qr_{c+1}^T (dPhiO_{c+1} * exp(da_cs)), elementwise in
(N, P) and with a chunk-local increment. So:

* ``state_pass`` (scan) runs that recurrence alone on a (B*H, N/BNB, P/BPB) grid of small
  tiles and stores the dstates every chunk sees to HBM scratch [B,H,nc,N,P] (fp32);
* ``state_terms`` (post) does, per chunk on a (B,H,nchunks) grid, what the scan did with
  dstates (dPsiV, dK in the rotated domain, DDA_CS_REV, DFACTOR, DDA) and the value side (DV,
  this chunk's DMIMO_V part);
* ``chunk_sum`` (post) adds the chunks' DMIMO_V and D parts per (B,H);
* prod's ``post`` kernel finishes q/k (inverse rotary, diagonal, DANGLES).

The price is the dstates scratch: nchunks * N * P * 4 bytes per (b, h), written once and read
once (1 GiB at B=4, H=16, S=2048, N=P=128, C=8).
"""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.bwd_bwd import prod, stage1_pre, stage5_rankloop
from mamba3_perf.kernels.bwd_bwd.common import (
    AUX_SCRATCH, PRE_SCRATCH, alloc_scratch, blocks, chunk_frame, chunk_psiv_dphio, dot_precision,
    dstates_step, fdot, fused_rows, load_rows, load_state_tile, load_time, pow2, scalar_ptr_or_dummy,
    state_k_terms, store_rows, store_state_tile_t, store_value_sums, value_grads, vec_to_time,
)
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage

PASS_TILE = 32  # BNB = BPB of the state pass (a [32, 32] fp32 tile per program)
PASS_LAUNCH = dict(num_warps=4, num_stages=3)  # small tiles; the next chunk's loads pipelined
# state_terms walks N in blocks of BNB <= 64 rows with BNB * BP <= TERMS_TILE_ELEMS, and its
# N-block loop is not software pipelined. ptxas for sm_90 (benchmarks/ptxas_stage.py, Triton
# 3.9 here), spill stores per thread: N=P=128, C=8 with 32-row blocks 14.5 KB (pipelined or
# not), with 64-row blocks 384 B; N=P=64, C=16 pipelined 1384 B, not pipelined 588 B.
TERMS_TILE_ELEMS = 8192
TERMS_LAUNCH = dict(num_warps=8, num_stages=1)


@triton.jit
def state_pass_loop(QR_S, DPHIO_S, ECS_S, DECAY_S, DST_S, DOUT, V, MV, MO, bh, cols, p, S, H, N, P,
                    C: tl.constexpr, R: tl.constexpr, BNB: tl.constexpr, BPB: tl.constexpr,
                    PREC: tl.constexpr, REDUCE_O: tl.constexpr, INPUTS: tl.constexpr, TRANS: tl.constexpr):
    """The reverse walk of a state pass program over the chunks of (b, h) ``bh`` for N columns
    ``cols`` and P columns ``p``: DST[c] = the dstates chunk c sees (the gradient w.r.t. the
    state leaving it). INPUTS (stage10): dPhiO from dout (and mimo_o), not the pre kernel's
    DPHIO. TRANS (stage15): the tile is held transposed, [BPB, BNB], so that the increment's dot
    dPhiO^T qr has P rows."""
    nc = S // C
    if TRANS:
        run = tl.zeros([BPB, BNB], dtype=tl.float32)
    else:
        mask = (cols < N)[:, None] & (p < P)[None, :]
        run = tl.zeros([BNB, BPB], dtype=tl.float32)
    for cc in range(0, nc):
        c = nc - 1 - cc
        bhc = bh * nc + c
        dphio, ecs, qr = pass_operands(QR_S, DPHIO_S, ECS_S, DOUT, V, MV, MO, bh, c, cols, p, S, H, N, P,
                                       C, R, REDUCE_O, INPUTS)
        decay = tl.load(DECAY_S + bhc)
        if TRANS:
            store_state_tile_t(DST_S, run, bhc, cols, p, N, P)
            run = run * decay + fdot(tl.trans(dphio * ecs[:, None]), qr, PREC)
        else:
            tl.store(DST_S + (bhc * N + cols[:, None]) * P + p[None, :], run, mask=mask)
            run = dstates_step(run, decay, qr, dphio, ecs, PREC)


@triton.jit
def pass_operands(QR_S, DPHIO_S, ECS_S, DOUT, V, MV, MO, bh, c, cols, p, S, H, N, P,
                  C: tl.constexpr, R: tl.constexpr, REDUCE_O: tl.constexpr, INPUTS: tl.constexpr):
    """What chunk c's term of the reverse recurrence, (dPhiO exp(da_cs))^T qr, is made of: dPhiO
    [C*R, len(p)], exp(da_cs) per row [C*R] and qr [C*R, len(cols)]."""
    CR: tl.constexpr = C * R
    bhc = bh * (S // C) + c
    i, ti, ri = fused_rows(C, R)
    ecs = load_time(ECS_S, bh, c * C + ti, S)
    qr = load_rows(QR_S, bhc, i, cols, N, CR)
    # dPhiO only: PsiV's pointer is never read, DPHIO_S stands in for it
    _psiv, dphio = chunk_psiv_dphio(DPHIO_S, DPHIO_S, DOUT, V, MV, MO, bh // H, bh % H, bhc, i, c * C + ti,
                                    ri, p, S, H, P, R, CR, REDUCE_O, INPUTS)
    return dphio, ecs, qr


@triton.jit
def bwd_bwd_state_pass_kernel(
    QR_S, DPHIO_S, ECS_S, DECAY_S, DST_S,
    DOUT, V, MV, MO,
    S, H, N, P,
    C: tl.constexpr, R: tl.constexpr, BNB: tl.constexpr, BPB: tl.constexpr, PREC: tl.constexpr,
    REDUCE_O: tl.constexpr, INPUTS: tl.constexpr,
):
    """The state pass on a (B*H, N/BNB, P/BPB) grid of [BNB, BPB] dstates tiles (state_pass_loop)."""
    state_pass_loop(QR_S, DPHIO_S, ECS_S, DECAY_S, DST_S, DOUT, V, MV, MO, tl.program_id(0).to(tl.int64),
                    tl.program_id(1) * BNB + tl.arange(0, BNB), tl.program_id(2) * BPB + tl.arange(0, BPB),
                    S, H, N, P, C, R, BNB, BPB, PREC, REDUCE_O, INPUTS, False)


@triton.jit
def bwd_bwd_state_terms_kernel(
    V, MV, STATES, KR_S, PSIV_S, TS_S, EREV_S, DECAY_S, DPSIV_S, DKS_S, DST_S,
    DKR_S, DMVP_S, DV, DFAC, DDA, DDACSREV,
    DOUT, MO,
    S, H, N, P,
    C: tl.constexpr, R: tl.constexpr, BNB: tl.constexpr, BP: tl.constexpr, PREC: tl.constexpr,
    REDUCE_O: tl.constexpr, INPUTS: tl.constexpr, LATE_SUMS: tl.constexpr,
):
    """One chunk's dstates-dependent terms (as the scan of stage2/4 computes them) and its
    value side, from DST[c]. INPUTS (stage10): PsiV from v and mimo_v, not the PSIV scratch.
    LATE_SUMS (stage14): the N sums of DDA_CS_REV, DFACTOR and DDA accumulate elementwise over
    the N blocks and are reduced across lanes once, after the loop, not once per block."""
    b, h, c, bh, bhc, i, ti, ri, tpos, tc = chunk_frame(S, H, C, R)
    CR: tl.constexpr = C * R
    p = tl.arange(0, BP)
    mp = p < P
    ts = load_time(TS_S, bh, tpos, S)
    erev = load_time(EREV_S, bh, tpos, S)
    # PsiV only: dPhiO's pointer is never read, PSIV_S stands in for it
    psiv, _dphio = chunk_psiv_dphio(PSIV_S, PSIV_S, DOUT, V, MV, MO, b, h, bhc, i, tpos, ri, p, S, H, P,
                                    R, CR, REDUCE_O, INPUTS)
    dpsiv = load_rows(DPSIV_S, bhc, i, p, P, CR)
    ddacsrev = tl.zeros([CR], dtype=tl.float32)
    dfac = tl.zeros([CR], dtype=tl.float32)
    dda = 0.0
    if LATE_SUMS:
        acc_rev = tl.zeros([CR, BNB], dtype=tl.float32)
        acc_fac = tl.zeros([CR, BNB], dtype=tl.float32)
        acc_dda = tl.zeros([BNB, BP], dtype=tl.float32)
    for nb in range(0, tl.cdiv(N, BNB)):
        cols = nb * BNB + tl.arange(0, BNB)
        ds = load_state_tile(DST_S, bhc, cols, p, N, P)
        st = load_state_tile(STATES, bhc, cols, p, N, P)
        kr = load_rows(KR_S, bhc, i, cols, N, CR)
        ks = kr * ts[:, None]
        dpsiv_inter, dk_raw = state_k_terms(ks, psiv, ds, erev, PREC)
        dpsiv += dpsiv_inter
        dks = load_rows(DKS_S, bhc, i, cols, N, CR) + dk_raw * erev[:, None]
        store_rows(DKR_S, dks * ts[:, None], bhc, i, cols, N, CR)
        if LATE_SUMS:
            acc_rev += ks * dk_raw
            acc_fac += kr * dks
            acc_dda += st * ds
        else:
            ddacsrev += tl.sum(ks * dk_raw, axis=1)
            dfac += tl.sum(kr * dks, axis=1)
            dda += tl.sum(tl.sum(st * ds, axis=1), axis=0)
    if LATE_SUMS:
        ddacsrev = tl.sum(acc_rev, axis=1)
        dfac = tl.sum(acc_fac, axis=1)
        dda = tl.sum(tl.sum(acc_dda, axis=1), axis=0)
    toff = bh * S + c * C + tc
    tl.store(DDACSREV + toff, vec_to_time(ddacsrev, C, R))
    tl.store(DFAC + toff, vec_to_time(dfac, C, R))
    tl.store(DDA + toff, tl.zeros([C], dtype=tl.float32) + tl.load(DECAY_S + bhc) * dda)
    psi = tl.load(MV + (h * R + ri[:, None]) * P + p[None, :], mask=mp[None, :], other=0.0)
    v = tl.load(V + ((b * S + tpos[:, None]) * H + h) * P + p[None, :], mask=mp[None, :], other=0.0).to(tl.float32)
    dv, dmv = value_grads(dpsiv, psi, v, C, R, BP)
    tl.store(DV + ((b * S + c * C + tc[:, None]) * H + h) * P + p[None, :],
             dv.to(DV.dtype.element_ty), mask=mp[None, :])
    r_ = tl.arange(0, R)
    tl.store(DMVP_S + (bhc * R + r_[:, None]) * P + p[None, :], dmv, mask=mp[None, :])


@triton.jit
def bwd_bwd_chunk_sum_kernel(
    DMVP_S, DDP_S, DMV, DD,
    S, P,
    C: tl.constexpr, R: tl.constexpr, BP: tl.constexpr, HAS_D: tl.constexpr,
):
    """DMIMO_V and DD per (b, h): the sums of the chunks' parts."""
    bh = tl.program_id(0).to(tl.int64)
    nc = S // C
    r_ = tl.arange(0, R)
    p = tl.arange(0, BP)
    mp = p < P
    dmv = tl.zeros([R, BP], dtype=tl.float32)
    dd = 0.0
    for c in range(0, nc):
        dmv += tl.load(DMVP_S + ((bh * nc + c) * R + r_[:, None]) * P + p[None, :], mask=mp[None, :], other=0.0)
        dd += tl.load(DDP_S + bh * nc + c)
    store_value_sums(DMV, DD, dmv, dd, bh, p, P, R, HAS_D)


def pass_tiles(meta) -> tuple[int, int]:
    """(BNB, BPB) of the state pass: PASS_TILE, or the dimension's block when smaller."""
    return min(PASS_TILE, pow2(meta.N)), min(PASS_TILE, pow2(meta.P))


def terms_block(meta, tile_elems: int = TERMS_TILE_ELEMS) -> int:
    """BNB of state_terms: rows of N per step so that a [BNB, BP] tile stays within
    ``tile_elems`` (16 to 64 rows)."""
    bp = pow2(meta.P)
    return max(16, min(64, pow2(meta.N), tile_elems // bp))


def launch_state_pass(x: dict, s: dict, meta, *, inputs: bool = False) -> None:
    """``inputs``: dPhiO from the inputs, not DPHIO scratch (stage10)."""
    bnb, bpb = pass_tiles(meta)
    grid = (meta.B * meta.H, triton.cdiv(meta.N, bnb), triton.cdiv(meta.P, bpb))
    launching.launch(bwd_bwd_state_pass_kernel, grid)(
        s["QR"], s["DPHIO"], s["ECS"], s["DECAY"], s["DST"],
        *value_inputs(x),
        meta.S, meta.H, meta.N, meta.P,
        C=meta.C, R=meta.R, BNB=bnb, BPB=bpb, PREC=dot_precision(x["q"].device),
        REDUCE_O=meta.reduce_o, INPUTS=inputs, **PASS_LAUNCH,
    )


def launch_state_terms(x: dict, s: dict, out: dict, meta, *, tile_elems: int = TERMS_TILE_ELEMS,
                       launch: dict = TERMS_LAUNCH, inputs: bool = False, late_sums: bool = False) -> None:
    """``tile_elems``, ``launch``: the N block and launch (stage9); ``inputs``: PsiV from the
    inputs, not PSIV scratch (stage10); ``late_sums``: N sums reduced once (stage14)."""
    launching.launch(bwd_bwd_state_terms_kernel, (meta.B * meta.H * meta.nchunks,))(
        x["v"], x["mimo_v"], x["states"], s["KR"], s["PSIV"], s["TS"], s["EREV"], s["DECAY"],
        s["DPSIV"], s["DKS"], s["DST"], s["DKR"], s["DMVP"],
        out["DV"], out["DFACTOR"], out["DDA"], out["DDA_CS_REV"],
        x["dout"], scalar_ptr_or_dummy(x["mimo_o"], x["mimo_v"]),
        meta.S, meta.H, meta.N, meta.P,
        C=meta.C, R=meta.R, BNB=terms_block(meta, tile_elems), BP=blocks(meta)["BP"],
        PREC=dot_precision(x["q"].device), REDUCE_O=meta.reduce_o, INPUTS=inputs, LATE_SUMS=late_sums,
        **launch,
    )


def value_inputs(x: dict) -> tuple:
    """dout, v, mimo_v, mimo_o (or a stand-in pointer): what load_psiv_dphio reads."""
    return x["dout"], x["v"], x["mimo_v"], scalar_ptr_or_dummy(x["mimo_o"], x["mimo_v"])


def launch_chunk_sum(x: dict, s: dict, out: dict, meta) -> None:
    launching.launch(bwd_bwd_chunk_sum_kernel, (meta.B * meta.H,))(
        s["DMVP"], s["DDP"], out["DMIMO_V"], scalar_ptr_or_dummy(out["DD"], out["DMIMO_V"]),
        meta.S, meta.P,
        C=meta.C, R=meta.R, BP=blocks(meta)["BP"], HAS_D=meta.has_d,
    )


def run(x: dict, out: dict, meta) -> None:
    s = alloc_scratch(meta, x["q"].device, PRE_SCRATCH + AUX_SCRATCH + ("DKR", "DST", "DMVP"))
    stage1_pre.launch_pre(x, s, meta)
    stage5_rankloop.launch_aux(x, s, out, meta)
    launch_state_pass(x, s, meta)
    launch_state_terms(x, s, out, meta)
    launch_chunk_sum(x, s, out, meta)
    prod.launch_post(x, s, out, meta)


STAGE = register_stage(StageSpec(
    name="stage6_statepass",
    parent="prod",
    summary="the scan keeps only the elementwise dstates recurrence on (B,H,N/32,P/32) tiles, "
            "stores dstates per chunk; a (B,H,nchunks) kernel does every dstates-dependent term",
    entry=run,
    kernels=(KernelSpec("bwd_bwd_pre_kernel", Tag.PRE),
             KernelSpec("bwd_bwd_aux_rankfold_kernel", Tag.AUX),
             KernelSpec("bwd_bwd_aux_kernel", Tag.AUX),
             KernelSpec("bwd_bwd_state_pass_kernel", Tag.SCAN, "elementwise dstates recurrence"),
             KernelSpec("bwd_bwd_state_terms_kernel", Tag.POST, "dstates-dependent terms per chunk"),
             KernelSpec("bwd_bwd_chunk_sum_kernel", Tag.POST, "DMIMO_V and DD chunk sums"),
             KernelSpec("bwd_bwd_post_kernel", Tag.POST)),
    zero_outputs=False,
))
