"""state_terms in Gluon: the same chunk's dstates-dependent terms and value side as
stage6_statepass.bwd_bwd_state_terms_kernel, with its operands staged on chip by hand (Hopper,
sm_90 only; no interpreter: Gluon kernels compile for a GPU target or not at all).

Per (b, h, chunk) program, one warpgroup. PsiV (from v and mimo_v) is split once into its TF32
high and low parts and kept in shared memory as the A operand of dK_raw = PsiV dstates^T. The N
walk runs in blocks of BNB rows; each block's dstates, states, k rows and dK rows arrive by TMA
into a two-slot ring, the next block's copy in flight while this block computes. The block's
dstates, split into high and low parts, is written twice to shared memory (as [BNB, P] for
dK_raw, whose K is P, and transposed for ks dstates, whose K is BNB: TF32 wgmma reads only
K-major operands), and the six TF32 wgmma of the two products (tf32x3: lo.hi, hi.lo, hi.hi, as
common.fdot) are issued asynchronously while the block's DDA term is formed. Inside
common.split_bf16x3 (stage37_bf16split) the parts are bf16 instead (the kernel's BF16): three bf16
wgmma a product, bf16 shared operands.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, warpgroup_mma_wait,
)

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.bwd_bwd import gluon_common
from mamba3_perf.kernels.bwd_bwd.common import SPLIT_BF16X3, dot_precision
from mamba3_perf.kernels.bwd_bwd.gluon_common import (
    WG_ROWS, at_step, block_col, chunk_coords, cta_barrier, dot3, finish_pair, finish_pair_parts, input_rows,
    release_ring, ring_barriers, rotary_partner_col, rotated_rows, rotation_parts, row_blocks, split_format, split_parts, tma_load,
)


@gluon.jit
def _issue_states(dst_desc, st_desc, bar, ds_buf, st_buf, slot, row_s, col, N: gl.constexpr, CP: gl.constexpr,
                  STG: gl.constexpr):
    """The dstates and states blocks of the program's CP chunks (rows N apart) into ring slot
    ``slot`` (buffers [2 * CP, BNB, P]: slot s, chunk k at s * CP + k); with STG the dstates only
    (the walk loads the states from global memory)."""
    for k in gl.static_range(CP):
        tma_load(dst_desc, [row_s + k * N + col, 0], bar, ds_buf.index(slot * CP + k))
        if not STG:
            tma_load(st_desc, [row_s + k * N + col, 0], bar, st_buf.index(slot * CP + k))


@gluon.jit
def _issue_block(dst_desc, st_desc, kr_desc, dks_desc, bar, ds_buf, st_buf, kr_s, dks_s, slot, row_s, row_k, col,
                 N: gl.constexpr, CP: gl.constexpr, STG: gl.constexpr):
    ST_BYTES: gl.constexpr = 0 if STG else st_desc.block_type.nbytes
    nbytes: gl.constexpr = (CP * (dst_desc.block_type.nbytes + ST_BYTES)
                            + kr_desc.block_type.nbytes + dks_desc.block_type.nbytes)
    mbarrier.expect(bar, nbytes)
    _issue_states(dst_desc, st_desc, bar, ds_buf, st_buf, slot, row_s, col, N, CP, STG)
    tma_load(kr_desc, [row_k, col], bar, kr_s)
    tma_load(dks_desc, [row_k, col], bar, dks_s)


@gluon.jit
def _issue_block_rot(dst_desc, st_desc, kr_desc, dks_desc, bar, ds_buf, st_buf, kr_s, krp_s, dks_s, slot, row_s,
                     row_k, col, row_x, xcol, pcol, N: gl.constexpr, CP: gl.constexpr, STG: gl.constexpr):
    """_issue_block with the k rows from the 16-bit input: the block and its rotary partners."""
    ST_BYTES: gl.constexpr = 0 if STG else st_desc.block_type.nbytes
    nbytes: gl.constexpr = (CP * (dst_desc.block_type.nbytes + ST_BYTES)
                            + 2 * kr_desc.block_type.nbytes + dks_desc.block_type.nbytes)
    mbarrier.expect(bar, nbytes)
    _issue_states(dst_desc, st_desc, bar, ds_buf, st_buf, slot, row_s, col, N, CP, STG)
    tma_load(kr_desc, [row_x, xcol], bar, kr_s)
    tma_load(kr_desc, [row_x, pcol], bar, krp_s)
    tma_load(dks_desc, [row_k, col], bar, dks_s)


@gluon.jit
def _stage_dstates(ds, dsh_s, dsl_s, dsth_s, dstl_s, BF16: gl.constexpr):
    """One chunk's dstates block split into its TF32 (BF16: bf16) parts, written as the B operands
    of both products: [BNB, P] for dK_raw (K = P) and transposed for ks dstates (K = BNB)."""
    ds_hi, ds_lo = split_parts(ds, BF16)
    dsh_s.store(ds_hi)
    dsl_s.store(ds_lo)
    dsth_s.store(gl.permute(ds_hi, (1, 0)))
    dstl_s.store(gl.permute(ds_lo, (1, 0)))


@gluon.jit
def _chunk_rows(x, first: gl.constexpr, i, CR: gl.constexpr):
    """x's rows of the program's first chunk (``first``) or of its second, the rest 0."""
    if first:
        y = gl.where((i < CR)[:, None], x, 0.0)
    else:
        y = gl.where((i < CR)[:, None], 0.0, x)
    return y


@gluon.jit
def _issue_step(dst_desc, st_desc, kr_desc, dks_desc, bar, ds_buf, st_buf, kr_buf, krp_buf, dks_buf, slot, row_s, row_k,
                n, row_x, col0, hq, N: gl.constexpr, CP: gl.constexpr, ROT: gl.constexpr, STG: gl.constexpr):
    """The copies of the N walk's block at column n into ring slot ``slot``: _issue_block, or with
    ROT _issue_block_rot (``krp_buf``, ``row_x``, ``col0``, ``hq`` read only then); with STG no
    states block."""
    if ROT:
        _issue_block_rot(dst_desc, st_desc, kr_desc, dks_desc, bar, ds_buf, st_buf, kr_buf.index(slot),
                         krp_buf.index(slot), dks_buf.index(slot), slot, row_s, row_k, n, row_x, col0 + n,
                         rotary_partner_col(hq, n, N), N, CP, STG)
    else:
        _issue_block(dst_desc, st_desc, kr_desc, dks_desc, bar, ds_buf, st_buf, kr_buf.index(slot),
                     dks_buf.index(slot), slot, row_s, row_k, n, N, CP, STG)


@gluon.jit
def _block_k(kr_buf, krp_buf, slot, KBIAS, COS_S, SIN_S, b, h, cp, n0, S, H, RD, N: gl.constexpr,
             CC: gl.constexpr, R: gl.constexpr, MK: gl.constexpr, ROT: gl.constexpr):
    """The step's k rows [M, BNB] in the dK layout: from ring slot ``slot``, rotated with ROT."""
    if ROT:
        kr = rotated_rows(kr_buf.index(slot).load(MK), krp_buf.index(slot).load(MK), KBIAS, COS_S, SIN_S,
                          b, h, cp, n0, S, H, RD, N, CC, R, MK)
    else:
        kr = kr_buf.index(slot).load(MK)
    return kr


