"""stage21_halves: stage20 with the pre and post kernels on the two halves of each q / k row.

The rotary pairs column j with j + N/2 (rotate-half on [0, RD) and [N/2, N/2 + RD)). stage11's
pre and post kernels hold whole [C, R, N] tiles and read each column's partner by address: the
pre kernel loads q and k twice (at n and at partner(n)), the post kernel loads the rotated-domain
gradients DQR / DKR twice and then once more for DANGLES (columns j and j + N/2, j < RD), and
every load computes a per-column partner index. Here a row is held as its two halves, [C, R, N/2]
tiles at columns j and j + N/2, so that a pair is one element of each half: the rotation loads
each element once and is two multiply-adds per half (the angle of column j is 0 where
j >= RD: cos 1, sin 0, the identity). The same arithmetic as stage11's kernels, term for term
(outputs bit-identical on the interpreter). The post kernel comes in two orders, one body
(_post_halves): both forming the diagonal terms of dQ and dK first, then dQ, then dK;
``bwd_bwd_post_halves_regs_kernel`` forms DANGLES from the half tiles in registers,
``bwd_bwd_post_halves_kernel`` as stage11 does, on [C, R, BRD] tiles loaded again.

Measured on the H200, per-kernel device time (`perf profile`, every stage in one process,
records/profile-grid-halves-4091bbf/, golden all passed), us:

    case                 pre: stage11 -> halves   post: stage11   halves+regs   halves
    N16_P64_R4_C8        157 -> 128                       165            70      106
    N32_P64_R4_C16       144 -> 54                        336           142      204
    N64_P64_R4_C16       140 -> 120                       227           319      226
    N128_P64_R4_C16      300 -> 240                       518           698      471
    N256_P64_R4_C8       1225 -> 1143                    1053          1443     1070
    N64_P128_R4_C16      405 -> 414                       246           355      270
    N128_P32_R4_C16      300 -> 241                       518           698      471
    N128_P128_R4_C8      633 -> 654                       465           678      506
    N128_P64_R8_C8       515 -> 473                      1173          2137     1494
    N128_P64_R2_C32      202 -> 128                       262           279      224
    N128_P64_R1_C64      170 -> 92                        174            91       95
    regular-8x512x16x8   85 -> 71                         124           174      131

(a third order, each side's diagonal terms, dQ / dK and DANGLES in turn, was slower still at
R >= 4: 693 us on N128_P64_R4_C16, 2271 on N128_P64_R8_C8; records/profile-*-halves-8fffe25/.)
So :func:`pre_kernel` takes the halves where P <= 64 and :func:`post_kernel` the halves with
DANGLES from registers where N <= 32 or R = 1, in stage11's order where the post kernel runs on
16 warps (stage18_widechunk.widens) with C >= 16; stage11's kernels elsewhere.

Measured with these rules against stage19_splitdot and the live upstream TileLang kernel, one
process per case, interleaved over 2 rounds (records/h200-halves-vs-tilelang-1ec367d.json,
golden 144/144 for both stages): 1.009-1.174x on the nine official cases where a rule applies
(N128_P64_R1_C64 1.140 -> 0.971 ms, N32_P64_R4_C16 1.863 -> 1.600), 0.997x and 0.999x where
none does (P = 128: the same kernels as stage19), 1.019x on regular-8x512x16x8; 1.055x in
geomean over the official cases, and 1.65x slower than TileLang there (stage19: 1.74x).
"""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels.bwd_bwd import stage1_pre, stage18_widechunk, stage20_auxinc
from mamba3_perf.kernels.bwd_bwd.common import (
    angle_grad_pair, chunk_frame, load_biased, store_angle_cs, store_chunk_decay, store_chunk_scalars,
    store_dangles, store_step_scalars,
)
from mamba3_perf.kernels.bwd_bwd.stage11_steptrig import (
    _diag_terms, _pre_rotation_rows, _reloaded_angle_grads, _store_cube,
)
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage


@triton.jit
def _halves(ANG, b, h, c, S, H, N, RD, C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr):
    """Index tensors of a chunk's [C, R, BN // 2] half tiles: steps t3 (and their positions tt),
    ranks r3, the first half's columns j3 (the second half's are j3 + N // 2), the mask of the
    columns inside a half, and cos / sin of each column's angle ([C, 1, BN // 2]; angle 0 where
    j >= RD)."""
    BH: tl.constexpr = BN // 2
    j3 = tl.arange(0, BH)[None, None, :]
    t3 = tl.arange(0, C)[:, None, None]
    tt = c * C + t3
    a = tl.load(ANG + ((b * S + tt) * H + h) * RD + j3, mask=j3 < RD, other=0.0)
    return t3, tt, tl.arange(0, R)[None, :, None], j3, j3 < N // 2, tl.cos(a), tl.sin(a)


