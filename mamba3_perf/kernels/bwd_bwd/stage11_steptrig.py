"""stage11_steptrig: stage10 with a pre kernel that takes cos / sin once per (step, column).

The rotary angle of fused row (t, r), column n is angles[t, n mod N/2] for every rank r, but the
pre kernel of stages 1-10 loads it and takes tl.cos and tl.sin on the whole [C*R, N] tile of q
and again of k: 4 C R N libdevice calls per chunk (16 K at N = 64, R = 4, C = 16) for C N / 2
distinct values. Here the pre kernel works on [C, R, N] tiles: the angles, cos and sin are
[C, 1, N] and broadcast over the ranks, shared by q and k (R x 2 fewer calls); the rotated rows
are stored to the same fused-row scratch (row t R + r). Everything else is stage10.
"""
from __future__ import annotations

import functools

import triton
import triton.language as tl

from mamba3_perf.kernels.bwd_bwd import prod, stage1_pre, stage7_streamaux, stage9_termsblock, stage10_fewscratch
from mamba3_perf.kernels.bwd_bwd.common import (
    angle_grad_pair, chunk_frame, load_biased, rot_cols, store_angle_cs, store_chunk_scalars, store_dangles,
)
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage


@triton.jit
def _store_cube(X, val, bhc, t3, r3, n3, mask, N, R: tl.constexpr, CR: tl.constexpr):
    """A [C, R, BN] tile to fused rows t R + r of a [B,H,nc,C*R,N] scratch buffer."""
    tl.store(X + (bhc * CR + t3 * R + r3) * N + n3, val, mask=mask)


