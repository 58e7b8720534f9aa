"""The reverse scan and state_terms as one Gluon kernel (Hopper, sm_90 only; no interpreter).

stage32's scan walks the chunks of each (b, h) in place over the increments the aux stored in
DST ([B, H, nc, N, P] fp32), leaving there the dstates each chunk sees, which state_terms then
reads back per (b, h, chunk): the [N, P] rows pass through HBM three times between the two kernels
(the scan's read and write, state_terms' read: 0.8 GB on N128_P64_R4_C16, 3.2 GB on
N128_P128_R4_C8, where the scan alone took 194 and 770 us on an H100).

Here one program per (b, h, group of N rows) walks the chunks in reverse and keeps its rows of
dstates on chip (shared memory, fp32): at each chunk, for each of its blocks of BNB rows, the
block's dstates (the gradient w.r.t. the state leaving the chunk) goes into state_terms' products
exactly as terms_gluon stages it (split into TF32 parts, both orientations), and is then advanced
to the previous chunk's, ds * decay_c + the chunk's increment (the scan's step, elementwise, off
the products' path). The increments, the cached states and the k and dK rows of each step arrive
by TMA one step ahead, as in terms_gluon.

What state_terms sums over N is split over the groups: ks dstates (dPsiV's dstates term: DV,
DMIMO_V), DDA_CS_REV, DFACTOR and DDA. Each program stores its group's part per chunk to fp32
scratch (:data:`PART_NAMES`) and ``stage33_statewalk``'s finish kernel adds them (the first group
adds the aux's chunk-local dPsiV): no atomics, the sums in a fixed order. dK's rotated-domain rows
(DKR) are per N column and stored by the program that owns them, as terms_gluon stores them.

Written for one chunk of C*R = 64 fused rows per step (a warpgroup's wgmma rows), P = 32, 64 or
128, N a multiple of the group's rows (:func:`supported`).
"""
from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.bwd_bwd.gluon_common import (
    WG_ROWS, cta_barrier, release_ring, ring_barriers, row_blocks, tf32_split, tma_load,
)
from mamba3_perf.kernels.bwd_bwd.terms_gluon import _products, _stage_dstates, _wait_products

# the per-group scratch parts the finish kernel sums, each [NG, ...] fp32: DV rows [B*H*nc, C, P],
# DMIMO_V parts [B*H*nc, R, P], DDA_CS_REV and DFACTOR per step [B*H*S], DDA per chunk [B*H*nc]
PART_NAMES = ("DVP", "DMVW", "DREVP", "DFACP", "DDAP")


@gluon.jit
def _issue_walk(inc_desc, st_desc, kr_desc, dks_desc, bar, inc_buf, st_buf, kr_buf, dks_buf, slot, k, bh, g, nc,
                N: gl.constexpr, CR: gl.constexpr, BNB: gl.constexpr, NBPP: gl.constexpr):
    """Walk step k's copies into ring slot ``slot``: chunk nc - 1 - k // NBPP, the program's block
    k % NBPP of group g: that chunk's increment and cached-state blocks [BNB, P] and its k and dK
    rows [CR, BNB] at the block's columns."""
    c = nc - 1 - k // NBPP
    n0 = (g * NBPP + k % NBPP) * BNB
    bhc = bh * nc + c
    row_s = (bhc * N + n0).to(gl.int32)
    row_k = (bhc * CR).to(gl.int32)
    mbarrier.expect(bar, inc_desc.block_type.nbytes + st_desc.block_type.nbytes
                    + kr_desc.block_type.nbytes + dks_desc.block_type.nbytes)
    tma_load(inc_desc, [row_s, 0], bar, inc_buf.index(slot))
    tma_load(st_desc, [row_s, 0], bar, st_buf.index(slot))
    tma_load(kr_desc, [row_k, n0.to(gl.int32)], bar, kr_buf.index(slot))
    tma_load(dks_desc, [row_k, n0.to(gl.int32)], bar, dks_buf.index(slot))