@gluon.jit
def _stage_step(ds_buf, st_buf, kr_buf, krp_buf, slot, o, dsh_s, dsl_s, dsth_s, dstl_s, acc_dda, acc_dda2, ts, i_k,
                KBIAS, COS_S, SIN_S, b, h, cp, n0, S, H, RD, N: gl.constexpr, C: gl.constexpr, CC: gl.constexpr,
                R: gl.constexpr, CP: gl.constexpr, ROT: gl.constexpr, DSL: gl.constexpr, MK: gl.constexpr,
                DDA_FIRST: gl.constexpr, BF16: gl.constexpr):
    """A step's staging from ring slot ``slot``: each chunk's dstates block split into the operand
    buffers at ``o`` (+1) and its DDA term added (the first chunk's only with DDA_FIRST: else the
    caller adds it, from the returned block, once the products are issued), the k rows and ks
    (the A operands of ks dstates are :func:`_step_a`'s). Returns (kr, ks, acc_dda, acc_dda2, ds)."""
    ds = ds_buf.index(slot * CP).load(DSL)
    _stage_dstates(ds, dsh_s.index(o), dsl_s.index(o), dsth_s.index(o), dstl_s.index(o), BF16)
    if DDA_FIRST:
        acc_dda += st_buf.index(slot * CP).load(DSL).to(gl.float32) * ds
    if CP == 2:
        ds2 = ds_buf.index(slot * CP + 1).load(DSL)
        _stage_dstates(ds2, dsh_s.index(o + 1), dsl_s.index(o + 1), dsth_s.index(o + 1), dstl_s.index(o + 1), BF16)
        acc_dda2 += st_buf.index(slot * CP + 1).load(DSL).to(gl.float32) * ds2
    kr = _block_k(kr_buf, krp_buf, slot, KBIAS, COS_S, SIN_S, b, h, cp, n0, S, H, RD, N, CC, R, MK, ROT)
    ks = kr * ts[:, None]
    return kr, ks, acc_dda, acc_dda2, ds


@gluon.jit
def _step_a(ks, i_k, CR: gl.constexpr, CP: gl.constexpr, AK: gl.constexpr, BF16: gl.constexpr):
    """The A operands of ks dstates, in registers, from ks's TF32 parts: (a_hi, a_lo, a2_hi,
    a2_lo), with CP = 2 the first chunk's rows and then the second's (the other chunk's rows 0);
    with CP = 1 all rows, twice. A wgmma reads its register operands until it is waited for, so
    the next step's are formed only after that wait (PTX: wgmma.mma_async's A registers may not be
    written before its wgmma.wait_group; in a loop each step's are the same registers)."""
    ks_hi, ks_lo = split_parts(ks, BF16)
    if CP == 2:
        a_hi = gl.convert_layout(_chunk_rows(ks_hi, True, i_k, CR), AK)
        a_lo = gl.convert_layout(_chunk_rows(ks_lo, True, i_k, CR), AK)
        a2_hi = gl.convert_layout(_chunk_rows(ks_hi, False, i_k, CR), AK)
        a2_lo = gl.convert_layout(_chunk_rows(ks_lo, False, i_k, CR), AK)
    else:
        a_hi = gl.convert_layout(ks_hi, AK)
        a_lo = gl.convert_layout(ks_lo, AK)
        a2_hi = a_hi
        a2_lo = a_lo
    return a_hi, a_lo, a2_hi, a2_lo


@gluon.jit
def _products(psiv_hi_s, psiv_lo_s, dsh_s, dsl_s, dsth_s, dstl_s, o, z, a_hi, a_lo, a2_hi, a2_lo, acc,
              CP: gl.constexpr, DYN: gl.constexpr, MK: gl.constexpr):
    """The step's wgmma, issued: dK_raw = PsiV dstates^T and acc += ks dstates for each of the CP
    chunks, the split dstates at ``o`` (+1: the second chunk's) of the operand buffers; PsiV's
    views through gluon_common.at_step (``z``, DYN). Returns (dk, dk2, acc): dk2 the second
    chunk's dK_raw (CP = 1: dk)."""
    M: gl.constexpr = psiv_hi_s.shape[0]
    BNB: gl.constexpr = dsh_s.shape[1]
    ps_hi = at_step(psiv_hi_s, z, DYN)
    ps_lo = at_step(psiv_lo_s, z, DYN)
    dk = dot3(ps_hi, ps_lo, dsh_s.index(o).permute((1, 0)), dsl_s.index(o).permute((1, 0)),
              gl.zeros([M, BNB], gl.float32, MK), False)
    acc = dot3(a_hi, a_lo, dsth_s.index(o).permute((1, 0)), dstl_s.index(o).permute((1, 0)), acc, True)
    if CP == 2:
        dk2 = dot3(ps_hi, ps_lo, dsh_s.index(o + 1).permute((1, 0)), dsl_s.index(o + 1).permute((1, 0)),
                   gl.zeros([M, BNB], gl.float32, MK), False)
        acc = dot3(a2_hi, a2_lo, dsth_s.index(o + 1).permute((1, 0)), dstl_s.index(o + 1).permute((1, 0)),
                   acc, True)
    else:
        dk2 = dk
    return dk, dk2, acc


@gluon.jit
def _wait_products(dk, dk2, acc, i_k, CR: gl.constexpr, CP: gl.constexpr):
    """Wait for :func:`_products`' wgmma: (dK_raw, each row its own chunk's; acc)."""
    if CP == 2:
        dk, dk2, acc = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dk2, acc))
        dk = gl.where((i_k < CR)[:, None], dk, dk2)
    else:
        dk, acc = warpgroup_mma_wait(num_outstanding=0, deps=(dk, acc))
    return dk, acc