@triton.jit
def bwd_bwd_pre_steptrig_kernel(
    DOUT, Q, K, V, QBIAS, KBIAS, MV, MO, DACS, DACSREV, DT, TRAP, SEGSUM, ANG,
    QB_S, KB_S, QR_S, KR_S, PSIV_S, DPHIO_S, GAM_S, TS_S, ECS_S, EREV_S, WT_S, DECAY_S,
    S, H, G, N, P, RD,
    C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr, REDUCE_O: tl.constexpr,
    INPUTS: tl.constexpr, QK_INPUTS: tl.constexpr = False, COS_S=None, SIN_S=None,
    ROT_CS: tl.constexpr = False,
):
    """stage1's pre kernel with the rotary on [C, R, BN] tiles (cos / sin on [C, 1, BN]).
    QK_INPUTS: QB / KB are not stored (their readers load q / k) though PsiV / dPhiO are
    (launch_pre's ``qk_inputs``). ROT_CS: cos / sin of the angles to COS_S / SIN_S in place of
    QR / KR (stage21_halves' pre kernel's)."""
    b, h, c, bh, bhc, i, ti, ri, tpos, tc = chunk_frame(S, H, C, R)
    hq = h // (H // G)
    CR: tl.constexpr = C * R
    n, partner, sgn, jn, rot = rot_cols(N, RD, BN)
    n3 = n[None, None, :]
    pt3 = partner[None, None, :]
    r3 = tl.arange(0, R)[None, :, None]
    t3 = tc[:, None, None]
    tt = c * C + t3
    mn3 = n3 < N
    a = tl.load(ANG + ((b * S + tt) * H + h) * RD + jn[None, None, :],
                mask=(rot & (n < N))[None, None, :], other=0.0)  # [C, 1, BN]
    cs = tl.cos(a)
    sn = sgn[None, None, :] * tl.sin(a)
    qb = load_biased(Q, QBIAS, b, h, hq, tt, r3, n3, S, G, N, R)
    kb = load_biased(K, KBIAS, b, h, hq, tt, r3, n3, S, G, N, R)
    if ROT_CS:  # the first half's columns hold every angle (jn = n there)
        store_angle_cs(COS_S, SIN_S, cs, tl.sin(a), b, h, tt, tl.where(n < N // 2, n, RD)[None, None, :],
                       S, H, RD)
    else:
        qr = cs * qb + sn * load_biased(Q, QBIAS, b, h, hq, tt, r3, pt3, S, G, N, R)
        _store_cube(QR_S, qr, bhc, t3, r3, n3, mn3, N, R, CR)
        kr = cs * kb + sn * load_biased(K, KBIAS, b, h, hq, tt, r3, pt3, S, G, N, R)
        _store_cube(KR_S, kr, bhc, t3, r3, n3, mn3, N, R, CR)
    if not INPUTS and not QK_INPUTS:
        _store_cube(QB_S, qb, bhc, t3, r3, n3, mn3, N, R, CR)
        _store_cube(KB_S, kb, bhc, t3, r3, n3, mn3, N, R, CR)
    if not INPUTS:
        stage1_pre.store_value_rows(DOUT, V, MV, MO, PSIV_S, DPHIO_S, b, h, bhc, i, tpos, ri, tl.arange(0, BP),
                                    S, H, P, R, CR, REDUCE_O)
    store_chunk_scalars(DT, TRAP, DACS, DACSREV, SEGSUM, GAM_S, TS_S, ECS_S, EREV_S, WT_S, DECAY_S,
                        bh, bhc, c, tc, S, C)


@triton.jit
def _pre_rotation_rows(X_S, X, BIAS, b, h, hq, bhc, tt, t3, r, cols, mask, S, G, N,
                       R: tl.constexpr, CR: tl.constexpr, INPUTS: tl.constexpr):
    """The pre-rotation q or k of a chunk at steps t3 (positions tt), ranks ``r`` (one rank or a
    [1, R, 1] index) and columns ``cols``, fp32: from the inputs plus bias (INPUTS) or from the
    pre kernel's QB / KB scratch, read where ``mask``."""
    if INPUTS:
        x = load_biased(X, BIAS, b, h, hq, tt, r, cols, S, G, N, R)
    else:
        x = tl.load(X_S + (bhc * CR + t3 * R + r) * N + cols, mask=mask, other=0.0)
    return x


@triton.jit
def _diag_terms(GDB_S, QB_S, KB_S, Q, K, QBIAS, KBIAS, b, h, hq, bhc, tt, t3, r3, n3, S, G, N,
                C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, INPUTS: tl.constexpr):
    """The qk_dot diagonal terms of dQ and dK on a [C, R, BN] tile from the same-step weight
    blocks g[t, r_k, r_q] (GDB): dq[t, r_q] = sum_r_k g[t, r_k, r_q] kb[t, r_k] and
    dk[t, r_k] = sum_r_q g[t, r_k, r_q] qb[t, r_q]."""
    gdb = GDB_S + (bhc * C + t3) * R * R
    dq = tl.zeros([C, R, BN], dtype=tl.float32)
    dk = tl.zeros([C, R, BN], dtype=tl.float32)
    for r in tl.static_range(R):
        dq += tl.load(gdb + r * R + r3) * _pre_rotation_rows(KB_S, K, KBIAS, b, h, hq, bhc, tt, t3, r, n3,
                                                             n3 < N, S, G, N, R, C * R, INPUTS)
        dk += tl.load(gdb + r3 * R + r) * _pre_rotation_rows(QB_S, Q, QBIAS, b, h, hq, bhc, tt, t3, r, n3,
                                                             n3 < N, S, G, N, R, C * R, INPUTS)
    return dq, dk


@triton.jit
def _angle_grad_cube(DX_S, rows3, j, jp, mj, x1, x2, cj, sj):
    """d(loss)/d(angle j) per (step, rank) through the rotation of x (pre-rotation columns
    x1 = x[.., j], x2 = x[.., jp], jp = j + N/2; dX rotated-domain gradient rows in scratch)."""
    return angle_grad_pair(tl.load(DX_S + rows3 + j, mask=mj, other=0.0),
                           tl.load(DX_S + rows3 + jp, mask=mj, other=0.0), x1, x2, cj, sj)


@triton.jit
def _reloaded_angle_grads(ANG, QB_S, KB_S, DQR_S, DKR_S, Q, K, QBIAS, KBIAS, b, h, hq, bhc, tt, t3, r3, rows3,
                          S, H, G, N, RD, R: tl.constexpr, CR: tl.constexpr, BRD: tl.constexpr,
                          INPUTS: tl.constexpr, K_DONE: tl.constexpr = False):
    """DANGLES' terms per (step, rank, angle j) [C, R, BRD] from [C, R, BRD] tiles loaded for
    them: the rotated-domain gradient rows DQR / DKR and the pre-rotation q / k at columns j and
    j + N/2 (j < RD), cos / sin of each step's angles; K_DONE: the q side's alone."""
    j = tl.arange(0, BRD)[None, None, :]
    mj = j < RD
    jp = j + N // 2
    aj = tl.load(ANG + ((b * S + tt) * H + h) * RD + j, mask=mj, other=0.0)  # [C, 1, BRD]
    cj = tl.cos(aj)
    sj = tl.sin(aj)
    q1 = _pre_rotation_rows(QB_S, Q, QBIAS, b, h, hq, bhc, tt, t3, r3, j, mj, S, G, N, R, CR, INPUTS)
    q2 = _pre_rotation_rows(QB_S, Q, QBIAS, b, h, hq, bhc, tt, t3, r3, jp, mj, S, G, N, R, CR, INPUTS)
    g = _angle_grad_cube(DQR_S, rows3, j, jp, mj, q1, q2, cj, sj)
    if not K_DONE:
        k1 = _pre_rotation_rows(KB_S, K, KBIAS, b, h, hq, bhc, tt, t3, r3, j, mj, S, G, N, R, CR, INPUTS)
        k2 = _pre_rotation_rows(KB_S, K, KBIAS, b, h, hq, bhc, tt, t3, r3, jp, mj, S, G, N, R, CR, INPUTS)
        g += _angle_grad_cube(DKR_S, rows3, j, jp, mj, k1, k2, cj, sj)
    return g


@triton.jit
def bwd_bwd_post_steptrig_kernel(
    ANG, QB_S, KB_S, DQR_S, DKR_S, DQD_S, DKD_S,
    DQ, DK, DANG,
    Q, K, QBIAS, KBIAS,
    S, H, G, N, RD,
    C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, BRD: tl.constexpr, INPUTS: tl.constexpr,
    GDB_S, DIAG_BLOCKS: tl.constexpr, HEADS_INNER: tl.constexpr = False, K_DONE: tl.constexpr = False,
):
    """prod's post kernel on [C, R, *] tiles: cos / sin of each step's angles once, broadcast
    over the ranks; DANGLES sums the ranks of a [C, R, RD] tile. DIAG_BLOCKS (stage13): the
    qk_dot diagonal terms from the aux's same-step weight blocks GDB and the pre-rotation q / k,
    R fp32 multiply-adds per element, instead of the aux's DQD / DKD rows. HEADS_INNER: program
    ids in (b, chunk, head) order (common.chunk_coords; a stage25 knob). K_DONE: state_terms
    stored DK and DANGLES' k half (terms_gluon's FIN); only dQ here, and DANGLES' q half added."""
    b, h, c, bh, bhc, i, _ti, ri, tpos, tc = chunk_frame(S, H, C, R, HEADS_INNER)
    CR: tl.constexpr = C * R
    n, partner, sgn, jn, rot = rot_cols(N, RD, BN)
    n3 = n[None, None, :]
    t3 = tc[:, None, None]
    r3 = tl.arange(0, R)[None, :, None]
    tt = c * C + t3
    mn3 = n3 < N
    hq = h // (H // G)
    a = tl.load(ANG + ((b * S + tt) * H + h) * RD + jn[None, None, :],
                mask=(rot & (n < N))[None, None, :], other=0.0)
    cs = tl.cos(a)
    sn = sgn[None, None, :] * tl.sin(a)
    rows3 = (bhc * CR + t3 * R + r3) * N
    pt3 = partner[None, None, :]
    orow = ((b * S * R + c * CR + t3 * R + r3) * H + h) * N + n3
    if DIAG_BLOCKS:
        dq_diag, dk_diag = _diag_terms(GDB_S, QB_S, KB_S, Q, K, QBIAS, KBIAS, b, h, hq, bhc, tt, t3, r3,
                                       n3, S, G, N, C, R, BN, INPUTS)
    else:
        dq_diag = tl.load(DQD_S + rows3 + n3, mask=mn3, other=0.0)
        dk_diag = tl.load(DKD_S + rows3 + n3, mask=mn3, other=0.0)
    dq = (cs * tl.load(DQR_S + rows3 + n3, mask=mn3, other=0.0)
          - sn * tl.load(DQR_S + rows3 + pt3, mask=mn3, other=0.0) + dq_diag)
    tl.store(DQ + orow, dq.to(DQ.dtype.element_ty), mask=mn3)
    if not K_DONE:
        dk = (cs * tl.load(DKR_S + rows3 + n3, mask=mn3, other=0.0)
              - sn * tl.load(DKR_S + rows3 + pt3, mask=mn3, other=0.0) + dk_diag)
        tl.store(DK + orow, dk.to(DK.dtype.element_ty), mask=mn3)
    # DANGLES per angle j: both columns it rotates, j and j + N/2
    g = _reloaded_angle_grads(ANG, QB_S, KB_S, DQR_S, DKR_S, Q, K, QBIAS, KBIAS, b, h, hq, bhc, tt, t3, r3, rows3,
                              S, H, G, N, RD, R, CR, BRD, INPUTS, K_DONE)
    j2 = tl.arange(0, BRD)[None, :]
    store_dangles(DANG, tl.sum(g, axis=1), b, h, c * C + tc[:, None], j2, S, H, RD, K_DONE)


def run_with(x: dict, out: dict, meta, *, pre_launch: dict | None = None, terms: dict | None = None,
             post_launch: dict | None = None, pre_kernel=None, post_kernel=None, pre_steps: int | None = None,
             post_steps: int | None = None, pre_heads_inner: bool = False, post_heads_inner: bool = False,
             inputs: bool | None = None, **kw) -> None:
    """stage10's pipeline with this stage's pre and post kernels; ``pre_launch``: the pre
    kernel's launch options, ``terms``: state_terms' (stage7_streamaux.run_with's; default
    stage9_termsblock.terms_choice) (stage16); ``post_launch``: the post kernel's (stage18);
    ``pre_kernel`` / ``post_kernel``: other pre / post kernels of this stage's signatures
    (stage21); ``pre_steps`` / ``post_steps``: the pre / post kernel's time steps per program
    (stage1_pre.launch_pre's / prod.launch_post's ``steps``; stage25); ``pre_heads_inner`` /
    ``post_heads_inner``: launch_pre's / launch_post's ``heads_inner`` (stage25); ``inputs``:
    whether the readers load the 16-bit inputs, in place of stage10_fewscratch.reads_inputs (a
    stage25 knob); ``kw``: more stage7_streamaux.run_with keywords (stages 12-15)."""
    stage7_streamaux.run_with(x, out, meta, low_precision=True,
                              terms=stage9_termsblock.terms_choice(meta) if terms is None else terms,
                              inputs=stage10_fewscratch.reads_inputs(meta) if inputs is None else inputs,
                              pre=functools.partial(stage1_pre.launch_pre,
                                                    kernel=pre_kernel or bwd_bwd_pre_steptrig_kernel,
                                                    launch=pre_launch, steps=pre_steps,
                                                    heads_inner=pre_heads_inner),
                              post=functools.partial(prod.launch_post,
                                                     kernel=post_kernel or bwd_bwd_post_steptrig_kernel,
                                                     diag_blocks=False, launch=post_launch, steps=post_steps,
                                                     heads_inner=post_heads_inner),
                              **kw)


def run(x: dict, out: dict, meta) -> None:
    run_with(x, out, meta)


_S10 = stage10_fewscratch.STAGE.kernels
STAGE = register_stage(StageSpec(
    name="stage11_steptrig",
    parent="stage10_fewscratch",
    summary="the pre and post kernels rotate on [C, R, N] tiles: cos / sin once per (step, "
            "column), shared by the ranks (and in pre by q and k)",
    entry=run,
    kernels=(KernelSpec("bwd_bwd_pre_steptrig_kernel", Tag.PRE,
                        "discretization, rotary with per-step cos / sin, into scratch"),) + _S10[1:-1]
    + (KernelSpec("bwd_bwd_post_steptrig_kernel", Tag.POST,
                  "inverse rotary with per-step cos / sin, diagonal correction, DANGLES"),),
    zero_outputs=False,
))
