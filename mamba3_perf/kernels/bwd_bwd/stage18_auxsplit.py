"""stage18_auxsplit: stage17 with the streamed aux split in two kernels, the dstates increments
folded into the second.

stage17's streamed aux holds a chunk's [C*R, C*R] score tiles (k.q^T, PsiV.dPhiO^T, the decay
and qk_dot blocks, dPsiV) and then walks N with the weighted scores and dPhiO still live: on
N128_P64_R4_C16 255 registers and 828 B of spill stores per thread (ptxas for sm_90), and its
DRAM writes 1.26 GB where it means to store 0.69 (ncu,
records/ncu-N128_P64_R4_C16/stage16_regcap-stalls-raw.csv). Its N walk loads each block of qr
that stage17's increment kernel loads again, with the same dPhiO, to form (dPhiO e)^T qr. Here:

* ``aux_scores`` (stage7_streamaux.aux_scores) on a (B*H*nc) grid stores the weighted scores
  dkqw (and, where the diagonal terms stay in the aux, their weights gd) as [C*R, C*R] fp32
  scratch, 16 KB a chunk at C*R = 64;
* ``aux_columns`` (stage7_streamaux.aux_columns with INCREMENT) on the same grid loads them
  with dPhiO and walks N as the streamed aux does, and also forms each block's dstates term
  into DST[c], where stage17's increment kernel put it;
* the state pass is stage17's in-place scan alone, on every shape the aux folds.

Every product is the streamed aux's or the increment kernel's, at the same precision; the
outputs differ from stage17's only by where fp32 results round-trip through scratch (bitwise
none: the scratch is fp32). Where the aux does not fold (C*R > 64), this stage is stage17.
"""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels.bwd_bwd import stage6_statepass, stage7_streamaux
from mamba3_perf.kernels.bwd_bwd import stage16_regcap, stage17_scanpass
from mamba3_perf.kernels.bwd_bwd.common import (
    alloc_scratch, blocks, chunk_frame, chunk_psiv_dphio, load_time, scalar_ptr_or_dummy, split_precisions,
)
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage

COLUMNS_LAUNCH = dict(num_warps=4, num_stages=1)


@triton.jit
def scores_tile(X, bhc, i, CR: tl.constexpr):
    """Pointers of chunk ``bhc``'s [C*R, C*R] tile in a [B,H,nc,C*R,C*R] buffer."""
    return X + (bhc * CR + i[:, None]) * CR + i[None, :]


@triton.jit
def bwd_bwd_aux_scores_kernel(
    QKDOT, DSKIP,
    QR_S, KR_S, PSIV_S, DPHIO_S, GAM_S, TS_S, WT_S,
    DPSIV_S, DDP_S, DKQW_S, GD_S, GDB_S,
    DSSDA, DGAM,
    DOUT, V, MV, MO,
    S, H, N, P,
    C: tl.constexpr, R: tl.constexpr, NB: tl.constexpr, BP: tl.constexpr, HAS_D: tl.constexpr,
    PREC: tl.constexpr, REDUCE_O: tl.constexpr, INPUTS: tl.constexpr, DIAG_BLOCKS: tl.constexpr,
):
    """The streamed aux's score part of one chunk; dkqw (and, not DIAG_BLOCKS, gd) to scratch."""
    b, h, c, bh, bhc, i, ti, ri, tpos, tc = chunk_frame(S, H, C, R)
    CR: tl.constexpr = C * R
    p = tl.arange(0, BP)
    ts = load_time(TS_S, bh, tpos, S)
    _dphio, dkqw, gd = stage7_streamaux.aux_scores(
        QKDOT, DSKIP, QR_S, KR_S, PSIV_S, DPHIO_S, GAM_S, WT_S, DPSIV_S, DDP_S, DSSDA, DGAM,
        DOUT, V, MV, MO, GDB_S, b, h, c, bh, bhc, i, ti, ri, tpos, tc, ts, p, tl.arange(0, NB),
        S, H, N, P, C, R, NB, HAS_D, PREC, REDUCE_O, INPUTS, DIAG_BLOCKS)
    tl.store(scores_tile(DKQW_S, bhc, i, CR), dkqw)
    if not DIAG_BLOCKS:
        tl.store(scores_tile(GD_S, bhc, i, CR), gd)