@gluon.jit
def _finish_step(j, dk, dk2, acc, ks, kr, dks_buf, erev, ts, d1, d1_s, acc_rev, acc_fac, kr_buf, krp_buf, slot, n0, i_k, n_k,
                 DKR_S, DK, DANG, GDB_S, Q, QBIAS, KBIAS, COS_S, SIN_S, b, h, hq, cp, bhcp, bhc, S, H, G, RD,
                 N: gl.constexpr, C: gl.constexpr, CC: gl.constexpr, R: gl.constexpr, MK: gl.constexpr,
                 FIN: gl.constexpr, ADD_DANG: gl.constexpr, CP: gl.constexpr, FOLD: gl.constexpr,
                 D1S: gl.constexpr):
    """Step j's end: its wgmma waited (:func:`_wait_products`), the dK rows (dks) stored for the
    post kernel, or (FIN) finished on each rotary pair of blocks (the first-half block's rows held
    in d1 until its partners come, their pre-rotation rows formed again from ring slot ``slot``);
    the DDA_CS_REV and DFACTOR sums; with D1S = 1 the first-half block's rows held in the shared
    buffer ``d1_s`` instead (``d1`` passed through), with D1S = 2 or 4 both blocks' rows put there
    ([2, M, BNB]) and the pair finished on D1S parts of its rows in turn
    (gluon_common.finish_pair_parts). Returns (d1, acc_rev, acc_fac, acc)."""
    dks_in = dks_buf.index(slot).load(MK)
    dk, acc = _wait_products(dk, dk2, acc, i_k, C * R, CP)
    dks = dks_in + dk * erev[:, None]
    # the sums first: ks, kr and dk then free for the finishing's registers
    acc_rev += gl.sum(ks * dk, axis=1)
    acc_fac += gl.sum(kr * dks, axis=1)
    if FIN:
        if j % 2 == 0:
            if D1S > 1:  # read back by other threads in the parts' layout: a barrier before
                d1_s.index(0).store(dks * ts[:, None])
            elif D1S == 1:  # each thread reads back only what it stored: no barrier
                d1_s.store(dks * ts[:, None])
            else:
                d1 = dks * ts[:, None]
        elif D1S > 1:  # both blocks through shared memory, finished on D1S parts of their rows
            d1_s.index(1).store(dks * ts[:, None])
            finish_pair_parts(d1_s, kr_buf.index(slot), krp_buf.index(slot), DK, DANG, GDB_S, Q, QBIAS, KBIAS, COS_S,
                              SIN_S, b, h, hq, cp, bhcp, n0, S, H, G, RD, N, CC, R, D1S, False, ADD_DANG, not FOLD)
        else:  # this block holds the partners (x2) of the last one's (x1): both finished here; their
            # pre-rotation rows formed again from the boxes (not held in registers across the products)
            if D1S == 1:
                first = d1_s.load(MK)
            else:
                first = d1
            kx, kxp, kcs, ksn = rotation_parts(kr_buf.index(slot).load(MK), krp_buf.index(slot).load(MK), KBIAS,
                                               COS_S, SIN_S, b, h, cp, n0, S, H, RD, N, CC, R, MK)
            finish_pair(DK, DANG, GDB_S, Q, QBIAS, first, dks * ts[:, None], kxp, kx, kcs, ksn, b, h, hq, cp,
                        bhcp, n0 - N // 2, S, H, G, RD, N, CC, R, MK, False, ADD_DANG, not FOLD)
    else:
        gl.store(DKR_S + (bhc * (C * R) + i_k[:, None]) * N + (n0 + n_k)[None, :], dks * ts[:, None],
                 mask=(i_k < CC * R)[:, None])
    return d1, acc_rev, acc_fac, acc


@gluon.jit(do_not_specialize=["ZERO"])  # the runtime zero of gluon_common.at_step: never a constant
def bwd_bwd_state_terms_gluon_kernel(
    dst_desc, st_desc, kr_desc, dks_desc,
    V, MV, TS_S, EREV_S, DECAY_S, DPSIV_S, DKR_S, DMVP_S, DV, DFAC, DDA, DDACSREV,
    KBIAS, COS_S, SIN_S, DK, DANG, GDB_S, Q, QBIAS, STATES,
    S, H, G, RD, ZERO,
    N: gl.constexpr, P: gl.constexpr, C: gl.constexpr, R: gl.constexpr, M: gl.constexpr, BNB: gl.constexpr,
    ROT: gl.constexpr, FIN: gl.constexpr, ADD_DANG: gl.constexpr, FOLD: gl.constexpr, D1S: gl.constexpr,
    CP: gl.constexpr, TL: gl.constexpr,
    PIPE: gl.constexpr, RING: gl.constexpr, STG: gl.constexpr, BF16: gl.constexpr, SD: gl.constexpr,
    KW: gl.constexpr, IK: gl.constexpr, num_warps: gl.constexpr,
):
    """One chunk's dPsiV (+ the dstates term), dK in the rotated domain (DKR), DDA_CS_REV,
    DFACTOR, DDA, DV and its DMIMO_V part, as bwd_bwd_state_terms_kernel with LATE_SUMS. The
    products run on M = 64 rows, a warpgroup's least: where the chunk has C*R = 32 fused rows the
    rows past them are zero (PsiV, ks) or another chunk's (k, dK: the TMA boxes run on), and
    nothing of theirs is stored. ROT: ``kr_desc`` is of the 16-bit k input
    (gluon_common.input_rows) and each block is rotated here (gluon_common.rotated_rows) from it,
    its rotary partners, the bias and the pre kernel's cos / sin, instead of loaded from KR.
    FIN (with ROT): the walk takes each first-half block and then its rotary partners, and
    instead of storing dK's rotated-domain rows (DKR) for the post kernel, finishes dK and
    DANGLES' k half itself on each pair (gluon_common.finish_pair; ADD_DANG: added to the q half
    the aux stored, aux_gluon's FIN). FOLD (with FIN): the aux folded the diagonal term into the
    dK rows it stored (DKS) and DFACTOR's part of the fold into DFAC, negated (aux_gluon's FOLD):
    the finishing forms no diagonal term, and DFACTOR adds what the aux stored. D1S (with FIN;
    :data:`D1_SHARED`): each pair's first-half block of dK rows held in shared memory until its
    partners come, not in registers across the next step's products.

    CP: chunks per program, 1, or 2 where C*R = 32: two chunks adjacent in time fill the M rows,
    every row-indexed load and store the same as for one chunk of 2C steps (their rows are
    adjacent in every buffer), and only what is per chunk taken per chunk: its dstates and states
    blocks (two of each a step), dK_raw (PsiV against each chunk's dstates, the rows of each
    kept), ks dstates (each chunk's ks rows against its dstates), DDA, DMIMO_V's part.

    TL (:data:`TRANSPOSE_LAYOUTS`): each step's dstates (and states) block held in a layout whose
    lanes run along its P columns, each thread BNB / num_warps rows of one column: the block's load
    and its straight copies a 128-byte line per warp, its transposed copies 16 bytes a lane over
    whole lines, all at their ideal shared wavefronts (mamba3_perf.analysis.banks), where the
    ROW layout's transposed copies took 4x.

    PIPE (:data:`PIPELINE`): the walk software-pipelined, each step's wgmma in flight while the
    next step's operands are staged (a second set of the split dstates buffers, a three-slot TMA
    ring; the register A operands formed only after the wait); without it each step stages, issues
    and waits in turn, on a ring of RING slots (:data:`TERMS_RING`).

    STG (:data:`STATES_GLOBAL`; CP = 1, without PIPE): each step's 16-bit states block loaded from
    global memory (``STATES``, the cached states viewed [rows, P]) into registers at the step's
    start, not copied into the TMA ring: the ring's states slots (4 KB at P = 64) are not
    allocated.

    BF16 (stage37_bf16split): the three passes of each product over bf16 parts (gluon_common.
    split_parts), held in SD-typed shared memory (bf16; fp32 for TF32), the A operand's KW and the
    wgmma's IK of that format (gluon_common.split_format)."""
    CR: gl.constexpr = C * R  # fused rows of a chunk
    CC: gl.constexpr = C * CP  # steps of the program's chunks
    MT: gl.constexpr = M // R  # steps of the M rows (CC where CC*R = 64)
    bhcp, bh, b, h, cp = chunk_coords(S, H, CC)
    bhc = bhcp * CP  # the first chunk's
    c = cp * CP

    # one warpgroup per WN column slice of each product (4 warps: one warpgroup, whole rows)
    WN: gl.constexpr = num_warps // 4
    ROW: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [num_warps, 1], [1, 0])
    MK: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WN],
                                                 instr_shape=[16, BNB // WN, IK])
    MP: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WN],
                                                 instr_shape=[16, P // WN, IK])
    AK: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MP, k_width=KW)

    # PsiV rows [CC*R, P] (fused row i = t*R + r) from the 16-bit v and mimo_v
    i_r = gl.arange(0, M, layout=gl.SliceLayout(1, ROW))
    p_r = gl.arange(0, P, layout=gl.SliceLayout(0, ROW))
    t_r = c * C + i_r // R
    row_ok = (i_r < CC * R)[:, None]
    v_ptr = V + ((b * S + t_r[:, None]) * H + h) * P + p_r[None, :]
    psi_ptr = MV + (h * R + (i_r % R)[:, None]) * P + p_r[None, :]
    psiv_hi, psiv_lo = split_parts(gl.load(v_ptr, mask=row_ok, other=0.0).to(gl.float32) * gl.load(psi_ptr), BF16)
    PS_L: gl.constexpr = gl.NVMMASharedLayout.get_default_for([M, P], SD)
    psiv_hi_s = gl.allocate_shared_memory(SD, [M, P], PS_L, psiv_hi)
    psiv_lo_s = gl.allocate_shared_memory(SD, [M, P], PS_L, psiv_lo)

    # per-row step scalars in the dK layout
    i_k = gl.arange(0, M, layout=gl.SliceLayout(1, MK))
    n_k = gl.arange(0, BNB, layout=gl.SliceLayout(0, MK))
    t_k = c * C + i_k // R
    ts = gl.load(TS_S + bh * S + t_k, mask=i_k < CC * R, other=0.0)  # 0 past the chunk: ks rows 0
    erev = gl.load(EREV_S + bh * S + t_k, mask=i_k < CC * R, other=0.0)

    # the TMA ring (each chunk's dstates and states blocks; RING slots (:data:`TERMS_RING`), three with
    # PIPE) and the split dstates operands (one set, two with PIPE)
    SL: gl.constexpr = 3 if PIPE else RING
    OPS: gl.constexpr = 2 if PIPE else 1
    ds_buf = gl.allocate_shared_memory(gl.float32, [SL * CP, BNB, P], dst_desc.layout)
    if STG:
        st_buf = ds_buf  # unread: the states come from global memory
    else:
        st_buf = gl.allocate_shared_memory(st_desc.dtype, [SL * CP, BNB, P], st_desc.layout)
    kr_buf = gl.allocate_shared_memory(kr_desc.dtype, [SL, M, BNB], kr_desc.layout)
    if ROT:
        krp_buf = gl.allocate_shared_memory(kr_desc.dtype, [SL, M, BNB], kr_desc.layout)
    else:
        krp_buf = kr_buf  # unread
    dks_buf = gl.allocate_shared_memory(gl.float32, [SL, M, BNB], dks_desc.layout)
    bars = ring_barriers(SL)
    DSN_L: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BNB, P], SD)
    DST_L: gl.constexpr = gl.NVMMASharedLayout.get_default_for([P, BNB], SD)
    dsh_s = gl.allocate_shared_memory(SD, [OPS * CP, BNB, P], DSN_L)
    dsl_s = gl.allocate_shared_memory(SD, [OPS * CP, BNB, P], DSN_L)
    dsth_s = gl.allocate_shared_memory(SD, [OPS * CP, P, BNB], DST_L)
    dstl_s = gl.allocate_shared_memory(SD, [OPS * CP, P, BNB], DST_L)

    row_s = (bhc * N).to(gl.int32)
    row_k = (bhc * CR).to(gl.int32)
    hq = h // (H // G)
    if ROT:  # k rows of the input viewed [B*S*R, G*N]; columns of head group hq
        row_x = ((b * S + c * C) * R).to(gl.int32)
        col0 = (hq * N).to(gl.int32)
    else:  # unread
        row_x = row_k
        col0 = row_k
    NSTEPS: gl.constexpr = N // BNB
    # the first blocks: SL - 1 (the walk issues step j + SL - 1's at step j), or with PIPE one a slot
    # (it issues step j + SL's into step j's slot once step j is done with it)
    for k in gl.static_range(SL if PIPE else SL - 1):
        if k < NSTEPS:
            _issue_step(dst_desc, st_desc, kr_desc, dks_desc, bars.index(k), ds_buf, st_buf, kr_buf, krp_buf,
                        dks_buf, k, row_s, row_k, block_col(k, BNB, N, FIN), row_x, col0, hq, N, CP, ROT, STG)

    acc = gl.zeros([M, P], gl.float32, MP)
    acc_rev = gl.zeros([M], gl.float32, gl.SliceLayout(1, MK))
    acc_fac = gl.zeros([M], gl.float32, gl.SliceLayout(1, MK))
    # the dstates / states blocks' layout: ROW, or with TL lanes along P (a column's BNB rows split
    # over the warps)
    DSL: gl.constexpr = gl.BlockedLayout([BNB // num_warps, 1], [1, 32], [num_warps, 1], [1, 0]) if TL else ROW
    acc_dda = gl.zeros([BNB, P], gl.float32, DSL)
    if CP == 2:
        acc_dda2 = gl.zeros([BNB, P], gl.float32, DSL)  # the second chunk's
    else:
        acc_dda2 = acc_dda  # unused
    d1 = gl.zeros([M, BNB], gl.float32, MK)  # FIN: the pair's first-half rows, until its partners come
    if FIN and D1S > 1:  # ... or with its partners' in shared memory
        d1_s = gl.allocate_shared_memory(gl.float32, [2, M, BNB], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    elif FIN and D1S == 1:  # ... or in shared memory
        d1_s = gl.allocate_shared_memory(gl.float32, [M, BNB], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    else:
        d1_s = dks_buf  # unread
    if PIPE:
        # step j + 1's operands staged (from ring slot (j + 1) % SL into operand set (j + 1) % 2) while
        # step j's wgmma run; step j + SL's copies issued once step j is done with its slot
        mbarrier.wait(bars.index(0), 0)
        kr, ks, acc_dda, acc_dda2, _ds = _stage_step(
            ds_buf, st_buf, kr_buf, krp_buf, 0, 0, dsh_s, dsl_s, dsth_s, dstl_s, acc_dda, acc_dda2, ts, i_k,
            KBIAS, COS_S, SIN_S, b, h, cp, block_col(0, BNB, N, FIN), S, H, RD, N, C, CC, R, CP, ROT, DSL, MK, True, BF16)
        a_hi, a_lo, a2_hi, a2_lo = _step_a(ks, i_k, C * R, CP, AK, BF16)
        fence_async_shared()
        cta_barrier()
        dk, dk2, acc = _products(psiv_hi_s, psiv_lo_s, dsh_s, dsl_s, dsth_s, dstl_s, 0, ZERO, a_hi, a_lo,
                                 a2_hi, a2_lo, acc, CP, True, MK)
        for j in range(NSTEPS - 1):
            slot = j % SL
            nslot = (j + 1) % SL
            n0 = block_col(j, BNB, N, FIN)
            mbarrier.wait(bars.index(nslot), ((j + 1) // SL) % 2)
            kr_n, ks_n, acc_dda, acc_dda2, _ds = _stage_step(
                ds_buf, st_buf, kr_buf, krp_buf, nslot, ((j + 1) % 2) * CP, dsh_s, dsl_s, dsth_s, dstl_s, acc_dda,
                acc_dda2, ts, i_k, KBIAS, COS_S, SIN_S, b, h, cp, block_col(j + 1, BNB, N, FIN), S, H, RD, N, C,
                CC, R, CP, ROT, DSL, MK, True, BF16)
            d1, acc_rev, acc_fac, acc = _finish_step(
                j, dk, dk2, acc, ks, kr, dks_buf, erev, ts, d1, d1_s, acc_rev, acc_fac, kr_buf, krp_buf, slot, n0, i_k, n_k,
                DKR_S, DK, DANG, GDB_S, Q, QBIAS, KBIAS, COS_S, SIN_S, b, h, hq, cp, bhcp, bhc, S, H, G, RD,
                N, C, CC, R, MK, FIN, ADD_DANG, CP, FOLD, D1S)
            # step j + 1's A operands only now that step j's wgmma are waited for (_step_a): formed
            # while they ran, they overwrote the registers those read (DV / DMIMO_V wrong on an H100)
            a_hi, a_lo, a2_hi, a2_lo = _step_a(ks_n, i_k, C * R, CP, AK, BF16)
            fence_async_shared()
            cta_barrier()  # every warp is done with slot j and has staged step j + 1's operands
            if j + SL < NSTEPS:
                _issue_step(dst_desc, st_desc, kr_desc, dks_desc, bars.index(slot), ds_buf, st_buf, kr_buf,
                            krp_buf, dks_buf, slot, row_s, row_k, block_col(j + SL, BNB, N, FIN), row_x, col0, hq,
                            N, CP, ROT, STG)
            dk, dk2, acc = _products(psiv_hi_s, psiv_lo_s, dsh_s, dsl_s, dsth_s, dstl_s, ((j + 1) % 2) * CP,
                                     (j + 1) * ZERO, a_hi, a_lo, a2_hi, a2_lo, acc, CP, True, MK)
            kr = kr_n
            ks = ks_n
        LAST: gl.constexpr = NSTEPS - 1
        d1, acc_rev, acc_fac, acc = _finish_step(
            LAST, dk, dk2, acc, ks, kr, dks_buf, erev, ts, d1, d1_s, acc_rev, acc_fac, kr_buf, krp_buf, LAST % SL,
            block_col(LAST, BNB, N, FIN), i_k, n_k, DKR_S, DK, DANG, GDB_S, Q, QBIAS, KBIAS, COS_S, SIN_S, b, h, hq,
            cp, bhcp, bhc, S, H, G, RD, N, C, CC, R, MK, FIN, ADD_DANG, CP, FOLD, D1S)
    else:
        if STG:  # the states block's rows and columns in DSL, from the program's first row of states
            r_g = gl.arange(0, BNB, layout=gl.SliceLayout(1, DSL))
            p_g = gl.arange(0, P, layout=gl.SliceLayout(0, DSL))
            st_ptr = STATES + (row_s.to(gl.int64) + r_g[:, None]) * P + p_g[None, :]
        for j in range(NSTEPS):
            n0 = block_col(j, BNB, N, FIN)
            slot = j % SL
            if STG:  # loaded first, used once the step's products are issued
                st = gl.load(st_ptr + n0 * P)
            if j + SL - 1 < NSTEPS:
                cta_barrier()  # every warp is done reading the slot the next copy fills (step j - 1's)
                nslot = (j + SL - 1) % SL
                _issue_step(dst_desc, st_desc, kr_desc, dks_desc, bars.index(nslot), ds_buf, st_buf, kr_buf,
                            krp_buf, dks_buf, nslot, row_s, row_k, block_col(j + SL - 1, BNB, N, FIN), row_x, col0,
                            hq, N, CP, ROT, STG)
            mbarrier.wait(bars.index(slot), (j // SL) % 2)
            # both chunks' DDA terms formed here where CP = 2 (their dstates not held across the
            # products); one chunk's once its products are issued
            kr, ks, acc_dda, acc_dda2, ds = _stage_step(
                ds_buf, st_buf, kr_buf, krp_buf, slot, 0, dsh_s, dsl_s, dsth_s, dstl_s, acc_dda, acc_dda2, ts, i_k,
                KBIAS, COS_S, SIN_S, b, h, cp, n0, S, H, RD, N, C, CC, R, CP, ROT, DSL, MK, CP == 2, BF16)
            a_hi, a_lo, a2_hi, a2_lo = _step_a(ks, i_k, C * R, CP, AK, BF16)
            fence_async_shared()
            cta_barrier()
            if CP == 2:  # the descriptors of twice the operands formed per step, not hoisted into registers
                z = j * ZERO  # this step's views of what the products read (gluon_common.at_step)
                dk, dk2, acc = _products(psiv_hi_s, psiv_lo_s, dsh_s, dsl_s, dsth_s, dstl_s, z, z, a_hi, a_lo,
                                         a2_hi, a2_lo, acc, CP, True, MK)
            else:
                dk, dk2, acc = _products(psiv_hi_s, psiv_lo_s, dsh_s, dsl_s, dsth_s, dstl_s, 0, 0, a_hi, a_lo,
                                         a2_hi, a2_lo, acc, CP, False, MK)
            if CP == 1:
                if STG:
                    acc_dda += st.to(gl.float32) * ds
                else:
                    acc_dda += st_buf.index(slot).load(DSL).to(gl.float32) * ds
            d1, acc_rev, acc_fac, acc = _finish_step(
                j, dk, dk2, acc, ks, kr, dks_buf, erev, ts, d1, d1_s, acc_rev, acc_fac, kr_buf, krp_buf, slot, n0, i_k, n_k,
                DKR_S, DK, DANG, GDB_S, Q, QBIAS, KBIAS, COS_S, SIN_S, b, h, hq, cp, bhcp, bhc, S, H, G, RD,
                N, C, CC, R, MK, FIN, ADD_DANG, CP, FOLD, D1S)
    release_ring(bars, SL)

    # dPsiV = the aux's chunk-local part + the dstates term (exp(da_cs_rev) per row)
    i_p = gl.arange(0, M, layout=gl.SliceLayout(1, MP))
    p_p = gl.arange(0, P, layout=gl.SliceLayout(0, MP))
    erev_p = gl.load(EREV_S + bh * S + c * C + i_p // R, mask=i_p < CC * R, other=0.0)
    dpsiv = gl.load(DPSIV_S + (bhc * CR + i_p[:, None]) * P + p_p[None, :], mask=(i_p < CC * R)[:, None],
                    other=0.0) + acc * erev_p[:, None]  # 0 past the chunk
    dpsiv = gl.convert_layout(dpsiv, ROW)

    # value side: DV[t] = sum_r dPsiV[t, r] mimo_v[r]; each chunk's DMIMO_V[r] = sum_t dPsiV[t, r] v[t]
    dv = gl.sum(gl.reshape(dpsiv * gl.load(psi_ptr), [MT, R, P]), axis=1)
    t_v = gl.arange(0, MT, layout=gl.SliceLayout(1, dv.type.layout))
    p_v = gl.arange(0, P, layout=gl.SliceLayout(0, dv.type.layout))
    gl.store(DV + ((b * S + c * C + t_v[:, None]) * H + h) * P + p_v[None, :], dv.to(DV.dtype.element_ty),
             mask=(t_v < CC)[:, None])
    dvp = dpsiv * gl.load(v_ptr, mask=row_ok, other=0.0).to(gl.float32)
    if CP == 2:
        dmv = gl.sum(gl.reshape(gl.where((i_r < CR)[:, None], dvp, 0.0), [MT, R, P]), axis=0)
        dmv2 = gl.sum(gl.reshape(gl.where((i_r < CR)[:, None], 0.0, dvp), [MT, R, P]), axis=0)
    else:
        dmv = gl.sum(gl.reshape(dvp, [MT, R, P]), axis=0)
    r_m = gl.arange(0, R, layout=gl.SliceLayout(1, dmv.type.layout))
    p_m = gl.arange(0, P, layout=gl.SliceLayout(0, dmv.type.layout))
    gl.store(DMVP_S + (bhc * R + r_m[:, None]) * P + p_m[None, :], dmv)
    if CP == 2:
        gl.store(DMVP_S + ((bhc + 1) * R + r_m[:, None]) * P + p_m[None, :], dmv2)

    # the N sums, per step
    ddacsrev = gl.sum(gl.reshape(acc_rev, [MT, R]), axis=1)
    dfac = gl.sum(gl.reshape(acc_fac, [MT, R]), axis=1)
    t_s = gl.arange(0, MT, layout=ddacsrev.type.layout)
    gl.store(DDACSREV + bh * S + c * C + t_s, ddacsrev, mask=t_s < CC)
    t_f = gl.arange(0, MT, layout=dfac.type.layout)
    if FOLD:  # the aux stored the fold's part, negated (aux_gluon's FOLD)
        dfac += gl.load(DFAC + bh * S + c * C + t_f, mask=t_f < CC, other=0.0)
    gl.store(DFAC + bh * S + c * C + t_f, dfac, mask=t_f < CC)
    dda = gl.load(DECAY_S + bhc) * gl.sum(gl.sum(acc_dda, axis=1), axis=0)
    if CP == 2:  # the second chunk's steps take its own
        dda = gl.where(t_s < C, dda, gl.load(DECAY_S + bhc + 1) * gl.sum(gl.sum(acc_dda2, axis=1), axis=0))
    gl.store(DDA + bh * S + c * C + t_s, gl.full([MT], 0.0, gl.float32, layout=ddacsrev.type.layout) + dda,
             mask=t_s < CC)


# launch options in place of :func:`warps`' rule where set (benchmarks/sweep_launch.py's
# ``gluon_terms`` target sets num_warps; num_stages does not apply)
LAUNCH: dict = {}
# knob: N columns per warpgroup and step of the N walk, 16 when None. 8 halves
# the ring, the split dstates copies and the [M, BNB] tiles: at P = 128, 136 -> 100 KB of shared
# memory, so two programs per SM where one fits now (ncu, records/ncu-stage26-4fc1088: one, 6.2 %
# of the warps, on N64_P128_R4_C16 and N128_P128_R4_C8, where this kernel takes 861 and 2461 us),
# at twice the steps (barriers, TMA waits) per chunk. Measured on stage29 on an H100
# (records/h100-sweep-wgcols-d57951a.json): this kernel 1240 -> 1059 us on N64_P128_R4_C16, but
# 942 -> 1237 on N128_P64_R4_C16; on stage26 2401 -> 2747 us on N128_P128_R4_C8 and 864 -> 867
# on N64_P128_R4_C16 (records/h100-sweep-wgcols-stage26-fc0c573.json). Not a default.
WG_COLS: int | None = None


def warps(meta) -> int:
    """Warps per program: 4 (one warpgroup), or 8 (two, each on half the columns of both
    products)."""
    return LAUNCH.get("num_warps") or 4


def block_rows(meta) -> int:
    """BNB: N rows per step of the N walk, 16 (:data:`WG_COLS`) columns of dK per warpgroup."""
    return (WG_COLS or 16) * warps(meta) // 4


def supported(meta) -> bool:
    """The shapes this kernel is written for: C*R = 64 fused rows (a warpgroup's least) or 32 (run
    on 64), P = 32, 64 or 128 (the [64, P] dPsiV accumulator and PsiV parts; no column masks), N
    a multiple of block_rows(meta) (whole TMA boxes and N walk steps)."""
    return meta.C * meta.R in (32, 64) and meta.P in (32, 64, 128) and meta.N % block_rows(meta) == 0


# knob: two chunks per program where C*R = 32 (:func:`chunks_per_program`; the kernel's CP), the
# default of launch_state_terms' ``chunk_pairs``. One chunk of 32 rows runs its products on 64,
# half of every [64, ...] tile (k, ks, dK, PsiV, the TMA boxes of k and dK) another chunk's and
# unused; two chunks fill them, at two dstates / states blocks and twice the wgmma a step (each
# chunk's dstates against all 64 PsiV rows) per program, half the programs and steps
CHUNK_PAIRS: bool = False


# knob: the dstates / states blocks in a layout whose lanes run along P (the kernel's TL): their
# transposed copies at their ideal shared wavefronts, 4x fewer (benchmarks/ptxas_stage.py STAGE N
# P R C --kernel state_terms --banks); stage32_banks takes it
TRANSPOSE_LAYOUTS: bool = False

# knob: the fp32 k (KR) and dK (DKS) TMA boxes [64, BNB] in the 32-byte swizzle instead of their
# rows' 64: the walk reads them in the wgmma accumulator layout, which takes 2x its ideal
# shared wavefronts from the 64-byte swizzle and its ideal from the 32-byte one
# (mamba3_perf.analysis.banks); Triton copies each box as two [64, 8] slices. Golden on an H100,
# and state_terms within 1.2 % of its time either way (records/h100-sweep-narrow-boxes-d8fe947.json):
# no stage takes it
NARROW_BOXES: bool = False

# knob: the N walk software-pipelined (the kernel's PIPE): step j + 1's operands (its dstates
# blocks split and copied, its k rows rotated, ks) staged while step j's wgmma run (ks's TF32
# parts, the wgmma's register operands, after their wait: _step_a), instead of each step staging,
# issuing and waiting in turn; at a three-slot TMA ring (step
# j + 3's copies issued once step j is done with its slot) and a second set of the split dstates
# operands: more shared memory and registers per program (ptxas_stage.py STAGE N P R C --kernel
# state_terms --knob terms_gluon.PIPELINE=1). Golden on an H100; state_terms 1.5-2.6 % faster
# where one chunk fills the 64 rows at P = 64 and N >= 64, the whole kernel within its spread,
# slower at P = 32 / 128 and on chunk pairs (records/h100-sweep-pipeline-ba1809a.json): no stage
# takes it
PIPELINE: bool = False

# knob: slots of the N walk's TMA ring without PIPELINE (the kernel's RING): 2 issues each step's
# blocks (dstates, states, k and dK rows) one step ahead, 3 two. Nsight Compute's source page of
# stage32's state_terms on N128_P64_R4_C16 (records/ncu-source-stage32-h100-b73b611) has the
# walk's mbarrier wait as its most-stalled instruction (8.1 % of the samples). 3 on an H100:
# golden, state_terms within 1.3 % of its time (records/h100-sweep-rings-a4b1997.json): no stage
# takes it. 1 (no copy in flight ahead of the step) takes one slot of every block: on
# N128_P128_R4_C8 (chunk pairs) 131088 -> 98312 B, two programs per SM where one ran, state_terms
# 1529 -> 1236 us on an H100, golden; on N64_P128_R4_C16 (two programs either way) 542 -> 583
# (records/h100-sweep-termsring-16eb925.json): stage40_termsring takes it on chunk pairs at P = 128
TERMS_RING: int = 2

# knob: each step's states block loaded from global memory into registers instead of through the
# TMA ring (the kernel's STG; one chunk a program, without PIPELINE): at P = 64 the ring's states
# slots (4 KB) were what kept shared memory over the 75 KB a third program per SM needs (77.8 KB).
# With MAXNREG = 168 (183 registers otherwise) three programs of one warpgroup fit an SM where two
# do: 12 warps to hide this latency-bound walk's waits instead of 8 (ptxas_stage.py stage32_banks
# 128 64 4 16 --kernel state_terms --knob terms_gluon.STATES_GLOBAL=1 --maxnreg 168). On an H100
# (records/h100-sweep-statesglobal-1c11750.json, golden in every combination): state_terms slower
# with either knob or both on four of five shapes (N128_P64_R4_C16 583 -> 621 us with both, three
# programs per SM), 1 % faster on N64_P64_R4_C16 only: a third program does not pay for the spills
# and the states' global loads. No stage takes them
STATES_GLOBAL: bool = False
# knob: registers per thread for this kernel (its launch's maxnreg), None: ptxas's choice; 168 at
# P = 64 (128 at P = 32) measured slower on its own too (N128_P64_R4_C16 583 -> 629 us)
MAXNREG: int | None = None

# knob: with finish_dk, each rotary pair's first-half block of dK rows ([64, BNB] fp32, 4 KB at BNB =
# 16) held in shared memory until its partners' step, not in registers across that step's products
# (1), or both blocks put there and the pair finished on 2 or 4 parts of its rows, each part's
# operands that part of the registers (2, 4) (the kernel's D1S): fewer registers where the finishing
# took state_terms to two programs per SM
D1_SHARED: int = 0


def chunks_per_program(meta, chunk_pairs: bool | None = None) -> int:
    """The kernel's CP (gluon_common.chunks_per_program) with ``chunk_pairs``, default
    :data:`CHUNK_PAIRS`."""
    return gluon_common.chunks_per_program(meta, CHUNK_PAIRS if chunk_pairs is None else chunk_pairs)


def supports_rotation(meta) -> bool:
    """Whether ``rot_inline`` applies to ``meta``: every step's block inside one rotary half."""
    return (meta.N // 2) % block_rows(meta) == 0


def launch_state_terms(x: dict, s: dict, out: dict, meta, *, rot_inline: bool = False, finish_dk: bool = False,
                       dangles_started: bool = False, fold_diag: bool = False, chunk_pairs: bool | None = None,
                       transpose_layouts: bool | None = None, narrow_boxes: bool | None = None,
                       pipeline: bool | None = None, states_global: bool | None = None, ring: int | None = None,
                       maxnreg: int | None = None, **_ignored) -> None:
    """stage6_statepass.launch_state_terms' signature (its tile and launch keywords do not
    apply: this kernel's are fixed); PsiV always from the inputs, the N sums always late.
    ``rot_inline``: the rotated k rows from the 16-bit input, the bias and the pre kernel's cos /
    sin (s["COS"], s["SIN"]) instead of its KR scratch (stage27); ``finish_dk`` (with it): DK and
    DANGLES' k half stored here, no DKR (stage28; the post kernel then takes K_DONE);
    ``dangles_started`` (with it): the k half added to the q half the aux stored (stage29);
    ``fold_diag`` (with ``finish_dk``, and the aux's ``fold_diag``): the diagonal term left to the
    aux's fold, DFACTOR added to the part the aux stored (the kernel's FOLD; stage45);
    ``chunk_pairs``: :func:`chunks_per_program`'s (stage31); ``transpose_layouts``: the kernel's TL
    (:data:`TRANSPOSE_LAYOUTS`, whose value is the default; stage32); ``narrow_boxes``: the fp32
    k / dK boxes in the 32-byte swizzle (:data:`NARROW_BOXES`, the default); ``pipeline``: the
    kernel's PIPE (:data:`PIPELINE`, the default); ``states_global``: its STG, one chunk a
    program without PIPE only (default: :data:`STATES_GLOBAL` where that holds); ``ring``: the
    slots of its TMA ring without PIPE (:data:`TERMS_RING`, the default); ``maxnreg``: registers
    per thread (:data:`MAXNREG`, the default; None: ptxas's choice)."""
    regs = MAXNREG if maxnreg is None else maxnreg
    bnb = block_rows(meta)
    cp = chunks_per_program(meta, chunk_pairs)
    pipe = bool(PIPELINE if pipeline is None else pipeline)
    slots = TERMS_RING if ring is None else ring
    if states_global and (cp != 1 or pipe):
        raise ValueError(f"states_global: one chunk a program without pipeline only; got {cp} chunk(s) a "
                         f"program, pipeline={pipe}")
    # the knob's default applies where the walk has that path (a sweep over every shape runs)
    stg = bool(STATES_GLOBAL and cp == 1 and not pipe) if states_global is None else states_global
    box = 32 if (NARROW_BOXES if narrow_boxes is None else narrow_boxes) else None  # the k / dK boxes' swizzle
    if (rot_inline or finish_dk) and not supports_rotation(meta):
        raise ValueError(f"rot_inline: N / 2 = {meta.N // 2} is not a multiple of {bnb}")
    if finish_dk and not rot_inline:
        raise ValueError("finish_dk: only with rot_inline (the pre-rotation k rows it needs are the ones it rotates)")
    if fold_diag and not finish_dk:
        raise ValueError("fold_diag: only with finish_dk (the finishing then leaves the diagonal term out)")
    if rot_inline:
        kr, rot = input_rows(x["k"], meta, [WG_ROWS, bnb]), (x["k_bias"], s["COS"], s["SIN"])
    else:
        kr, rot = row_blocks(s["KR"], meta.N, [WG_ROWS, bnb], box), (x["k_bias"],) * 3  # unread
    if finish_dk:
        fin = (out["DK"], out["DANGLES"], s["GDB"], x["q"], x["q_bias"])
    else:
        fin = (out["DV"], out["DANGLES"], x["k_bias"], x["q"], x["q_bias"])  # unread
    bf16 = dot_precision(x["q"].device) == SPLIT_BF16X3  # inside common.split_bf16x3 (stage37)
    sd, kw, ik = split_format(bf16)
    launching.launch(bwd_bwd_state_terms_gluon_kernel, (meta.B * meta.H * meta.nchunks // cp,))(
        row_blocks(s["DST"], meta.P, [bnb, meta.P]), row_blocks(x["states"], meta.P, [bnb, meta.P]),
        kr, row_blocks(s["DKS"], meta.N, [WG_ROWS, bnb], box),
        x["v"], x["mimo_v"], s["TS"], s["EREV"], s["DECAY"], s["DPSIV"], s["DKR"], s["DMVP"],
        out["DV"], out["DFACTOR"], out["DDA"], out["DDA_CS_REV"],
        *rot, *fin, x["states"],
        meta.S, meta.H, meta.G, meta.RD, 0,
        N=meta.N, P=meta.P, C=meta.C, R=meta.R, M=WG_ROWS, BNB=bnb, ROT=rot_inline, FIN=finish_dk,
        ADD_DANG=dangles_started, FOLD=fold_diag, D1S=int(D1_SHARED) if finish_dk else 0, CP=cp,
        TL=bool(TRANSPOSE_LAYOUTS if transpose_layouts is None else transpose_layouts),
        PIPE=pipe, RING=slots, STG=stg, BF16=bf16, SD=sd, KW=kw, IK=ik, num_warps=warps(meta),
        **({"maxnreg": regs} if regs else {}),
    )
