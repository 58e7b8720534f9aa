"""stage17_splitterms: stage16 with the dstates-dependent terms in two kernels of fewer live tiles.

stage16's state_terms runs one program per chunk that walks N in 16-row blocks and does two
things per block: the k side (dK_raw = PsiV dstates^T, the dK it finishes and stores, the N sums
of DDA_CS_REV, DFACTOR, DDA) and the value side (dPsiV += ks dstates, a [C*R, P] accumulator).
So it holds PsiV with its TF32x3 halves and the dPsiV accumulator, both [C*R, P] fp32, across
the loop: 255 registers, two 4-warp programs per SM, and on the H200 it ran at 1.11 ms on
N128_P64_R4_C16 where the bytes it moves (1.39 GB by ncu) take 0.29 ms at the HBM's peak
(records/ncu-N128_P64_R4_C16/stage15_passwave-details.csv). Here:

* ``terms_kside`` runs on a (B*H*nc, N / BK) grid, one [C*R, BK] block of dK per program with no
  loop: the same products and stores, and its block's parts of the three N sums into a small
  scratch (KPART [.., N/BK, 2*C*R], DDAPART [.., N/BK]);
* ``terms_value`` runs per chunk: dPsiV's dstates term as one [C*R, N] x [N, P] product walked
  in N blocks (kr dstates accumulated, the per-row scale ts * exp(da_cs_rev) applied once after
  the loop), the value side (DV, the chunk's DMIMO_V part) as before, and the N sums from the
  k side's parts.

dstates is read twice (once per kernel) instead of once. Everything else is stage16.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mamba3_perf.kernels.bwd_bwd import stage16_regcap
from mamba3_perf.kernels.bwd_bwd.common import (
    blocks, chunk_frame, chunk_psiv_dphio, dot_precision, load_rows, load_state_tile, load_time, pow2,
    scalar_ptr_or_dummy, store_rows, value_grads, vec_to_time,
)
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage

KSIDE_BLOCK = 16  # BK: N rows of dstates per k-side program
VALUE_BLOCK = 16  # N rows per step of the value side's product loop
KSIDE_LAUNCH = dict(num_warps=8, num_stages=1)
VALUE_LAUNCH = dict(num_warps=4, num_stages=3)  # the loop is a plain product: pipeline its loads


@triton.jit
def bwd_bwd_terms_kside_kernel(
    V, MV, STATES, KR_S, PSIV_S, TS_S, EREV_S, DKS_S, DST_S, DKR_S, KPART, DDAPART,
    DOUT, MO,
    S, H, N, P,
    C: tl.constexpr, R: tl.constexpr, BK: tl.constexpr, BP: tl.constexpr, PREC: tl.constexpr,
    REDUCE_O: tl.constexpr, INPUTS: tl.constexpr,
):
    """The k side of one chunk's dstates terms on N rows [kb*BK, kb*BK + BK): dK (rotated
    domain, times ts) into DKR, and this block's parts of the N sums of DDA_CS_REV and DFACTOR
    ([C*R] each, KPART) and of DDA (DDAPART). INPUTS (stage10): PsiV from v and mimo_v."""
    b, h, c, bh, bhc, i, ti, ri, tpos, tc = chunk_frame(S, H, C, R)
    CR: tl.constexpr = C * R
    kb = tl.program_id(1)
    nkb = tl.num_programs(1)
    cols = kb * BK + tl.arange(0, BK)
    p = tl.arange(0, BP)
    ts = load_time(TS_S, bh, tpos, S)
    erev = load_time(EREV_S, bh, tpos, S)
    # PsiV only: dPhiO's pointer is never read, PSIV_S stands in for it
    psiv, _dphio = chunk_psiv_dphio(PSIV_S, PSIV_S, DOUT, V, MV, MO, b, h, bhc, i, tpos, ri, p, S, H, P,
                                    R, CR, REDUCE_O, INPUTS)
    ds = load_state_tile(DST_S, bhc, cols, p, N, P)
    # [BK, CR] orientation: the small dstates block is the dot's register operand, PsiV^T the
    # shared-memory one (PsiV as the [CR, P] register operand, with its TF32x3 halves, took
    # 180-255 registers per thread in ptxas)
    rows = (bhc * CR + i[None, :]) * N + cols[:, None]
    mrow = (cols < N)[:, None]
    kr = tl.load(KR_S + rows, mask=mrow, other=0.0)
    dk_raw = tl.dot(ds, tl.trans(psiv), input_precision=PREC)  # [BK, CR]
    dks = tl.load(DKS_S + rows, mask=mrow, other=0.0) + dk_raw * erev[None, :]
    tl.store(DKR_S + rows, dks * ts[None, :], mask=mrow)
    part = KPART + (bhc * nkb + kb) * (2 * CR) + i
    tl.store(part, tl.sum(kr * dk_raw, axis=0) * ts)
    tl.store(part + CR, tl.sum(kr * dks, axis=0))
    st = load_state_tile(STATES, bhc, cols, p, N, P)
    tl.store(DDAPART + bhc * nkb + kb, tl.sum(tl.sum(st * ds, axis=1), axis=0))


@triton.jit
def bwd_bwd_terms_value_kernel(
    V, MV, KR_S, TS_S, EREV_S, DECAY_S, DPSIV_S, DST_S, KPART, DDAPART,
    DMVP_S, DV, DFAC, DDA, DDACSREV,
    S, H, N, P, NKB,
    C: tl.constexpr, R: tl.constexpr, BNB: tl.constexpr, BP: tl.constexpr, BKB: tl.constexpr,
    PREC: tl.constexpr,
):
    """The value side of one chunk's dstates terms: dPsiV = the aux's part + (ts exp(da_cs_rev))
    (kr dstates), then DV and the chunk's DMIMO_V part; and the N sums of DDA_CS_REV, DFACTOR
    and DDA from the NKB parts the k side stored."""
    b, h, c, bh, bhc, i, ti, ri, tpos, tc = chunk_frame(S, H, C, R)
    CR: tl.constexpr = C * R
    p = tl.arange(0, BP)
    mp = p < P
    acc = tl.zeros([CR, BP], dtype=tl.float32)
    for nb in range(0, tl.cdiv(N, BNB)):
        cols = nb * BNB + tl.arange(0, BNB)
        acc += tl.dot(load_rows(KR_S, bhc, i, cols, N, CR), load_state_tile(DST_S, bhc, cols, p, N, P),
                      input_precision=PREC)
    scale = load_time(TS_S, bh, tpos, S) * load_time(EREV_S, bh, tpos, S)
    dpsiv = load_rows(DPSIV_S, bhc, i, p, P, CR) + acc * scale[:, None]
    k = tl.arange(0, BKB)
    mk = k < NKB
    part = KPART + (bhc * NKB + k[None, :]) * (2 * CR) + i[:, None]  # [CR, BKB]
    ddacsrev = tl.sum(tl.load(part, mask=mk[None, :], other=0.0), axis=1)
    dfac = tl.sum(tl.load(part + CR, mask=mk[None, :], other=0.0), axis=1)
    dda = tl.sum(tl.load(DDAPART + bhc * NKB + k, mask=mk, other=0.0), axis=0)
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


def kside_block(meta) -> int:
    """BK: KSIDE_BLOCK rows of N per k-side program, or all of N (padded to 16) below that."""
    return min(KSIDE_BLOCK, pow2(meta.N))


def launch_split_terms(x: dict, s: dict, out: dict, meta, *, inputs: bool = False) -> None:
    """stage7_streamaux.run_with's ``state_terms``: the k side, then the value side, which
    reads the k side's parts of the N sums. ``inputs``: PsiV from the inputs (stage10)."""
    bk = kside_block(meta)
    nkb = triton.cdiv(meta.N, bk)
    dev = x["q"].device
    cr = meta.C * meta.R
    chunks = meta.B * meta.H * meta.nchunks
    kpart = torch.empty((chunks, nkb, 2 * cr), dtype=torch.float32, device=dev)
    ddapart = torch.empty((chunks, nkb), dtype=torch.float32, device=dev)
    bp = blocks(meta)["BP"]
    prec = dot_precision(dev)
    bwd_bwd_terms_kside_kernel[(chunks, nkb)](
        x["v"], x["mimo_v"], x["states"], s["KR"], s["PSIV"], s["TS"], s["EREV"], s["DKS"], s["DST"],
        s["DKR"], kpart, ddapart,
        x["dout"], scalar_ptr_or_dummy(x["mimo_o"], x["mimo_v"]),
        meta.S, meta.H, meta.N, meta.P,
        C=meta.C, R=meta.R, BK=bk, BP=bp, PREC=prec, REDUCE_O=meta.reduce_o, INPUTS=inputs,
        **KSIDE_LAUNCH,
    )
    bwd_bwd_terms_value_kernel[(chunks,)](
        x["v"], x["mimo_v"], s["KR"], s["TS"], s["EREV"], s["DECAY"], s["DPSIV"], s["DST"], kpart, ddapart,
        s["DMVP"], out["DV"], out["DFACTOR"], out["DDA"], out["DDA_CS_REV"],
        meta.S, meta.H, meta.N, meta.P, nkb,
        C=meta.C, R=meta.R, BNB=min(VALUE_BLOCK, pow2(meta.N)), BP=bp, BKB=pow2(nkb, lo=2), PREC=prec,
        **VALUE_LAUNCH,
    )


def run(x: dict, out: dict, meta) -> None:
    stage16_regcap.run_with(x, out, meta, state_terms=launch_split_terms)


_S16 = stage16_regcap.STAGE.kernels
_TERMS = [k.name for k in _S16].index("bwd_bwd_state_terms_kernel")
STAGE = register_stage(StageSpec(
    name="stage17_splitterms",
    parent="stage16_regcap",
    summary="the dstates terms in two kernels: the k side on a (chunk, N block) grid with no loop, "
            "the value side per chunk as one pipelined product (no [C*R, P] tiles held across a loop)",
    entry=run,
    kernels=_S16[:_TERMS] + (
        KernelSpec("bwd_bwd_terms_kside_kernel", Tag.POST, "dstates k side per (chunk, N block): dK, N-sum parts"),
        KernelSpec("bwd_bwd_terms_value_kernel", Tag.POST, "dstates value side per chunk: dPsiV, DV, N sums"),
    ) + _S16[_TERMS + 1:],
    zero_outputs=False,
))