@triton.jit
def bwd_bwd_pre_halves_kernel(
    DOUT, Q, K, V, QBIAS, KBIAS, MV, MO, DACS, DACSREV, DT, TRAP, SEGSUM, ANG,
    QB_S, KB_S, QR_S, KR_S, PSIV_S, DPHIO_S, GAM_S, TS_S, ECS_S, EREV_S, WT_S, DECAY_S,
    S, H, G, N, P, RD,
    C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr, REDUCE_O: tl.constexpr,
    INPUTS: tl.constexpr, SUB: tl.constexpr = 1, HEADS_INNER: tl.constexpr = False,
    QK_INPUTS: tl.constexpr = False, COS_S=None, SIN_S=None, ROT_CS: tl.constexpr = False,
):
    """stage11's pre kernel (bwd_bwd_pre_steptrig_kernel's signature) on half tiles: xr_j =
    cos x_j - sin x_j', xr_j' = cos x_j' + sin x_j with j' = j + N/2. SUB > 1: a program holds
    C of a chunk's SUB * C steps (stage25's sub-chunks: launched with C the sub-chunk and that
    many more programs); each stores its steps' rows and scalars, and the first of a chunk's SUB
    programs the chunk's decay matrix and decay. HEADS_INNER: program ids in (b, chunk, head) order
    (common.chunk_coords; a stage25 knob). QK_INPUTS: QB / KB are not stored though PsiV / dPhiO
    are (launch_pre's ``qk_inputs``). ROT_CS: cos / sin of the angles to COS_S / SIN_S
    ([B, S, H, RD], as ANG) in place of the rotated rows QR / KR, which the Gluon aux and
    state_terms then form themselves (launch_pre's ``rot_inline``)."""
    b, h, c, bh, bhc, i, ti, ri, tpos, tc = chunk_frame(S, H, C, R, HEADS_INNER)
    hq = h // (H // G)
    CR: tl.constexpr = C * R
    t3, tt, r3, j3, mj3, cs, sn = _halves(ANG, b, h, c, S, H, N, RD, C, R, BN)
    jp3 = j3 + N // 2
    q1 = load_biased(Q, QBIAS, b, h, hq, tt, r3, j3, S, G, N, R)
    q2 = load_biased(Q, QBIAS, b, h, hq, tt, r3, jp3, S, G, N, R)
    k1 = load_biased(K, KBIAS, b, h, hq, tt, r3, j3, S, G, N, R)
    k2 = load_biased(K, KBIAS, b, h, hq, tt, r3, jp3, S, G, N, R)
    if ROT_CS:
        store_angle_cs(COS_S, SIN_S, cs, sn, b, h, tt, j3, S, H, RD)
    else:
        _store_cube(QR_S, cs * q1 - sn * q2, bhc, t3, r3, j3, mj3, N, R, CR)
        _store_cube(QR_S, cs * q2 + sn * q1, bhc, t3, r3, jp3, mj3, N, R, CR)
        _store_cube(KR_S, cs * k1 - sn * k2, bhc, t3, r3, j3, mj3, N, R, CR)
        _store_cube(KR_S, cs * k2 + sn * k1, bhc, t3, r3, jp3, mj3, N, R, CR)
    if not INPUTS and not QK_INPUTS:
        _store_cube(QB_S, q1, bhc, t3, r3, j3, mj3, N, R, CR)
        _store_cube(QB_S, q2, bhc, t3, r3, jp3, mj3, N, R, CR)
        _store_cube(KB_S, k1, bhc, t3, r3, j3, mj3, N, R, CR)
        _store_cube(KB_S, k2, bhc, t3, r3, jp3, mj3, N, R, CR)
    if not INPUTS:
        stage1_pre.store_value_rows(DOUT, V, MV, MO, PSIV_S, DPHIO_S, b, h, bhc, i, tpos, ri, tl.arange(0, BP),
                                    S, H, P, R, CR, REDUCE_O)
    if SUB == 1:
        store_chunk_scalars(DT, TRAP, DACS, DACSREV, SEGSUM, GAM_S, TS_S, ECS_S, EREV_S, WT_S, DECAY_S,
                            bh, bhc, c, tc, S, C)
    else:
        store_step_scalars(DT, TRAP, DACS, DACSREV, GAM_S, TS_S, ECS_S, EREV_S, bh, c * C + tc, S)
        if bhc % SUB == 0:
            store_chunk_decay(DACS, SEGSUM, WT_S, DECAY_S, bh, bhc // SUB, c // SUB, S, C * SUB)


@triton.jit
def _store_half(DXR_S, DX, e1, e2, X_S, X, XBIAS, b, h, hq, bhc, tt, t3, r3, j3, jp3, mj3, rows3, orow, cs, sn,
                S, G, N, R: tl.constexpr, CR: tl.constexpr, INPUTS: tl.constexpr, REG_DANGLES: tl.constexpr):
    """dQ or dK on both halves from the rotated-domain rows DXR plus the diagonal terms e1, e2;
    REG_DANGLES: returns this side's DANGLES terms [C, R, BN // 2] from the rows in registers
    and the pre-rotation halves of X (this side's q or k)."""
    d1 = tl.load(DXR_S + rows3 + j3, mask=mj3, other=0.0)
    d2 = tl.load(DXR_S + rows3 + jp3, mask=mj3, other=0.0)
    tl.store(DX + orow + j3, (cs * d1 + sn * d2 + e1).to(DX.dtype.element_ty), mask=mj3)
    tl.store(DX + orow + jp3, (cs * d2 - sn * d1 + e2).to(DX.dtype.element_ty), mask=mj3)
    g = 0.0
    if REG_DANGLES:
        g = angle_grad_pair(d1, d2, _pre_rotation_rows(X_S, X, XBIAS, b, h, hq, bhc, tt, t3, r3, j3, mj3, S, G, N,
                                                       R, CR, INPUTS),
                            _pre_rotation_rows(X_S, X, XBIAS, b, h, hq, bhc, tt, t3, r3, jp3, mj3, S, G, N,
                                               R, CR, INPUTS), cs, sn)
    return g


@triton.jit
def _post_halves(ANG, QB_S, KB_S, DQR_S, DKR_S, DQD_S, DKD_S, DQ, DK, DANG, Q, K, QBIAS, KBIAS,
                 S, H, G, N, RD, C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, BRD: tl.constexpr,
                 INPUTS: tl.constexpr, GDB_S, DIAG_BLOCKS: tl.constexpr, REG_DANGLES: tl.constexpr,
                 HEADS_INNER: tl.constexpr, K_DONE: tl.constexpr):
    """The post kernel on half tiles: the diagonal terms of both sides first (stage11's
    _diag_terms on each half), then dx_j = cos d_j + sin d_j', dx_j' = cos d_j' - sin d_j (d: the
    rotated-domain gradient, j' = j + N/2) for dQ and dK; DANGLES from the half tiles in
    registers (REG_DANGLES), or as stage11 forms it, on [C, R, BRD] tiles loaded again.
    HEADS_INNER: program ids in (b, chunk, head) order (common.chunk_coords; a stage25 knob).
    K_DONE: state_terms stored DK and DANGLES' k half (terms_gluon's FIN): dQ alone here, its
    DANGLES half added to what is there."""
    b, h, c, bh, bhc, i, _ti, ri, tpos, tc = chunk_frame(S, H, C, R, HEADS_INNER)
    CR: tl.constexpr = C * R
    BH: tl.constexpr = BN // 2
    hq = h // (H // G)
    t3, tt, r3, j3, mj3, cs, sn = _halves(ANG, b, h, c, S, H, N, RD, C, R, BN)
    jp3 = j3 + N // 2
    rows3 = (bhc * CR + t3 * R + r3) * N
    orow = ((b * S * R + c * CR + t3 * R + r3) * H + h) * N
    if DIAG_BLOCKS:
        dq1, dk1 = _diag_terms(GDB_S, QB_S, KB_S, Q, K, QBIAS, KBIAS, b, h, hq, bhc, tt, t3, r3, j3,
                               S, G, N, C, R, BH, INPUTS)
        dq2, dk2 = _diag_terms(GDB_S, QB_S, KB_S, Q, K, QBIAS, KBIAS, b, h, hq, bhc, tt, t3, r3, jp3,
                               S, G, N, C, R, BH, INPUTS)
    else:
        dq1 = tl.load(DQD_S + rows3 + j3, mask=mj3, other=0.0)
        dq2 = tl.load(DQD_S + rows3 + jp3, mask=mj3, other=0.0)
        dk1 = tl.load(DKD_S + rows3 + j3, mask=mj3, other=0.0)
        dk2 = tl.load(DKD_S + rows3 + jp3, mask=mj3, other=0.0)
    g = _store_half(DQR_S, DQ, dq1, dq2, QB_S, Q, QBIAS, b, h, hq, bhc, tt, t3, r3, j3, jp3, mj3, rows3, orow,
                    cs, sn, S, G, N, R, CR, INPUTS, REG_DANGLES)
    if not K_DONE:
        g += _store_half(DKR_S, DK, dk1, dk2, KB_S, K, KBIAS, b, h, hq, bhc, tt, t3, r3, j3, jp3, mj3, rows3,
                         orow, cs, sn, S, G, N, R, CR, INPUTS, REG_DANGLES)
    if REG_DANGLES:
        j2 = tl.arange(0, BH)[None, :]
    else:
        g = _reloaded_angle_grads(ANG, QB_S, KB_S, DQR_S, DKR_S, Q, K, QBIAS, KBIAS, b, h, hq, bhc, tt, t3, r3,
                                  rows3, S, H, G, N, RD, R, CR, BRD, INPUTS, K_DONE)
        j2 = tl.arange(0, BRD)[None, :]
    store_dangles(DANG, tl.sum(g, axis=1), b, h, c * C + tc[:, None], j2, S, H, RD, K_DONE)


@triton.jit
def bwd_bwd_post_halves_kernel(
    ANG, QB_S, KB_S, DQR_S, DKR_S, DQD_S, DKD_S,
    DQ, DK, DANG,
    Q, K, QBIAS, KBIAS,
    S, H, G, N, RD,
    C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, BRD: tl.constexpr, INPUTS: tl.constexpr,
    GDB_S, DIAG_BLOCKS: tl.constexpr, HEADS_INNER: tl.constexpr = False, K_DONE: tl.constexpr = False,
):
    """stage11's post kernel (bwd_bwd_post_steptrig_kernel's signature) with dQ / dK on half
    tiles, DANGLES as stage11 forms it."""
    _post_halves(ANG, QB_S, KB_S, DQR_S, DKR_S, DQD_S, DKD_S, DQ, DK, DANG, Q, K, QBIAS, KBIAS, S, H, G, N, RD,
                 C, R, BN, BRD, INPUTS, GDB_S, DIAG_BLOCKS, False, HEADS_INNER, K_DONE)


@triton.jit
def bwd_bwd_post_halves_regs_kernel(
    ANG, QB_S, KB_S, DQR_S, DKR_S, DQD_S, DKD_S,
    DQ, DK, DANG,
    Q, K, QBIAS, KBIAS,
    S, H, G, N, RD,
    C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, BRD: tl.constexpr, INPUTS: tl.constexpr,
    GDB_S, DIAG_BLOCKS: tl.constexpr, HEADS_INNER: tl.constexpr = False, K_DONE: tl.constexpr = False,
):
    """stage11's post kernel (bwd_bwd_post_steptrig_kernel's signature) on half tiles, DANGLES
    from the rotated-domain rows in registers and the pre-rotation halves."""
    _post_halves(ANG, QB_S, KB_S, DQR_S, DKR_S, DQD_S, DKD_S, DQ, DK, DANG, Q, K, QBIAS, KBIAS, S, H, G, N, RD,
                 C, R, BN, BRD, INPUTS, GDB_S, DIAG_BLOCKS, True, HEADS_INNER, K_DONE)


def pre_kernel(meta):
    """The pre kernel for ``meta`` (module docstring): on half tiles where P <= 64, stage11's
    elsewhere (None)."""
    return bwd_bwd_pre_halves_kernel if meta.P <= 64 else None


def post_kernel(meta):
    """The post kernel for ``meta`` (module docstring): DANGLES from registers where N <= 32 or
    R = 1; stage11's order on half tiles where the post kernel runs on 16 warps
    (stage18_widechunk.widens) with C >= 16; stage11's kernel elsewhere (None)."""
    if meta.N <= 32 or meta.R == 1:
        return bwd_bwd_post_halves_regs_kernel
    if stage18_widechunk.widens(meta) and meta.C >= 16:
        return bwd_bwd_post_halves_kernel
    return None


def run_with(x: dict, out: dict, meta, **kw) -> None:
    """stage21's pipeline; ``kw``: more stage20_auxinc.run_with keywords (stage22)."""
    stage20_auxinc.run_with(x, out, meta, pre_kernel=pre_kernel(meta), post_kernel=post_kernel(meta), **kw)


def run(x: dict, out: dict, meta) -> None:
    run_with(x, out, meta)


_S20 = stage20_auxinc.STAGE.kernels
STAGE = register_stage(StageSpec(
    name="stage21_halves",
    parent="stage20_auxinc",
    summary="the pre and post kernels hold each q / k row as its two rotary halves where that "
            "measured faster: each element loaded once, no partner-column addressing",
    entry=run,
    # stage11's pre and post kernels stay in the list: the shapes outside the rules launch them
    kernels=(KernelSpec("bwd_bwd_pre_halves_kernel", Tag.PRE,
                        "discretization, rotary on the two halves of each row, into scratch"),) + _S20
    + (KernelSpec("bwd_bwd_post_halves_kernel", Tag.POST,
                  "inverse rotary on the two halves of each row, diagonal correction, DANGLES"),
       KernelSpec("bwd_bwd_post_halves_regs_kernel", Tag.POST,
                  "inverse rotary on the two halves of each row, diagonal correction, DANGLES from "
                  "the rows in registers")),
    zero_outputs=False,
))
