"""stage7_streamaux: stage6 with an aux kernel that keeps few tiles live.

stage3's rank-folded aux loads all six [C*R, *] operand tiles of its chunk first and stores
its five [C*R, *] results last, so on the H200 it holds them all at once: 255 registers and
2.8 KB of spill stores per thread at N = P = 64 (ptxas for sm_90, Triton 3.6 as on the
H200), and its DRAM traffic (2.7 GB on 8x512x16x8, ncu) is three times what it loads and
stores on purpose. The streamed aux does the same products (common.score_grads,
score_weights, local_dpsiv, state_q_products) but walks N in
blocks of AUX_NBLOCK columns, twice (k.q^T accumulated over N; then dK, dQ, the diagonal
terms and the cached-state term per block, each stored at once), so only [C*R, P] and
[C*R, C*R] tiles stay whole: 0.9 KB of spill stores at N = P = 64, with the same N block at
every N. It folds every R whose C*R is a power of two up to 64 (the whole official grid), not
only R = 4; larger C*R keep stage5's aux. The kernel also takes stage8's precision
split (``PLO``, ``PQ``); here every dot runs at ``PREC``.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.bwd_bwd import prod, stage1_pre, stage2_aux, stage5_rankloop, stage6_statepass
from mamba3_perf.kernels.bwd_bwd.common import (
    AUX_SCRATCH, PRE_SCRATCH, alloc_scratch, blocks, chunk_frame, chunk_psiv_dphio, fdot, load_biased_rows,
    load_qkd, load_rows, load_state_tile, load_time, local_dpsiv, scalar_ptr_or_dummy, score_grads,
    score_weights, split_precisions, state_q_products, store_rows, store_state_tile_t, vec_to_time, wt_rows,
)
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage

# N columns per step of the aux's two N loops, and its launch: [C*R, 16] operand tiles on one
# warpgroup, no software pipelining. With 8 warps a [64, 16] dot result splits into two
# warpgroups of 8 columns, and Triton 3.6+ miscompiles TF32 wgmma with N = 8 (unpadded shared
# operand read out of bounds: triton-lang/triton#10629): on the H200 (Triton 3.6) every case
# with C*R = 64 hit an illegal address; C*R = 32 runs mma.sync and passed. 4 warps keep N = 16
# per warpgroup (tests/kernels/test_codegen.py checks). ptxas for sm_90, Triton 3.6, spill
# stores per thread at N = P = 64, R = 4, C = 16: 16 columns / 4 warps 888 B (stage8: 696 B),
# 32 columns / 8 warps 1132 B, 32 / 4 warps 2232 B; stage6's aux 2840 B.
AUX_NBLOCK = 16
STREAM_LAUNCH = dict(num_warps=4, num_stages=1)


@triton.jit
def bwd_bwd_aux_streamed_kernel(
    QKDOT, STATES, DSKIP,
    QB_S, KB_S, QR_S, KR_S, PSIV_S, DPHIO_S, GAM_S, TS_S, ECS_S, EREV_S, WT_S, DECAY_S,
    DPSIV_S, DKS_S, DQR_S, DQD_S, DKD_S, DDP_S,
    DSSDA, DGAM, DDACS,
    DOUT, V, MV, MO, Q, K, QBIAS, KBIAS, GDB_S, DST_S,
    S, H, G, N, P,
    C: tl.constexpr, R: tl.constexpr, NB: tl.constexpr, BP: tl.constexpr, HAS_D: tl.constexpr,
    PREC: tl.constexpr, PLO: tl.constexpr, PQ: tl.constexpr, REDUCE_O: tl.constexpr,
    INPUTS: tl.constexpr, DIAG_BLOCKS: tl.constexpr, LATE_SUMS: tl.constexpr, INCREMENTS: tl.constexpr,
    NB1: tl.constexpr,
):
    """stage3's aux products in first-use order, each result stored once complete. INPUTS
    (stage10): PsiV, dPhiO and the pre-rotation q / k from the inputs, not the pre scratch.
    DIAG_BLOCKS (stage13): the qk_dot diagonal terms of dQ / dK are left to the post kernel;
    this stores only their weights, the same-step blocks of gd, as GDB[c, t*R + r_k, r_q].
    LATE_SUMS (stage14): DDA_CS's N sum accumulates elementwise over the N blocks and is reduced
    across lanes once, after the loop. INCREMENTS (stage20): the second N loop also forms the
    chunk's term of the dstates recurrence, (dPhiO exp(da_cs))^T qr, on each block of qr it
    loads and stores it to DST[c] ([N, P], as stage17's increment kernel does). NB1: the first
    N loop's block (NB before stage22)."""
    b, h, c, bh, bhc, i, ti, ri, tpos, tc = chunk_frame(S, H, C, R)
    CR: tl.constexpr = C * R
    p = tl.arange(0, BP)
    nb = tl.arange(0, NB)
    ts = load_time(TS_S, bh, tpos, S)
    psiv, dphio = chunk_psiv_dphio(PSIV_S, DPHIO_S, DOUT, V, MV, MO, b, h, bhc, i, tpos, ri, p, S, H, P,
                                   R, CR, REDUCE_O, INPUTS)
    dkq = fdot(psiv, tl.trans(dphio), PREC)  # [CR(k), CR(q)]
    lkq = tl.zeros([CR, CR], dtype=tl.float32)
    for n0 in range(0, N, NB1):
        cols = n0 + tl.arange(0, NB1)
        ks = load_rows(KR_S, bhc, i, cols, N, CR) * ts[:, None]
        lkq += fdot(ks, tl.trans(load_rows(QR_S, bhc, i, cols, N, CR)), PREC)
    qkd, same = load_qkd(QKDOT, bh, tpos, ti, ri, S, R)
    dssda, dgam = score_grads(lkq, dkq, qkd, C, R)
    tl.store(DSSDA + (bhc * C + tc[:, None]) * C + tc[None, :], dssda)
    tl.store(DGAM + bh * S + c * C + tc, dgam)
    gamma = load_time(GAM_S, bh, tpos, S)
    wt = wt_rows(WT_S, bhc, ti, C)
    if HAS_D:
        dskip = tl.load(DSKIP + h)
    else:
        dskip = 0.0
    dpsiv, dd_part = local_dpsiv(lkq, wt, qkd, gamma, psiv, dphio, dskip, HAS_D, PREC)
    store_rows(DPSIV_S, dpsiv, bhc, i, p, P, CR)
    tl.store(DDP_S + bhc, tl.sum(dd_part, axis=0))
    dkqw, gd = score_weights(dkq, wt, same, gamma)
    if DIAG_BLOCKS:
        # gd is zero off the same-step blocks: summing the query steps keeps each row's block
        tl.store(GDB_S + (bhc * CR + i[:, None]) * R + tl.arange(0, R)[None, :],
                 tl.sum(tl.reshape(gd, (CR, C, R)), axis=1))
    ecs = load_time(ECS_S, bh, tpos, S)
    ddacs = tl.zeros([C], dtype=tl.float32)
    if LATE_SUMS:
        acc_cs = tl.zeros([CR, NB], dtype=tl.float32)
    if INCREMENTS:
        dphio_e = tl.trans(dphio * ecs[:, None])  # [BP, CR]
    for n0 in range(0, N, NB):
        cols = n0 + nb
        qr = load_rows(QR_S, bhc, i, cols, N, CR)
        if INCREMENTS:
            store_state_tile_t(DST_S, fdot(dphio_e, qr, PREC), bhc, cols, p, N, P)
        store_rows(DKS_S, fdot(dkqw, qr, PREC), bhc, i, cols, N, CR)
        ddacs_terms, dq_inter = state_q_products(dphio, load_state_tile(STATES, bhc, cols, p, N, P), qr, ecs, PQ)
        if LATE_SUMS:
            acc_cs += ddacs_terms
        else:
            ddacs += vec_to_time(tl.sum(ddacs_terms, axis=1), C, R)
        ks = load_rows(KR_S, bhc, i, cols, N, CR) * ts[:, None]
        store_rows(DQR_S, fdot(tl.trans(dkqw), ks, PQ) + dq_inter, bhc, i, cols, N, CR)
        if not DIAG_BLOCKS:
            if INPUTS:
                hq = h // (H // G)
                kb = load_biased_rows(K, KBIAS, b, h, hq, tpos, ri, cols, S, G, N, R)
                qb = load_biased_rows(Q, QBIAS, b, h, hq, tpos, ri, cols, S, G, N, R)
            else:
                kb = load_rows(KB_S, bhc, i, cols, N, CR)
                qb = load_rows(QB_S, bhc, i, cols, N, CR)
            store_rows(DQD_S, fdot(tl.trans(gd), kb, PLO), bhc, i, cols, N, CR)
            store_rows(DKD_S, fdot(gd, qb, PLO), bhc, i, cols, N, CR)
    if LATE_SUMS:
        ddacs = vec_to_time(tl.sum(acc_cs, axis=1), C, R)
    tl.store(DDACS + bh * S + c * C + tc, ddacs)


AUX_MAX_ROWS = 64  # [C*R, C*R] fp32 tiles beyond this would spill far more than stage5's aux


def folds(meta) -> bool:
    """Whether the chunk's C*R fused rows make one power-of-two tile of 16 (tl.dot's least) to
    AUX_MAX_ROWS rows: every case of the official grid (C*R = 32 or 64)."""
    cr = meta.C * meta.R
    return 16 <= cr <= AUX_MAX_ROWS and cr & (cr - 1) == 0


def launch_aux(x: dict, s: dict, out: dict, meta, *, low_precision: bool = False,
               inputs: bool = False, launch: dict | None = None, diag_blocks: bool = False,
               late_sums: bool = False, increments: bool = False, lkq_block: int | None = None) -> None:
    """The streamed aux where :func:`folds`, stage5's aux elsewhere; ``low_precision``:
    the split of :func:`common.split_precisions` (stage8); ``inputs``: PsiV, dPhiO and the
    pre-rotation q / k from the inputs (stage10; only where it folds); ``diag_blocks``: the
    diagonal terms' weights into s["GDB"] instead of those terms into DQD / DKD (stage13; only
    where it folds); ``late_sums``: DDA_CS's N sum reduced once (stage14); ``increments``: the
    dstates recurrence's chunk terms into s["DST"] (stage20; only where it folds); ``lkq_block``:
    the N columns per step of its first loop (default the second's; stage22)."""
    if diag_blocks and not folds(meta):
        raise ValueError(f"only the streamed aux leaves the diagonal terms to the post kernel; it does not "
                         f"fold C*R = {meta.C * meta.R}")
    if increments and not folds(meta):
        raise ValueError(f"only the streamed aux forms the dstates increments; it does not fold "
                         f"C*R = {meta.C * meta.R}")
    if not folds(meta):
        stage5_rankloop.launch_aux(x, s, out, meta)
        return
    bk = blocks(meta)
    launching.launch(bwd_bwd_aux_streamed_kernel, (meta.B * meta.H * meta.nchunks,))(
        x["qk_dot"], x["states"], scalar_ptr_or_dummy(x["d"], x["mimo_v"]),
        *stage1_pre.scratch_args(s), *stage2_aux.aux_scratch_args(s),
        out["DSSDA"], out["DGAMMA"], out["DDA_CS"],
        *stage6_statepass.value_inputs(x), x["q"], x["k"], x["q_bias"], x["k_bias"],
        s["GDB"] if diag_blocks else out["DDA_CS"], s["DST"],
        meta.S, meta.H, meta.G, meta.N, meta.P,
        C=meta.C, R=meta.R, NB=min(AUX_NBLOCK, bk["BN"]), BP=bk["BP"], HAS_D=meta.has_d,
        NB1=min(lkq_block or AUX_NBLOCK, bk["BN"]),
        **split_precisions(x, low=low_precision), REDUCE_O=meta.reduce_o, INPUTS=inputs,
        DIAG_BLOCKS=diag_blocks, LATE_SUMS=late_sums, INCREMENTS=increments, **(launch or STREAM_LAUNCH),
    )


# the pre scratch that stage10's readers take from the inputs instead
INPUT_OPERANDS = ("QB", "KB", "PSIV", "DPHIO")
# those of them that only the post kernel reads where it forms the diagonal terms (run_with's qk_inputs)
QK_OPERANDS = ("QB", "KB")
# the aux's diagonal-term rows, which stage13's post kernel forms itself
DIAG_ROWS = ("DQD", "DKD")
# the rotated rows, which the Gluon aux and state_terms form themselves with run_with's rot_inline,
# and what they read instead
ROTATED_ROWS = ("QR", "KR")
ANGLE_CS = ("COS", "SIN")


def run_with(x: dict, out: dict, meta, *, low_precision: bool, terms: dict | None = None,
             inputs: bool = False, pre=stage1_pre.launch_pre, post=prod.launch_post,
             aux_launch: dict | None = None, diag_blocks: bool = False, late_sums: bool = False,
             state_pass=None, aux_increments: bool = False, lkq_block: int | None = None,
             state_terms=None, aux=None, qk_inputs: bool = False, rot_inline: bool = False,
             finish_dk: bool = False, finish_dq: bool = False, chunk_sum=None) -> None:
    """stage6's pipeline with the streamed aux; ``terms``: state_terms' tile and launch
    (stage6_statepass.launch_state_terms keywords; stage9); ``inputs``: every reader of QB, KB,
    PSIV, DPHIO loads the inputs instead and the pre kernel does not write them (stage10; only
    where the aux folds, since stage5's aux reads that scratch); ``pre`` / ``post``: the pre and
    post kernels' launchers (stage1_pre.launch_pre's and prod.launch_post's signatures; stage11);
    ``aux_launch``: the streamed aux's launch options (default STREAM_LAUNCH; stage12);
    ``diag_blocks``: the aux stores the diagonal terms' weight blocks (GDB) and the post kernel
    forms those terms (stage13; ``post`` must take ``diag_blocks``; only where the aux folds);
    ``late_sums``: the streamed aux and state_terms reduce their N sums once (stage14);
    ``state_pass``: the state pass's launcher (stage6_statepass.launch_state_pass's signature,
    the default; stage15); ``aux_increments``: the aux stores the recurrence's chunk terms to
    DST, which ``state_pass`` must then only scan (stage20); ``lkq_block``: the aux's first N
    loop's block (stage22); ``state_terms``: state_terms' launcher
    (stage6_statepass.launch_state_terms's signature, the default; stage23); ``aux``: the aux's
    launcher (:func:`launch_aux`'s signature, the default; stage24); ``qk_inputs``: where
    ``inputs`` is false, the pre-rotation q / k alone come from the inputs (QB / KB unwritten,
    the post kernel loads q / k; PsiV and dPhiO stay in scratch); only with ``diag_blocks``, where
    the aux reads no QB / KB (a stage25 knob); ``rot_inline``: the pre kernel stores cos / sin of
    the angles instead of the rotated rows QR / KR, and ``aux`` and ``state_terms`` (which must
    be given: the Gluon ones take it) rotate q / k themselves (stage27); ``finish_dk`` (with it):
    state_terms stores DK and DANGLES' k half instead of the DKR rows, the post kernel the rest
    (K_DONE; stage28); ``finish_dq`` (with ``finish_dk``): the aux stores DQ and DANGLES' q half
    instead of the DQR rows, state_terms adds the k half, and no post kernel is launched
    (stage29); ``chunk_sum``: the chunk sums' launcher (stage6_statepass.launch_chunk_sum's
    signature, the default; stage33)."""
    inputs = inputs and folds(meta)
    diag_blocks = diag_blocks and folds(meta)
    qk_inputs = qk_inputs and not inputs
    if qk_inputs and not diag_blocks:
        raise ValueError("qk_inputs: only where the post kernel forms the diagonal terms (diag_blocks); "
                         "otherwise the aux reads QB / KB")
    if finish_dk and not (rot_inline and diag_blocks):
        raise ValueError("finish_dk: only with rot_inline (state_terms finishes dK from the k rows it rotates) "
                         "and diag_blocks (and the diagonal term from the aux's weight blocks)")
    if finish_dq and not finish_dk:
        raise ValueError("finish_dq: only with finish_dk (then no post kernel runs)")
    if rot_inline and (aux is None or state_terms is None or not aux_increments):
        raise ValueError("rot_inline: only the Gluon aux (forming the increments, so that the state pass "
                         "reads no QR) and the Gluon state_terms rotate q / k themselves")
    skip = ((INPUT_OPERANDS if inputs else QK_OPERANDS if qk_inputs else ())
            + (DIAG_ROWS if diag_blocks else ()) + (ROTATED_ROWS if rot_inline else ())
            + (("DKR",) if finish_dk else ()) + (("DQR",) if finish_dq else ()))
    names = (PRE_SCRATCH + AUX_SCRATCH + ("DKR", "DST", "DMVP") + (("GDB",) if diag_blocks else ())
             + (ANGLE_CS if rot_inline else ()))
    s = alloc_scratch(meta, x["q"].device, [n for n in names if n not in skip])
    unused = torch.empty(0, device=x["q"].device)  # one stand-in pointer for every skipped buffer
    s.update(dict.fromkeys(skip, unused))
    rot = dict(rot_inline=True) if rot_inline else {}
    pre(x, s, meta, inputs=inputs, **(dict(qk_inputs=True) if qk_inputs else {}), **rot)
    (aux or launch_aux)(x, s, out, meta, low_precision=low_precision, inputs=inputs, launch=aux_launch,
                        diag_blocks=diag_blocks, late_sums=late_sums, increments=aux_increments,
                        lkq_block=lkq_block, **rot, **(dict(finish_dq=True) if finish_dq else {}))
    (state_pass or stage6_statepass.launch_state_pass)(x, s, meta, inputs=inputs)
    (state_terms or stage6_statepass.launch_state_terms)(x, s, out, meta, **(terms or {}), inputs=inputs,
                                                        late_sums=late_sums, **rot,
                                                        **(dict(finish_dk=True) if finish_dk else {}),
                                                        **(dict(dangles_started=True) if finish_dq else {}))
    (chunk_sum or stage6_statepass.launch_chunk_sum)(x, s, out, meta)
    if not finish_dq:
        post(x, s, out, meta, inputs=inputs or qk_inputs, **(dict(diag_blocks=True) if diag_blocks else {}),
             **(dict(k_done=True) if finish_dk else {}))


def run(x: dict, out: dict, meta) -> None:
    run_with(x, out, meta, low_precision=False)


_S6 = stage6_statepass.STAGE.kernels
STAGE = register_stage(StageSpec(
    name="stage7_streamaux",
    parent="stage6_statepass",
    summary="the aux walks N in 16-column blocks, loads each operand tile at first use and stores "
            "each result once complete (fewer live tiles, fewer spills); every C*R <= 64 folded",
    entry=run,
    kernels=(_S6[:1] + (KernelSpec("bwd_bwd_aux_streamed_kernel", Tag.AUX,
                                   "rank-folded aux, operands loaded late, results stored early"),)
             + _S6[1:]),
    zero_outputs=False,
))
