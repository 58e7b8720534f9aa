"""What the Gluon kernels (Hopper only: sm_90 wgmma and TMA) share: the names of Gluon calls that
differ across Triton versions, the TF32 split, and TMA descriptors of the fp32 / 16-bit buffers
viewed as 2-D row blocks. Importing this needs a Triton with Gluon's Hopper module."""
from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from mamba3_perf.kernels.bwd_bwd.common import WG_ROWS, chunks_per_program  # noqa: F401

# the TMA load: async_copy_global_to_shared in Triton 3.6 (the H200's), async_load later
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
# a shared buffer's view as another shape: _reinterpret in Triton 3.6, reinterpret later
_reinterpret = getattr(gl.shared_memory_descriptor, "_reinterpret", None) or gl.shared_memory_descriptor.reinterpret
# the CTA-wide barrier: thread_barrier in Triton 3.6, barrier later
cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
GL_DTYPES = {torch.float32: gl.float32, torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


@gluon.jit
def tf32_split(x):
    """common.tf32_split in Gluon: x = hi + lo exactly, hi rounded to TF32."""
    bits = x.to(gl.uint32, bitcast=True)
    hi = ((bits + 0x1000) >> 13 << 13).to(gl.float32, bitcast=True)
    return hi, x - hi


@gluon.jit
def bf16_split(x):
    """common.bf16_split in Gluon: hi = x rounded to bf16, lo = (x - hi) rounded to bf16."""
    hi = x.to(gl.bfloat16)
    return hi, (x - hi.to(gl.float32)).to(gl.bfloat16)


@gluon.jit
def split_parts(x, BF16: gl.constexpr):
    """fp32 ``x`` as the (hi, lo) parts of :func:`dot3`'s passes: bf16 (BF16, stage37) or TF32."""
    if BF16:
        hi, lo = bf16_split(x)
    else:
        hi, lo = tf32_split(x)
    return hi, lo


def split_format(bf16: bool):
    """(element type of the split parts, the A operand's k_width, the wgmma instruction's K) of
    :func:`split_parts`' format: bf16 parts are 16-bit (two a 32-bit register, K = 16 a wgmma),
    TF32 parts fp32 (K = 8)."""
    return (gl.bfloat16, 2, 16) if bf16 else (gl.float32, 1, 8)


@gluon.jit
def dot3(a_hi, a_lo, b_hi, b_lo, acc, use_acc: gl.constexpr):
    """acc (+)= a @ b as three asynchronous wgmma, TF32 or bf16 by the parts' type (lo.hi, hi.lo,
    hi.hi: common.fdot's order); b_* are [K, N] shared-memory views, a_* registers or shared memory.
    The caller waits (warpgroup_mma_wait) before reading acc or reusing the operands' memory."""
    acc = warpgroup_mma(a_lo, b_hi, acc, use_acc=use_acc, is_async=True)
    acc = warpgroup_mma(a_hi, b_lo, acc, is_async=True)
    return warpgroup_mma(a_hi, b_hi, acc, is_async=True)


@gluon.jit
def at_step(buf, z, DYN: gl.constexpr):
    """The 2-d shared buffer ``buf`` as a loop step reads it: with DYN, viewed through a per-step
    index ``z`` that is 0 when the kernel runs (a runtime zero times the loop index) but unknown to
    the compiler, so that the wgmma descriptors of a loop-invariant buffer are formed in each step
    from one base instead of hoisted out of the loop, where tens of 64-bit descriptors exceed the
    uniform registers and live in vector registers, moved back (R2UR) before each wgmma; without,
    ``buf`` itself."""
    if DYN:
        return _reinterpret(buf, buf.dtype, [1, buf.shape[0], buf.shape[1]], buf.layout).index(z)
    else:
        return buf


# WG_ROWS, chunks_per_program: common's (plain Python, for the rules of stages that must import
# without Gluon)


@gluon.jit
def chunk_coords(S, H, C: gl.constexpr):
    """(bhc, bh, b, h, c) of a program on a (B*H*nchunks) grid (common.chunk_coords in Gluon)."""
    bhc = gl.program_id(0).to(gl.int64)
    bh = bhc // (S // C)
    return bhc, bh, bh // H, bh % H, bhc % (S // C)


@gluon.jit
def rotation_parts(own, par, BIAS, COS_S, SIN_S, b, h, c, n0, S, H, RD, N: gl.constexpr, C: gl.constexpr,
                   R: gl.constexpr, L: gl.constexpr, R0: gl.constexpr = 0):
    """What rotating one chunk's q or k rows on columns [n0, n0 + NB) of one rotary half takes, in
    layout L, from the 16-bit rows of those columns (``own``) and of their partners n +- N/2
    (``par``): x = own + bias[h, r], xp = par + bias at the partner columns, and cos / sin of the
    angle j = n mod N/2 the pre kernel stored ([B, S, H, RD], ROT_CS; 1 / 0 where j >= RD and on
    rows past the chunk's C*R, which the box runs on into the next chunk and nothing stores). R0:
    the block's first row, where it is rows [R0, R0 + M) of the chunk's (a multiple of R)."""
    M: gl.constexpr = own.shape[0]
    NB: gl.constexpr = own.shape[1]
    HALF: gl.constexpr = N // 2
    i = R0 + gl.arange(0, M, layout=gl.SliceLayout(1, L))
    n = n0 + gl.arange(0, NB, layout=gl.SliceLayout(0, L))
    second = n >= HALF
    j = gl.where(second, n - HALF, n)
    pn = gl.where(second, n - HALF, n + HALF)
    brow = (h * R + i % R) * N
    x = own.to(gl.float32) + gl.load(BIAS + brow[:, None] + n[None, :])
    xp = par.to(gl.float32) + gl.load(BIAS + brow[:, None] + pn[None, :])
    at = ((b * S + c * C + i // R) * H + h) * RD
    m = (i < C * R)[:, None] & (j < RD)[None, :]
    cs = gl.load(COS_S + at[:, None] + j[None, :], mask=m, other=1.0)
    sn = gl.load(SIN_S + at[:, None] + j[None, :], mask=m, other=0.0)
    return x, xp, cs, sn


@gluon.jit
def rotate(x, xp, cs, sn, n0, N: gl.constexpr, L: gl.constexpr):
    """The rotated rows of a block at columns [n0, n0 + NB) from :func:`rotation_parts`' x, xp,
    cos, sin in layout L, as the pre kernels form them: xr_n = cos x_n - sin x_{n + N/2} in the
    first half, cos x_n + sin x_{n - N/2} in the second; x itself where j >= RD."""
    n = n0 + gl.arange(0, x.shape[1], layout=gl.SliceLayout(0, L))
    return cs * x + gl.where((n >= N // 2)[None, :], sn, -sn) * xp


@gluon.jit
def rotated_rows(own, par, BIAS, COS_S, SIN_S, b, h, c, n0, S, H, RD, N: gl.constexpr, C: gl.constexpr,
                 R: gl.constexpr, L: gl.constexpr):
    """The rotated rows (:func:`rotate`) of :func:`rotation_parts`' block."""
    x, xp, cs, sn = rotation_parts(own, par, BIAS, COS_S, SIN_S, b, h, c, n0, S, H, RD, N, C, R, L)
    return rotate(x, xp, cs, sn, n0, N, L)


@gluon.jit
def block_col(j, NB: gl.constexpr, N: gl.constexpr, PAIRS: gl.constexpr):
    """The first N column of step j's block of an N walk: j * NB, or with PAIRS the rotary pairs
    in turn (a first-half block, then its partners N/2 on; finish_pair's order)."""
    if PAIRS:
        col = (j // 2) * NB + (j % 2) * (N // 2)
    else:
        col = j * NB
    return col


@gluon.jit
def _diag_block(GDB_S, Y, YBIAS, b, h, hq, c, bhc, cols, S, G, N: gl.constexpr, C: gl.constexpr,
                R: gl.constexpr, L: gl.constexpr, M: gl.constexpr, SIDE_Q: gl.constexpr, R0: gl.constexpr = 0):
    """The qk_dot diagonal term of dK (dk[t, r_k] = sum_r_q GDB[t, r_k, r_q] qb[t, r_q]) or, with
    SIDE_Q, of dQ (dq[t, r_q] = sum_r_k GDB[t, r_k, r_q] kb[t, r_k]) on columns ``cols``
    (stage11_steptrig._diag_terms), the other side's rows Y from its 16-bit input plus bias; on
    the chunk's rows [R0, R0 + M)."""
    CR: gl.constexpr = C * R
    i = R0 + gl.arange(0, M, layout=gl.SliceLayout(1, L))
    t = c * C + i // R
    e = gl.zeros([M, cols.shape[0]], gl.float32, L)
    for r in gl.static_range(R):
        if SIDE_Q:
            w = gl.load(GDB_S + (bhc * CR + (i // R) * R + r) * R + i % R, mask=i < CR, other=0.0)
        else:
            w = gl.load(GDB_S + (bhc * CR + i) * R + r, mask=i < CR, other=0.0)
        yrow = (((b * S + t) * R + r) * G + hq) * N
        y = (gl.load(Y + yrow[:, None] + cols[None, :], mask=(i < CR)[:, None], other=0.0).to(gl.float32)
             + gl.load(YBIAS + (h * R + r) * N + cols)[None, :])
        e += w[:, None] * y
    return e


@gluon.jit
def finish_pair(DX, DANG, GDB_S, Y, YBIAS, d1, d2, x1, x2, cs, sn, b, h, hq, c, bhc, n0, S, H, G, RD,
                N: gl.constexpr, C: gl.constexpr, R: gl.constexpr, L: gl.constexpr, SIDE_Q: gl.constexpr,
                ADD: gl.constexpr, DIAG: gl.constexpr = True, R0: gl.constexpr = 0):
    """What the post kernel does with dK (or, SIDE_Q, dQ) on a pair of blocks at columns n0 (first
    rotary half) and n0 + N/2, from their rotated-domain rows d1, d2, pre-rotation rows x1, x2 and
    the pair's cos / sin, in layout L (stage21_halves' post arithmetic, term for term): this
    side's half of DANGLES, the pair's angle gradients summed over the ranks (ADD: added to the
    other side's half, stored before it); then each block's gradient, the inverse rotary (cos d1
    + sin d2, cos d2 - sin d1) plus the qk_dot diagonal term (:func:`_diag_block`; Y / YBIAS: the
    other side's 16-bit input and bias), stored in DX's dtype. Without DIAG no diagonal term: the
    aux folded it into the rotated-domain rows d1, d2 (aux_gluon's FOLD). R0: the blocks are the
    chunk's rows [R0, R0 + M) (a multiple of R), the rest finished by another call."""
    M: gl.constexpr = d1.shape[0]
    NB: gl.constexpr = d1.shape[1]
    CR: gl.constexpr = C * R
    g = d1 * (-sn * x1 - cs * x2) + d2 * (-sn * x2 + cs * x1)  # common.angle_grad_pair
    g = gl.sum(gl.reshape(g, [M // R, R, NB]), axis=1)
    tg = R0 // R + gl.arange(0, M // R, layout=gl.SliceLayout(1, g.type.layout))
    jg = n0 + gl.arange(0, NB, layout=gl.SliceLayout(0, g.type.layout))
    dptr = DANG + ((b * S + c * C + tg[:, None]) * H + h) * RD + jg[None, :]
    dmask = (tg < C)[:, None] & (jg < RD)[None, :]
    if ADD:
        g += gl.load(dptr, mask=dmask, other=0.0)
    gl.store(dptr, g, mask=dmask)
    i = R0 + gl.arange(0, M, layout=gl.SliceLayout(1, L))
    n = n0 + gl.arange(0, NB, layout=gl.SliceLayout(0, L))
    orow = (((b * S * R + c * CR + i) * H + h) * N)[:, None]
    dx1 = cs * d1 + sn * d2
    if DIAG:
        dx1 += _diag_block(GDB_S, Y, YBIAS, b, h, hq, c, bhc, n, S, G, N, C, R, L, M, SIDE_Q, R0)
    gl.store(DX + orow + n[None, :], dx1.to(DX.dtype.element_ty), mask=(i < CR)[:, None])
    dx2 = cs * d2 - sn * d1
    if DIAG:
        dx2 += _diag_block(GDB_S, Y, YBIAS, b, h, hq, c, bhc, n + N // 2, S, G, N, C, R, L, M, SIDE_Q, R0)
    gl.store(DX + orow + (n + N // 2)[None, :], dx2.to(DX.dtype.element_ty), mask=(i < CR)[:, None])


@gluon.jit
def finish_pair_parts(d12_s, own_box, par_box, DX, DANG, GDB_S, Y, YBIAS, XBIAS, COS_S, SIN_S, b, h, hq, c, bhc, n0,
                      S, H, G, RD, N: gl.constexpr, C: gl.constexpr, R: gl.constexpr, PARTS: gl.constexpr,
                      SIDE_Q: gl.constexpr, ADD: gl.constexpr, DIAG: gl.constexpr):
    """:func:`finish_pair` on a pair whose rotated-domain rows are in shared memory (``d12_s``
    [2, M, NB]: the first-half block's, then its partners'; each thread's stores are behind a
    barrier here), taken on PARTS parts of their rows in turn, each part's operands that share of
    the registers, in a layout of up to 4 consecutive columns a thread: the pre-rotation rows from
    the pair's TMA boxes ``own_box`` (the partners' block, at column n0) and ``par_box`` (the
    first-half block), bias XBIAS, the pre kernel's cos / sin. The pair's first block is at column
    n0 - N/2. Ends with a barrier: the buffers and boxes may be written again."""
    M: gl.constexpr = d12_s.shape[1]
    NB: gl.constexpr = d12_s.shape[2]
    HM: gl.constexpr = M // PARTS
    V: gl.constexpr = min(4, HM * NB // 128)  # consecutive columns a thread
    FL: gl.constexpr = gl.BlockedLayout([1, V], [32 // (NB // V), NB // V], [4, 1], [1, 0])
    cta_barrier()
    for part in gl.static_range(PARTS):
        _finish_part(d12_s, own_box, par_box, DX, DANG, GDB_S, Y, YBIAS, XBIAS, COS_S, SIN_S, b, h, hq, c, bhc, n0,
                     S, H, G, RD, N, C, R, FL, SIDE_Q, ADD, DIAG, part * HM, HM)
    cta_barrier()


@gluon.jit
def _finish_part(d12_s, own_box, par_box, DX, DANG, GDB_S, Y, YBIAS, XBIAS, COS_S, SIN_S, b, h, hq, c, bhc, n0,
                 S, H, G, RD, N: gl.constexpr, C: gl.constexpr, R: gl.constexpr, FL: gl.constexpr,
                 SIDE_Q: gl.constexpr, ADD: gl.constexpr, DIAG: gl.constexpr, R0: gl.constexpr, HM: gl.constexpr):
    """:func:`finish_pair_parts` on the rows [R0, R0 + HM)."""
    x, xp, cs, sn = rotation_parts(own_box.slice(R0, HM, dim=0).load(FL), par_box.slice(R0, HM, dim=0).load(FL),
                                   XBIAS, COS_S, SIN_S, b, h, c, n0, S, H, RD, N, C, R, FL, R0)
    finish_pair(DX, DANG, GDB_S, Y, YBIAS, d12_s.index(0).slice(R0, HM, dim=0).load(FL),
                d12_s.index(1).slice(R0, HM, dim=0).load(FL), xp, x, cs, sn, b, h, hq, c, bhc, n0 - N // 2,
                S, H, G, RD, N, C, R, FL, SIDE_Q, ADD, DIAG, R0)


def input_rows(t, meta, block: list[int]):
    """A TMA descriptor of the 16-bit q or k input [B, S, R, G, N] as rows [B*S*R, G*N] in
    ``block`` boxes: a chunk's fused rows t*R + r of head group hq are the box at row
    (b*S + c*C)*R, column hq*N + n (rotated_rows' own / partner columns)."""
    return row_blocks(t, meta.G * meta.N, block)


@gluon.jit
def rotary_partner_col(hq, n0, N: gl.constexpr):
    """The TMA column of the rotary partners of the block at column n0 of head group hq's N."""
    return (hq * N + (n0 + N // 2) % N).to(gl.int32)


@gluon.jit
def ring_barriers(SLOTS: gl.constexpr = 2):
    """The mbarriers of a TMA ring of SLOTS slots (slot j % SLOTS for step j, waited with phase
    (j // SLOTS) % 2), initialized for one arrival each: the expect-tx of the step's copies."""
    bars = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(SLOTS):
        mbarrier.init(bars.index(s), count=1)
    return bars


@gluon.jit
def release_ring(bars, SLOTS: gl.constexpr = 2):
    for s in gl.static_range(SLOTS):
        mbarrier.invalidate(bars.index(s))


def row_blocks(t: torch.Tensor, cols: int, block: list[int], swizzle: int | None = None) -> TensorDescriptor:
    """A TMA descriptor of contiguous ``t`` viewed as [numel / cols, cols], in ``block`` boxes
    (shared layout: the default NVMMA swizzle for the box, or ``swizzle`` bytes where that is
    narrower than the box's rows: Triton then copies the box as column slices that wide)."""
    flat = t.view(-1, cols)
    return TensorDescriptor(flat, list(flat.shape), [cols, 1], block, _box_layout(tuple(block), t.dtype, swizzle))


@functools.lru_cache(maxsize=None)
def _box_layout(block: tuple, dtype: torch.dtype, swizzle: int | None = None):
    """The NVMMA shared layout of a ``block`` box, the default or one of ``swizzle`` bytes where
    that is narrower (formed once: per launch it cost the host more than the descriptor)."""
    default = gl.NVMMASharedLayout.get_default_for(list(block), GL_DTYPES[dtype])
    if swizzle is None or swizzle >= default.swizzle_byte_width:
        return default
    return gl.NVMMASharedLayout(swizzle, default.element_bitwidth, len(block))