@triton.jit
def bwd_bwd_aux_columns_kernel(
    STATES, QB_S, KB_S, QR_S, KR_S, DPHIO_S, TS_S, ECS_S, DKQW_S, GD_S,
    DKS_S, DQR_S, DQD_S, DKD_S, DST_S, DDACS,
    DOUT, V, MV, MO, Q, K, QBIAS, KBIAS,
    S, H, G, N, P,
    C: tl.constexpr, R: tl.constexpr, NB: tl.constexpr, BP: tl.constexpr,
    PREC: tl.constexpr, PLO: tl.constexpr, PQ: tl.constexpr, REDUCE_O: tl.constexpr,
    INPUTS: tl.constexpr, DIAG_BLOCKS: tl.constexpr, LATE_SUMS: tl.constexpr,
):
    """The streamed aux's N walk of one chunk from the stored scores, with the chunk's dstates
    term per N block into DST[c]."""
    b, h, c, bh, bhc, i, ti, ri, tpos, tc = chunk_frame(S, H, C, R)
    CR: tl.constexpr = C * R
    p = tl.arange(0, BP)
    ts = load_time(TS_S, bh, tpos, S)
    # dPhiO only: PsiV's pointer is never read, DPHIO_S stands in for it
    _psiv, dphio = chunk_psiv_dphio(DPHIO_S, DPHIO_S, DOUT, V, MV, MO, b, h, bhc, i, tpos, ri, p, S, H, P,
                                    R, CR, REDUCE_O, INPUTS)
    dkqw = tl.load(scores_tile(DKQW_S, bhc, i, CR))
    if DIAG_BLOCKS:
        gd = dkqw  # not read
    else:
        gd = tl.load(scores_tile(GD_S, bhc, i, CR))
    stage7_streamaux.aux_columns(
        STATES, QR_S, KR_S, QB_S, KB_S, ECS_S, DKS_S, DQR_S, DQD_S, DKD_S, DDACS, DST_S,
        Q, K, QBIAS, KBIAS, dphio, dkqw, gd, b, h, c, bh, bhc, i, ri, tpos, tc, ts, p, tl.arange(0, NB),
        S, H, G, N, P, C, R, NB, PREC, PLO, PQ, INPUTS, DIAG_BLOCKS, LATE_SUMS, True)


def launch_split_aux(x: dict, s: dict, out: dict, meta, *, low_precision: bool = False, inputs: bool = False,
                     launch: dict | None = None, diag_blocks: bool = False, late_sums: bool = False) -> None:
    """stage7_streamaux.launch_aux's signature, for the shapes where the aux folds: the score
    kernel (launched with ``launch``, the streamed aux's options), then the column kernel, which
    also leaves every chunk's dstates term in s["DST"] for :func:`stage17_scanpass.launch_scan`."""
    s.update(alloc_scratch(meta, x["q"].device, ("DKQW",) if diag_blocks else ("DKQW", "GD")))
    if diag_blocks:
        s["GD"] = s["DKQW"]  # not read
    bk = blocks(meta)
    nb = min(stage7_streamaux.AUX_NBLOCK, bk["BN"])
    prec = split_precisions(x, low=low_precision)
    grid = (meta.B * meta.H * meta.nchunks,)
    bwd_bwd_aux_scores_kernel[grid](
        x["qk_dot"], scalar_ptr_or_dummy(x["d"], x["mimo_v"]),
        s["QR"], s["KR"], s["PSIV"], s["DPHIO"], s["GAM"], s["TS"], s["WT"],
        s["DPSIV"], s["DDP"], s["DKQW"], s["GD"], s["GDB"] if diag_blocks else s["DKQW"],
        out["DSSDA"], out["DGAMMA"],
        *stage6_statepass.value_inputs(x),
        meta.S, meta.H, meta.N, meta.P,
        C=meta.C, R=meta.R, NB=nb, BP=bk["BP"], HAS_D=meta.has_d, PREC=prec["PREC"],
        REDUCE_O=meta.reduce_o, INPUTS=inputs, DIAG_BLOCKS=diag_blocks,
        **(launch or stage7_streamaux.STREAM_LAUNCH),
    )
    bwd_bwd_aux_columns_kernel[grid](
        x["states"], s["QB"], s["KB"], s["QR"], s["KR"], s["DPHIO"], s["TS"], s["ECS"], s["DKQW"], s["GD"],
        s["DKS"], s["DQR"], s["DQD"], s["DKD"], s["DST"], out["DDA_CS"],
        *stage6_statepass.value_inputs(x), x["q"], x["k"], x["q_bias"], x["k_bias"],
        meta.S, meta.H, meta.G, meta.N, meta.P,
        C=meta.C, R=meta.R, NB=nb, BP=bk["BP"], **prec, REDUCE_O=meta.reduce_o, INPUTS=inputs,
        DIAG_BLOCKS=diag_blocks, LATE_SUMS=late_sums, **COLUMNS_LAUNCH,
    )


def splits_aux(meta) -> bool:
    """Whether the aux runs as the two kernels for ``meta``: wherever the streamed aux folds."""
    return stage7_streamaux.folds(meta)


def run(x: dict, out: dict, meta) -> None:
    if not splits_aux(meta):
        stage17_scanpass.run(x, out, meta)
        return
    stage16_regcap.run_with(x, out, meta, state_pass=stage17_scanpass.launch_scan, aux=launch_split_aux)


_S17 = stage17_scanpass.STAGE.kernels
_AUX = [k.name for k in _S17].index("bwd_bwd_aux_streamed_kernel")
STAGE = register_stage(StageSpec(
    name="stage18_auxsplit",
    parent="stage17_scanpass",
    summary="the streamed aux as a score kernel and an N-walk kernel that also forms each chunk's "
            "dstates term; the state pass is the scan alone",
    entry=run,
    # stage17's kernels stay in the list: the shapes where the aux does not fold launch them
    kernels=_S17[:_AUX + 1] + (
        KernelSpec("bwd_bwd_aux_scores_kernel", Tag.AUX, "the chunk's [C*R, C*R] scores, dPsiV, DSSDA"),
        KernelSpec("bwd_bwd_aux_columns_kernel", Tag.AUX, "dK, dQ per N block and the dstates term"),
    ) + _S17[_AUX + 1:],
    zero_outputs=False,
))