@gluon.jit(do_not_specialize=["ZERO"])  # the runtime zero of gluon_common.at_step: never a constant
def bwd_bwd_state_walk_gluon_kernel(
    inc_desc, st_desc, kr_desc, dks_desc,  # TMA: DST [B*H*nc*N, P], states alike, KR / DKS [B*H*nc*CR, N]
    V, MV, TS_S, EREV_S, DECAY_S, DKR_S,  # v [B,S,H,P], mimo_v [H,R,P], per step [B,H,S], per chunk [B,H,nc]
    DVP, DMVW, DREVP, DFACP, DDAP,  # the group parts (PART_NAMES)
    S, H, BH, ZERO,
    N: gl.constexpr, P: gl.constexpr, C: gl.constexpr, R: gl.constexpr, BNB: gl.constexpr, NG: gl.constexpr,
    TL: gl.constexpr, RING: gl.constexpr, num_warps: gl.constexpr,
):
    """Program (b, h, g): the reverse scan over the chunks on the group's N rows and, at each
    chunk, state_terms' products on them (terms_gluon's kernel with CP = 1, its non-pipelined walk;
    TL as there), the N sums stored as this group's parts."""
    CR: gl.constexpr = C * R  # fused rows of a chunk: WG_ROWS
    NBPP: gl.constexpr = N // (BNB * NG)  # blocks per program
    pid = gl.program_id(0).to(gl.int64)
    bh = pid // NG
    g = pid % NG
    b = bh // H
    h = bh % H
    nc = S // C

    ROW: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [num_warps, 1], [1, 0])
    MK: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BNB, 8])
    MP: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, P, 8])
    AK: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MP, k_width=1)
    DSL: gl.constexpr = gl.BlockedLayout([BNB // num_warps, 1], [1, 32], [num_warps, 1], [1, 0]) if TL else ROW

    i_r = gl.arange(0, CR, layout=gl.SliceLayout(1, ROW))
    p_r = gl.arange(0, P, layout=gl.SliceLayout(0, ROW))
    psi_ptr = MV + (h * R + (i_r % R)[:, None]) * P + p_r[None, :]  # mimo_v per fused row
    i_k = gl.arange(0, CR, layout=gl.SliceLayout(1, MK))
    n_k = gl.arange(0, BNB, layout=gl.SliceLayout(0, MK))
    i_p = gl.arange(0, CR, layout=gl.SliceLayout(1, MP))

    PS_L: gl.constexpr = gl.NVMMASharedLayout.get_default_for([CR, P], gl.float32)
    psiv_hi_s = gl.allocate_shared_memory(gl.float32, [CR, P], PS_L)
    psiv_lo_s = gl.allocate_shared_memory(gl.float32, [CR, P], PS_L)
    inc_buf = gl.allocate_shared_memory(gl.float32, [RING, BNB, P], inc_desc.layout)
    st_buf = gl.allocate_shared_memory(st_desc.dtype, [RING, BNB, P], st_desc.layout)
    kr_buf = gl.allocate_shared_memory(gl.float32, [RING, CR, BNB], kr_desc.layout)
    dks_buf = gl.allocate_shared_memory(gl.float32, [RING, CR, BNB], dks_desc.layout)
    bars = ring_barriers(RING)
    DSN_L: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BNB, P], gl.float32)
    DST_L: gl.constexpr = gl.NVMMASharedLayout.get_default_for([P, BNB], gl.float32)
    dsh_s = gl.allocate_shared_memory(gl.float32, [1, BNB, P], DSN_L)
    dsl_s = gl.allocate_shared_memory(gl.float32, [1, BNB, P], DSN_L)
    dsth_s = gl.allocate_shared_memory(gl.float32, [1, P, BNB], DST_L)
    dstl_s = gl.allocate_shared_memory(gl.float32, [1, P, BNB], DST_L)
    # the group's dstates rows, block by block, read and written by each thread in DSL (no sharing)
    RUN_L: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    run_s = gl.allocate_shared_memory(gl.float32, [NBPP, BNB, P], RUN_L)
    for j in gl.static_range(NBPP):
        run_s.index(j).store(gl.zeros([BNB, P], gl.float32, DSL))

    STEPS = nc * NBPP
    for k0 in gl.static_range(RING - 1):
        if k0 < STEPS:
            _issue_walk(inc_desc, st_desc, kr_desc, dks_desc, bars.index(k0), inc_buf, st_buf, kr_buf, dks_buf, k0,
                        k0, bh, g, nc, N, CR, BNB, NBPP)

    for cc in range(nc):
        c = nc - 1 - cc
        bhc = bh * nc + c
        # the chunk's PsiV parts (the last chunk's wgmma all waited for in its last step)
        t_r = c * C + i_r // R
        v_ptr = V + ((b * S + t_r[:, None]) * H + h) * P + p_r[None, :]
        psiv_hi, psiv_lo = tf32_split(gl.load(v_ptr).to(gl.float32) * gl.load(psi_ptr))
        cta_barrier()
        psiv_hi_s.store(psiv_hi)
        psiv_lo_s.store(psiv_lo)
        t_k = c * C + i_k // R
        ts = gl.load(TS_S + bh * S + t_k)
        erev = gl.load(EREV_S + bh * S + t_k)
        decay = gl.load(DECAY_S + bhc)
        acc = gl.zeros([CR, P], gl.float32, MP)
        acc_rev = gl.zeros([CR, BNB], gl.float32, MK)
        acc_fac = gl.zeros([CR, BNB], gl.float32, MK)
        acc_dda = gl.zeros([BNB, P], gl.float32, DSL)
        for jj in range(NBPP):
            k = cc * NBPP + jj
            slot = k % RING
            if k + RING - 1 < STEPS:
                cta_barrier()  # every warp is done reading the slot the next copy fills (step k - 1's)
                _issue_walk(inc_desc, st_desc, kr_desc, dks_desc, bars.index((k + RING - 1) % RING), inc_buf,
                            st_buf, kr_buf, dks_buf, (k + RING - 1) % RING, k + RING - 1, bh, g, nc, N, CR, BNB, NBPP)
            mbarrier.wait(bars.index(slot), (k // RING) % 2)
            run_j = run_s.index(jj)
            ds = run_j.load(DSL)  # the gradient w.r.t. the state leaving chunk c, this block's rows
            _stage_dstates(ds, dsh_s.index(0), dsl_s.index(0), dsth_s.index(0), dstl_s.index(0))
            kr = kr_buf.index(slot).load(MK)
            ks = kr * ts[:, None]
            ks_hi, ks_lo = tf32_split(ks)
            a_hi = gl.convert_layout(ks_hi, AK)
            a_lo = gl.convert_layout(ks_lo, AK)
            fence_async_shared()
            cta_barrier()
            dk, dk2, acc = _products(psiv_hi_s, psiv_lo_s, dsh_s, dsl_s, dsth_s, dstl_s, 0, k * ZERO, a_hi, a_lo,
                                     a_hi, a_lo, acc, 1, True, MK)
            # while they run: DDA's term and the scan's step to the state entering chunk c
            acc_dda += st_buf.index(slot).load(DSL).to(gl.float32) * ds
            run_j.store(ds * decay + inc_buf.index(slot).load(DSL))
            dks_in = dks_buf.index(slot).load(MK)
            dk, acc = _wait_products(dk, dk2, acc, i_k, CR, 1)
            dks = dks_in + dk * erev[:, None]
            n0 = (g * NBPP + jj) * BNB
            gl.store(DKR_S + (bhc * CR + i_k[:, None]) * N + (n0 + n_k)[None, :], dks * ts[:, None])
            acc_rev += ks * dk
            acc_fac += kr * dks
        # the chunk's parts of what state_terms sums over N
        erev_p = gl.load(EREV_S + bh * S + c * C + i_p // R)
        dpsiv = gl.convert_layout(acc * erev_p[:, None], ROW)  # this group's dstates term of dPsiV
        dv = gl.sum(gl.reshape(dpsiv * gl.load(psi_ptr), [C, R, P]), axis=1)  # loaded again: not held
        # across the walk (255 registers and spills where held)
        t_v = gl.arange(0, C, layout=gl.SliceLayout(1, dv.type.layout))
        p_v = gl.arange(0, P, layout=gl.SliceLayout(0, dv.type.layout))
        part = g * BH * nc + bhc  # this group's row of a [NG, B*H*nc, ...] part
        gl.store(DVP + (part * C + t_v[:, None]) * P + p_v[None, :], dv)
        dmv = gl.sum(gl.reshape(dpsiv * gl.load(v_ptr).to(gl.float32), [C, R, P]), axis=0)
        r_m = gl.arange(0, R, layout=gl.SliceLayout(1, dmv.type.layout))
        p_m = gl.arange(0, P, layout=gl.SliceLayout(0, dmv.type.layout))
        gl.store(DMVW + (part * R + r_m[:, None]) * P + p_m[None, :], dmv)
        drev = gl.sum(gl.reshape(gl.sum(acc_rev, axis=1), [C, R]), axis=1)
        dfac = gl.sum(gl.reshape(gl.sum(acc_fac, axis=1), [C, R]), axis=1)
        t_s = gl.arange(0, C, layout=drev.type.layout)
        gl.store(DREVP + part * C + t_s, drev)
        t_f = gl.arange(0, C, layout=dfac.type.layout)
        gl.store(DFACP + part * C + t_f, dfac)
        gl.store(DDAP + part, decay * gl.sum(gl.sum(acc_dda, axis=1), axis=0))
    release_ring(bars, RING)


# knob: N groups per (b, h) (the kernel's NG: B*H*NG programs, each walking N / NG rows), None:
# :func:`groups`' rule
GROUPS: int | None = None
# knob: slots of the walk's TMA ring (2: each step's copies issued one step ahead)
RING: int = 2
BNB = 16  # N rows per step: terms_gluon's block at one warpgroup


def groups(meta) -> int:
    """NG: the most groups, up to 4 (B*H*4 programs: 256 on the official grid, two per SM of 132),
    that leave each a whole number of BNB-row blocks; :data:`GROUPS` where set."""
    if GROUPS:
        return GROUPS
    blocks = meta.N // BNB
    return max(d for d in (1, 2, 4) if blocks % d == 0)


def supported(meta) -> bool:
    """The shapes this kernel is written for: C*R = 64 fused rows, P = 32, 64 or 128, N a multiple
    of BNB * NG."""
    return (meta.C * meta.R == WG_ROWS and meta.P in (32, 64, 128) and meta.N % BNB == 0
            and meta.N % (BNB * groups(meta)) == 0)


def alloc_parts(meta, ng: int, device) -> dict:
    """The group parts (:data:`PART_NAMES`), views of one fp32 allocation (every element written
    by the walk before the finish kernel reads it)."""
    bhc = meta.B * meta.H * meta.nchunks
    shapes = {"DVP": (ng, bhc, meta.C, meta.P), "DMVW": (ng, bhc, meta.R, meta.P),
              "DREVP": (ng, bhc, meta.C), "DFACP": (ng, bhc, meta.C), "DDAP": (ng, bhc)}
    sizes = [int(torch.Size(shapes[n]).numel()) for n in PART_NAMES]
    flat = torch.empty(sum(sizes), dtype=torch.float32, device=device)
    return {n: part.view(shapes[n]) for n, part in zip(PART_NAMES, flat.split(sizes))}


def launch_state_walk(x: dict, s: dict, meta, parts: dict, *, transpose_layouts: bool = True) -> None:
    """The walk over DST's increments (the aux's), storing DKR and the group ``parts``
    (:func:`alloc_parts` with :func:`groups`' NG)."""
    ng = groups(meta)
    cr = meta.C * meta.R
    launching.launch(bwd_bwd_state_walk_gluon_kernel, (meta.B * meta.H * ng,))(
        row_blocks(s["DST"], meta.P, [BNB, meta.P]), row_blocks(x["states"], meta.P, [BNB, meta.P]),
        row_blocks(s["KR"], meta.N, [cr, BNB]), row_blocks(s["DKS"], meta.N, [cr, BNB]),
        x["v"], x["mimo_v"], s["TS"], s["EREV"], s["DECAY"], s["DKR"],
        *(parts[n] for n in PART_NAMES),
        meta.S, meta.H, meta.B * meta.H, 0,
        N=meta.N, P=meta.P, C=meta.C, R=meta.R, BNB=BNB, NG=ng, TL=transpose_layouts, RING=RING, num_warps=4,
    )
