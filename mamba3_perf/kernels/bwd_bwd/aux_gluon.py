"""The streamed aux in Gluon: the same chunk-local products as
stage7_streamaux.bwd_bwd_aux_streamed_kernel in the configuration stage22 runs on the shapes of
:func:`supported` (the diagonal terms' weight blocks to GDB; the dstates increments formed in the
N walk; N sums reduced late; PsiV and dPhiO always from the 16-bit inputs), with its operands
staged on chip by hand (Hopper, sm_90 only).

One warpgroup per (b, h, chunk), two phases:

* scores: dPsiV.dPhiO^T and k.q^T (the N walk of k / q blocks arriving by TMA into a two-slot
  ring), DSSDA, DGAMMA, the chunk-local dPsiV (one product: (k.q^T * wt + gamma qk_dot) dPhiO),
  the weighted scores dkqw and the diagonal weight blocks;
* N walk: per block of NB columns (q, k rows and the cached states by TMA, the next block in
  flight), the dstates increment (dPhiO exp(da_cs))^T qr, dK = dkqw qr, dQ = dkqw^T ks + the
  cached-state term dPhiO states^T exp(da_cs), and DDA_CS's terms.

Each fp32-level product is tf32x3 (lo.hi, hi.lo, hi.hi, as common.fdot) on asynchronous wgmma;
the two products stage22 runs at one TF32 pass (PQ: dQ's intra-chunk and cached-state terms,
with 16-bit cached states) run at one pass here too. TF32 wgmma reads K-major operands only, so
operands are written to shared memory in the orientation each product needs.

At P = 128 (:data:`WIDE_P`; stage26_widep takes it, measured faster) the increments' [P, NB]
product runs as two of 64 rows, PsiV's TF32 parts are the A operand of PsiV dPhiO^T from shared memory, and the
[M, P] parts held across dPsiV's product are reloaded instead (ptxas, Triton 3.6, sm_90: 160 KB
of shared memory, one program per SM, 255 registers and 448 B of spill stores, against 2100 B
for stage22's Triton aux there, which leaves the increments to a kernel of their own). At
P <= 64 those branches are not taken: the same PTX as before them.
"""
from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, warpgroup_mma, warpgroup_mma_init, warpgroup_mma_wait,
)

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.bwd_bwd import gluon_common
from mamba3_perf.kernels.bwd_bwd.common import SPLIT_BF16X3, dot_precision
from mamba3_perf.kernels.bwd_bwd.gluon_common import (
    WG_ROWS, at_step, block_col, chunk_coords, cta_barrier, dot3, finish_pair, input_rows, release_ring,
    ring_barriers, rotary_partner_col, rotate, rotated_rows, rotation_parts, row_blocks, split_format, split_parts,
    tma_load,
)


@gluon.jit
def _issue_qk(q_desc, k_desc, bar, q_s, k_s, row, col):
    mbarrier.expect(bar, q_desc.block_type.nbytes + k_desc.block_type.nbytes)
    tma_load(q_desc, [row, col], bar, q_s)
    tma_load(k_desc, [row, col], bar, k_s)


@gluon.jit
def _issue_qk_step(q_desc, k_desc, bar, q_buf, qp_buf, k_buf, kp_buf, slot, row, col0, hq, n, N: gl.constexpr,
                   ROT: gl.constexpr):
    """The first walk's q / k blocks at column n into ring slot ``slot``: _issue_qk, or with ROT
    _issue_qk_rot from the 16-bit inputs (``qp_buf``, ``kp_buf``, ``col0``, ``hq`` read only then)."""
    if ROT:
        _issue_qk_rot(q_desc, k_desc, bar, q_buf.index(slot), qp_buf.index(slot), k_buf.index(slot),
                      kp_buf.index(slot), row, col0 + n, rotary_partner_col(hq, n, N))
    else:
        _issue_qk(q_desc, k_desc, bar, q_buf.index(slot), k_buf.index(slot), row, n)


@gluon.jit
def _issue_states(st_desc, bar, st_buf, slot, row_st, col, N: gl.constexpr, CP: gl.constexpr):
    """The cached states blocks of the program's CP chunks (rows N apart) into ring slot ``slot``
    (``st_buf`` [2 * CP, NB, P]: slot s, chunk k at s * CP + k)."""
    for k in gl.static_range(CP):
        tma_load(st_desc, [row_st + k * N + col, 0], bar, st_buf.index(slot * CP + k))


@gluon.jit
def _issue_qks(q_desc, k_desc, st_desc, bar, q_s, k_s, st_buf, slot, row, row_st, col, N: gl.constexpr,
               CP: gl.constexpr, ST: gl.constexpr = True):
    """The second walk's q / k blocks at column ``col`` and, with ST, the states blocks beside them
    on the same barrier (without: the states ring of one slot issues them, _issue_states_alone)."""
    mbarrier.expect(bar, q_desc.block_type.nbytes + k_desc.block_type.nbytes
                    + (CP * st_desc.block_type.nbytes if ST else 0))
    tma_load(q_desc, [row, col], bar, q_s)
    tma_load(k_desc, [row, col], bar, k_s)
    if ST:
        _issue_states(st_desc, bar, st_buf, slot, row_st, col, N, CP)


@gluon.jit
def _issue_states_alone(st_desc, bar, st_buf, row_st, col, N: gl.constexpr, CP: gl.constexpr):
    """The states blocks of the program's CP chunks at column ``col`` into the one slot of their
    own ring (:data:`STATES_SLOTS` = 1), on its barrier."""
    mbarrier.expect(bar, CP * st_desc.block_type.nbytes)
    _issue_states(st_desc, bar, st_buf, 0, row_st, col, N, CP)


@gluon.jit
def _issue_qk_rot(q_desc, k_desc, bar, q_s, qp_s, k_s, kp_s, row, col, pcol):
    """_issue_qk from the 16-bit inputs: each block and the block of its rotary partners."""
    mbarrier.expect(bar, 2 * (q_desc.block_type.nbytes + k_desc.block_type.nbytes))
    tma_load(q_desc, [row, col], bar, q_s)
    tma_load(q_desc, [row, pcol], bar, qp_s)
    tma_load(k_desc, [row, col], bar, k_s)
    tma_load(k_desc, [row, pcol], bar, kp_s)


@gluon.jit
def _issue_qks_rot(q_desc, k_desc, st_desc, bar, q_s, qp_s, k_s, kp_s, st_buf, slot, row, row_st, col, pcol, scol,
                   N: gl.constexpr, CP: gl.constexpr, ST: gl.constexpr = True):
    """_issue_qks from the 16-bit inputs: each q / k block and the block of its rotary partners."""
    mbarrier.expect(bar, 2 * (q_desc.block_type.nbytes + k_desc.block_type.nbytes)
                    + (CP * st_desc.block_type.nbytes if ST else 0))
    tma_load(q_desc, [row, col], bar, q_s)
    tma_load(q_desc, [row, pcol], bar, qp_s)
    tma_load(k_desc, [row, col], bar, k_s)
    tma_load(k_desc, [row, pcol], bar, kp_s)
    if ST:
        _issue_states(st_desc, bar, st_buf, slot, row_st, scol, N, CP)


@gluon.jit
def _increments(deh, dl, qth, qtl, p0: gl.constexpr, k0: gl.constexpr, K: gl.constexpr, MB: gl.constexpr):
    """Rows p0 .. p0 + M of a chunk's dstates increment (dPhiO exp(da_cs))^T q on one N block,
    its K fused rows from k0 (all M rows where a chunk fills them; each chunk's 32 of two), from
    the TF32 parts of the A ([PR, M]) and of the block's q ([NB, M], read transposed)."""
    M: gl.constexpr = qth.shape[1]
    NB: gl.constexpr = qth.shape[0]
    return dot3(deh.slice(p0, M, dim=0).slice(k0, K, dim=1), dl.slice(p0, M, dim=0).slice(k0, K, dim=1),
                qth.slice(k0, K, dim=1).permute((1, 0)), qtl.slice(k0, K, dim=1).permute((1, 0)),
                gl.zeros([M, NB], gl.float32, MB), False)


@gluon.jit
def _weighted_operands(dkqw, AB: gl.constexpr, SS_L: gl.constexpr, BF16: gl.constexpr):
    """The weighted scores as A operands of the N walk: dkqw's TF32 (BF16: bf16) parts in
    registers (dK; K = q) and the parts of dkqw^T in shared memory (dQ's one TF32 pass reads the
    high part; BF16's three passes both)."""
    w_hi, w_lo = split_parts(dkqw, BF16)
    wa_hi = gl.convert_layout(w_hi, AB)
    wa_lo = gl.convert_layout(w_lo, AB)
    wth_s = gl.allocate_shared_memory(w_hi.dtype, [dkqw.shape[1], dkqw.shape[0]], SS_L, gl.permute(w_hi, (1, 0)))
    if BF16:
        wtl_s = gl.allocate_shared_memory(w_lo.dtype, [dkqw.shape[1], dkqw.shape[0]], SS_L, gl.permute(w_lo, (1, 0)))
    else:
        wtl_s = wth_s  # unread
    return wa_hi, wa_lo, wth_s, wtl_s


@gluon.jit
def _dphio_rows(DOUT, MO, b, h, c, S, H, VR: gl.constexpr, M: gl.constexpr, P: gl.constexpr, C: gl.constexpr,
                R: gl.constexpr, REDUCE_O: gl.constexpr, L: gl.constexpr):
    """dPhiO [M, P] of the program's rows in layout L, fp32 from the 16-bit dout (x mimo_o with
    REDUCE_O); 0 on rows past VR."""
    i = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    p = gl.arange(0, P, layout=gl.SliceLayout(0, L))
    t = c * C + i // R
    r = i % R
    ok = (i < VR)[:, None]
    if REDUCE_O:
        d = (gl.load(DOUT + ((b * S + t[:, None]) * H + h) * P + p[None, :], mask=ok, other=0.0).to(gl.float32)
             * gl.load(MO + (h * R + r[:, None]) * P + p[None, :]))
    else:
        d = gl.load(DOUT + (((b * S + t[:, None]) * R + r[:, None]) * H + h) * P + p[None, :],
                    mask=ok, other=0.0).to(gl.float32)
    return d


@gluon.jit(do_not_specialize=["ZERO"])  # the runtime zero of gluon_common.at_step: never a constant
def bwd_bwd_aux_gluon_kernel(
    q1_desc, k1_desc, q2_desc, k2_desc, st_desc,
    QKDOT, DSKIP, GAM_S, TS_S, ECS_S, WT_S,
    DPSIV_S, DKS_S, DQR_S, DDP_S, GDB_S, DST_S,
    DSSDA, DGAM, DDACS, DFAC,
    DOUT, V, MV, MO,
    QBIAS, KBIAS, COS_S, SIN_S, DQ, DANG, KIN,
    S, H, G, RD, ZERO,
    N: gl.constexpr, P: gl.constexpr, C: gl.constexpr, R: gl.constexpr, M: gl.constexpr, NB1: gl.constexpr,
    NB: gl.constexpr, PR: gl.constexpr, HAS_D: gl.constexpr, REDUCE_O: gl.constexpr, ROT: gl.constexpr,
    FIN: gl.constexpr, FOLD: gl.constexpr, DYN: gl.constexpr, CP: gl.constexpr, TL: gl.constexpr, SL1: gl.constexpr,
    BF16: gl.constexpr, SD: gl.constexpr, KW: gl.constexpr, IK: gl.constexpr, STB: gl.constexpr,
    ST1: gl.constexpr, num_warps: gl.constexpr,
):
    """PR: rows of the increments' product, max(P, M): P = 32 runs on M rows (the rest zero),
    P = 128 as two products of M rows each. ROT: the q / k descriptors are of the 16-bit inputs
    (gluon_common.input_rows), and both N walks rotate their blocks (gluon_common.rotated_rows)
    from them, their partner blocks, the biases and the pre kernel's cos / sin (COS_S, SIN_S),
    instead of loading the pre kernel's fp32 QR / KR rows. FIN (with ROT): the second walk takes
    each first-half block and then its rotary partners and, instead of storing dQ's rotated-domain
    rows (DQR) for the post kernel, finishes dQ and stores DANGLES' q half itself on each pair
    (gluon_common.finish_pair; the diagonal term from the GDB it stored and the 16-bit k, KIN).

    FOLD (with FIN, and state_terms' FOLD): the qk_dot diagonal terms of dQ and dK folded into the
    weighted scores, so that neither finishing forms them and no GDB is stored. Within a step t
    every rank's rows turn by the same angles, so the diagonal term of the pre-rotation gradient,
    gd kb (gd: the same-step blocks of gamma dkq), is the inverse rotary of gd kr: the rotated
    domain's. dQ's rows take dkqw^T ks, ks = kr ts, so dkqw + gd / ts carries it there; dK's
    rotated-domain rows are ts (dks + ...), whose dks = dkqw q carries gd q / ts likewise. DFACTOR
    (the sums of kr dks over N) would take that added part too: per step, the sum over its
    same-step pairs of gd / ts times kr . qr over N (= lkq / ts), which is gamma / ts^2 times
    DSSDA's diagonal (the same pairs' lkq dkq), stored negated to DFAC, to which state_terms adds
    its sums. DANGLES' q and k halves each take an angle term of the fold that cancels in their sum
    (the rotation's generator is antisymmetric). Rows where ts = 0 take no fold.

    CP: chunks per program, 1, or 2 where C*R = 32 (terms_gluon's CP): two chunks adjacent in time
    fill the M rows, every row-indexed load and store that of one chunk of 2C steps, the scores'
    blocks across the two chunks masked out (their weights, qk_dot and stores), and what is per
    chunk taken per chunk: the cached states (two blocks a step; dPhiO against each, each chunk's
    rows kept), the increments (each chunk's K rows of dPhiO exp(da_cs) and q: K = 32), DSSDA's
    block, the D term's sum.

    TL (:data:`TRANSPOSE_LAYOUTS`): the tiles copied transposed into shared memory (dPhiO's TF32
    parts, (dPhiO exp(da_cs))^T, the second walk's q / ks parts) held in registers in layouts whose
    lanes run down the tile's rows (TT, TW), so that each of those transposed stores writes whole
    128-byte lines and each load from the row-major source whole 16-byte vectors: ideal shared
    wavefronts (mamba3_perf.analysis.banks), where the ROW layout's transposes took 2x (the walk)
    to 4x (the [M, P] parts).

    SL1 (:data:`AUX_RING1`): the slots of the first walk's TMA ring, its blocks issued SL1 - 1
    steps ahead.

    BF16 (stage37_bf16split; bf16 cached states): every split product's three passes over bf16
    parts (gluon_common.split_parts) in SD-typed shared memory, the A operands' KW and the wgmma's
    IK of that format (gluon_common.split_format); dQ's two one-pass TF32 products become bf16
    products as precise or more: dkqw^T ks three passes, dPhiO states^T two (the states are bf16,
    exact); dPhiO and the rotated q, whose bf16 parts do not sum to them exactly, taken again
    where the TF32 path summed its parts."""
    CR: gl.constexpr = C * R  # fused rows of a chunk
    CC: gl.constexpr = C * CP  # steps of the program's chunks
    VR: gl.constexpr = CC * R  # the program's fused rows (M where C*R = 64 or CP = 2)
    MT: gl.constexpr = M // R  # steps of the M rows
    bhcp, bh, b, h, cp = chunk_coords(S, H, CC)
    bhc = bhcp * CP  # the first chunk's
    c = cp * CP
    row_st = (bhc * N).to(gl.int32)
    if ROT:  # rows of the inputs viewed [B*S*R, G*N]; columns of head group hq
        row_k = ((b * S + c * C) * R).to(gl.int32)
        hq = h // (H // G)
        col0 = (hq * N).to(gl.int32)
    else:  # rows of the [B, H, nc, C*R, N] scratch
        row_k = (bhc * CR).to(gl.int32)
        hq = h  # unread
        col0 = row_k

    WGS: gl.constexpr = num_warps // 4  # warpgroups, splitting each product's columns
    ROW: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [num_warps, 1], [1, 0])
    MS: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WGS],
                                                 instr_shape=[16, M // WGS, IK])  # [M, M] scores
    MP: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WGS],
                                                 instr_shape=[16, P // WGS, IK])  # [M, P]
    MB: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WGS],
                                                 instr_shape=[16, NB // WGS, IK])  # [M, NB] N walk
    AS: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MS, k_width=KW)
    AP: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MP, k_width=KW)
    AB: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MB, k_width=KW)
    # lanes down the rows: [M, P] tiles copied transposed, and the second walk's [M, NB] q / k
    # tiles (a 16-byte vector a lane from the TMA box, VEC elements)
    TT: gl.constexpr = gl.BlockedLayout([1, 4], [32, 1], [2, num_warps // 2], [1, 0])
    VEC: gl.constexpr = min(128 // q2_desc.dtype.primitive_bitwidth, NB // (num_warps // 2))
    TW: gl.constexpr = gl.BlockedLayout([1, VEC], [32, 1], [2, num_warps // 2], [1, 0])
    DPL: gl.constexpr = TT if TL else ROW  # dPhiO's parts after the scores
    QKL: gl.constexpr = TW if TL else ROW  # the second walk's q / k tiles

    # ---------------------------------------------------------------- PsiV, dPhiO [M, P]
    # rows past the chunk's C*R: PsiV, dPhiO, ks and the step scalars 0, the q / k rows another
    # chunk's (the TMA boxes run on; finite), so the padded rows and columns of every product that
    # is stored come out 0 or are not stored
    i_r = gl.arange(0, M, layout=gl.SliceLayout(1, ROW))
    p_r = gl.arange(0, P, layout=gl.SliceLayout(0, ROW))
    t_r = c * C + i_r // R
    r_r = i_r % R
    in_r = i_r < VR
    vrow = ((b * S + t_r[:, None]) * H + h) * P + p_r[None, :]
    psiv = (gl.load(V + vrow, mask=in_r[:, None], other=0.0).to(gl.float32)
            * gl.load(MV + (h * R + r_r[:, None]) * P + p_r[None, :]))
    dphio = _dphio_rows(DOUT, MO, b, h, c, S, H, VR, M, P, C, R, REDUCE_O, ROW)
    if HAS_D:
        ddp = dphio * psiv
        if CP == 2:  # each chunk's
            gl.store(DDP_S + bhc, gl.sum(gl.sum(gl.where((i_r < CR)[:, None], ddp, 0.0), axis=1), axis=0))
            gl.store(DDP_S + bhc + 1, gl.sum(gl.sum(gl.where((i_r < CR)[:, None], 0.0, ddp), axis=1), axis=0))
        else:
            gl.store(DDP_S + bhc, gl.sum(gl.sum(ddp, axis=1), axis=0))
    ps_hi, ps_lo = split_parts(psiv, BF16)
    dp_hi, dp_lo = split_parts(dphio, BF16)
    CP_L: gl.constexpr = gl.NVMMASharedLayout.get_default_for([M, P], SD)
    PC_L: gl.constexpr = gl.NVMMASharedLayout.get_default_for([P, M], SD)
    dph_s = gl.allocate_shared_memory(SD, [M, P], CP_L, dp_hi)
    dpl_s = gl.allocate_shared_memory(SD, [M, P], CP_L, dp_lo)
    # dkq = PsiV dPhiO^T [M(k), M(q)]: K = P; PsiV's parts the A operand from shared memory at
    # P > M (as dot operands in registers, [M, 128] twice, they spill)
    if P > M:
        psh_s = gl.allocate_shared_memory(SD, [M, P], CP_L, ps_hi)
        psl_s = gl.allocate_shared_memory(SD, [M, P], CP_L, ps_lo)
        fence_async_shared()
        cta_barrier()
        dkq = dot3(psh_s, psl_s, dph_s.permute((1, 0)), dpl_s.permute((1, 0)),
                   gl.zeros([M, M], gl.float32, MS), False)
        # waited at once: the compiler counts psh_s / psl_s free once the wgmma is issued, and places
        # the first walk's TMA ring over them, into which the ring's first blocks are issued next
        dkq = warpgroup_mma_wait(num_outstanding=0, deps=(dkq,))
    else:
        fence_async_shared()
        cta_barrier()
        dkq = dot3(gl.convert_layout(ps_hi, AS), gl.convert_layout(ps_lo, AS), dph_s.permute((1, 0)),
                   dpl_s.permute((1, 0)), gl.zeros([M, M], gl.float32, MS), False)

    # ---------------------------------------------------------------- k.q^T over N
    i_s = gl.arange(0, M, layout=gl.SliceLayout(1, MS))
    j_s = gl.arange(0, M, layout=gl.SliceLayout(0, MS))
    ts_r = gl.load(TS_S + bh * S + t_r, mask=in_r, other=0.0)
    # the first walk's TMA ring: SL1 slots (:data:`AUX_RING1`), step j + SL1 - 1's blocks issued at
    # step j into the slot step j - 1 read
    q1_buf = gl.allocate_shared_memory(q1_desc.dtype, [SL1, M, NB1], q1_desc.layout)
    k1_buf = gl.allocate_shared_memory(k1_desc.dtype, [SL1, M, NB1], k1_desc.layout)
    if ROT:
        q1p_buf = gl.allocate_shared_memory(q1_desc.dtype, [SL1, M, NB1], q1_desc.layout)
        k1p_buf = gl.allocate_shared_memory(k1_desc.dtype, [SL1, M, NB1], k1_desc.layout)
    else:
        q1p_buf = q1_buf  # unread
        k1p_buf = k1_buf
    bar1 = ring_barriers(SL1)
    QB_L: gl.constexpr = gl.NVMMASharedLayout.get_default_for([M, NB1], SD)
    qh_s = gl.allocate_shared_memory(SD, [M, NB1], QB_L)
    ql_s = gl.allocate_shared_memory(SD, [M, NB1], QB_L)
    STEPS1: gl.constexpr = N // NB1
    for k in gl.static_range(SL1 - 1):
        if k < STEPS1:
            _issue_qk_step(q1_desc, k1_desc, bar1.index(k), q1_buf, q1p_buf, k1_buf, k1p_buf, k, row_k, col0, hq,
                           k * NB1, N, ROT)
    dkq = warpgroup_mma_wait(num_outstanding=0, deps=(dkq,))
    lkq = warpgroup_mma_init(gl.zeros([M, M], gl.float32, MS))
    for j in range(STEPS1):
        slot = j % SL1
        if j + SL1 - 1 < STEPS1:
            cta_barrier()  # every warp is done reading the slot step j - 1 read
            nslot = (j + SL1 - 1) % SL1
            _issue_qk_step(q1_desc, k1_desc, bar1.index(nslot), q1_buf, q1p_buf, k1_buf, k1p_buf, nslot, row_k, col0,
                           hq, (j + SL1 - 1) * NB1, N, ROT)
        mbarrier.wait(bar1.index(slot), (j // SL1) % 2)
        if ROT:
            qv = rotated_rows(q1_buf.index(slot).load(ROW), q1p_buf.index(slot).load(ROW), QBIAS, COS_S, SIN_S,
                              b, h, cp, j * NB1, S, H, RD, N, CC, R, ROW)
            kv = rotated_rows(k1_buf.index(slot).load(ROW), k1p_buf.index(slot).load(ROW), KBIAS, COS_S, SIN_S,
                              b, h, cp, j * NB1, S, H, RD, N, CC, R, ROW)
        else:
            qv = q1_buf.index(slot).load(ROW)
            kv = k1_buf.index(slot).load(ROW)
        q_hi, q_lo = split_parts(qv, BF16)
        ks_hi, ks_lo = split_parts(kv * ts_r[:, None], BF16)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(lkq,))  # the last step's dots: qh_s / ql_s free
        qh_s.store(q_hi)
        ql_s.store(q_lo)
        fence_async_shared()
        cta_barrier()
        lkq = dot3(gl.convert_layout(ks_hi, AS), gl.convert_layout(ks_lo, AS), qh_s.permute((1, 0)),
                    ql_s.permute((1, 0)), acc, True)
    lkq = warpgroup_mma_wait(num_outstanding=0, deps=(lkq,))
    release_ring(bar1, SL1)

    # ---------------------------------------------------------------- scores
    ti = i_s // R
    ri = i_s % R
    tj = j_s // R
    # a chunk's rows against its own (CP = 2: the blocks across the two chunks out)
    in_s = (i_s < VR)[:, None] & (j_s < VR)[None, :] & ((i_s // CR)[:, None] == (j_s // CR)[None, :])
    same = (ti[:, None] == tj[None, :]) & in_s
    t_i = c * C + ti
    qkd = gl.load(QKDOT + ((bh * S + t_i[:, None]) * R + (j_s % R)[None, :]) * R + ri[:, None],
                  mask=same, other=0.0).to(gl.float32)
    dssda = gl.sum(gl.sum(gl.reshape(lkq * dkq, [MT, R, MT, R]), axis=3), axis=1)
    tk = gl.arange(0, MT, layout=gl.SliceLayout(1, dssda.type.layout))
    tq = gl.arange(0, MT, layout=gl.SliceLayout(0, dssda.type.layout))
    # each chunk's [C, C] block (chunk k's steps kC + a: at (bhc + k) C C + a C + b)
    gl.store(DSSDA + (bhc * C + tk[:, None]) * C + tq[None, :] - (tk // C * C)[:, None], dssda,
             mask=(tk < CC)[:, None] & ((tk // C)[:, None] == (tq // C)[None, :]))
    dgam = gl.sum(gl.reshape(gl.sum(qkd * dkq, axis=1), [MT, R]), axis=1)
    tg = gl.arange(0, MT, layout=dgam.type.layout)
    gl.store(DGAM + bh * S + c * C + tg, dgam, mask=tg < CC)
    gamma = gl.load(GAM_S + bh * S + t_i, mask=i_s < VR, other=0.0)
    if FOLD:  # DFACTOR's part of the fold, negated: per step t, gamma / ts^2 times the sum of lkq dkq
        # over its same-step pairs, DSSDA's diagonal; and 1 / ts of the rows (0 where ts = 0), for the
        # scores below: loaded there instead, ptxas spilled more (76 against 68 B at the cap on
        # N128_P64_R4_C16, 80 against 68 at R = 2)
        t_d = c * C + tk
        ts_d = gl.load(TS_S + bh * S + t_d, mask=tk < CC, other=0.0)
        inv_d = gl.where(ts_d != 0.0, 1.0 / gl.where(ts_d != 0.0, ts_d, 1.0), 0.0)
        fold_fac = (gl.sum(gl.where(tk[:, None] == tq[None, :], dssda, 0.0), axis=1)
                    * gl.load(GAM_S + bh * S + t_d, mask=tk < CC, other=0.0) * inv_d * inv_d)
        gl.store(DFAC + bh * S + t_d, -fold_fac, mask=tk < CC)
        ts_i = gl.load(TS_S + bh * S + t_i, mask=i_s < VR, other=0.0)
        inv_ts = gl.where(ts_i != 0.0, 1.0 / gl.where(ts_i != 0.0, ts_i, 1.0), 0.0)
    wt = gl.load(WT_S + (bhc * C + ti[:, None]) * C + tj[None, :] - (ti // C * C)[:, None], mask=in_s, other=0.0)
    # chunk-local dPsiV = (k.q^T * wt + gamma qk_dot) dPhiO (+ D dPhiO); B = dPhiO [K = CR, P], held
    # as dPhiO^T (its TF32 parts are dph_s / dpl_s transposed)
    dp_hi = dph_s.load(DPL)
    dp_lo = dpl_s.load(DPL)
    dpth_s = gl.allocate_shared_memory(SD, [P, M], PC_L, gl.permute(dp_hi, (1, 0)))
    dptl_s = gl.allocate_shared_memory(SD, [P, M], PC_L, gl.permute(dp_lo, (1, 0)))
    a_hi, a_lo = split_parts(lkq * wt + gamma[:, None] * qkd, BF16)
    fence_async_shared()
    cta_barrier()
    dpsiv = dot3(gl.convert_layout(a_hi, AP), gl.convert_layout(a_lo, AP), dpth_s.permute((1, 0)),
                  dptl_s.permute((1, 0)), gl.zeros([M, P], gl.float32, MP), False)
    # waited at once: the shared memory of what follows (reductions' and layout conversions'
    # scratch, later buffers) may be placed over dpth_s / dptl_s, which the compiler counts free
    # once the wgmma is issued, not once it completes
    dpsiv = warpgroup_mma_wait(num_outstanding=0, deps=(dpsiv,))
    gd = gl.where(same, dkq, 0.0) * gamma[:, None]
    if FOLD:
        dkqw = dkq * wt + gd * inv_ts[:, None]
    else:
        dkqw = dkq * wt
        gdb = gl.sum(gl.reshape(gd, [M, MT, R]), axis=1)
        ig = gl.arange(0, M, layout=gl.SliceLayout(1, gdb.type.layout))
        rg = gl.arange(0, R, layout=gl.SliceLayout(0, gdb.type.layout))
        gl.store(GDB_S + (bhc * CR + ig[:, None]) * R + rg[None, :], gdb, mask=(ig < VR)[:, None])
    # the weighted scores as A operands of the N walk: dkqw in registers (dK; K = q), the TF32 part of
    # dkqw^T in shared memory (dQ's one pass)
    SS_L: gl.constexpr = gl.NVMMASharedLayout.get_default_for([M, M], SD)
    if P <= M:
        wa_hi, wa_lo, wth_s, wtl_s = _weighted_operands(dkqw, AB, SS_L, BF16)
    i_p = gl.arange(0, M, layout=gl.SliceLayout(1, MP))
    p_p = gl.arange(0, P, layout=gl.SliceLayout(0, MP))
    if BF16:  # bf16 parts do not sum to dPhiO: formed again from the inputs
        dphio = _dphio_rows(DOUT, MO, b, h, c, S, H, VR, M, P, C, R, REDUCE_O, DPL)
    elif P > M:  # reloaded: [M, P] parts held in registers across dPsiV's product spill at P = 128
        dphio = dph_s.load(DPL) + dpl_s.load(DPL)  # exact
    else:
        dphio = dp_hi + dp_lo  # exact
    if HAS_D:
        dpsiv += gl.load(DSKIP + h) * gl.convert_layout(dphio, MP)
    gl.store(DPSIV_S + (bhc * CR + i_p[:, None]) * P + p_p[None, :], dpsiv, mask=(i_p < VR)[:, None])
    # A of the increments: (dPhiO exp(da_cs))^T [P, K = M], on PR rows (those past P zero)
    if TL:
        i_d = gl.arange(0, M, layout=gl.SliceLayout(1, DPL))
        ecs_d = gl.load(ECS_S + bh * S + c * C + i_d // R, mask=i_d < VR, other=0.0)
    else:
        ecs_d = gl.load(ECS_S + bh * S + t_r, mask=in_r, other=0.0)
    de_hi, de_lo = split_parts(dphio * ecs_d[:, None], BF16)
    # BF16 with CP = 2: the increments take each chunk's 32 K columns of (dPhiO exp(da_cs))^T and of
    # the block's q, 64 bytes of a bf16 row: those buffers in the 64-byte swizzle, so that the
    # second chunk's slice starts a swizzle line (in the default 128-byte one it starts mid-line)
    SPLIT_K: gl.constexpr = BF16 and CP == 2
    SW64: gl.constexpr = gl.NVMMASharedLayout(64, 16, 2)  # bf16 rows in the 64-byte swizzle
    DE_L: gl.constexpr = SW64 if SPLIT_K else gl.NVMMASharedLayout.get_default_for([PR, M], SD)
    deh_s = gl.allocate_shared_memory(SD, [PR, M], DE_L)
    del_s = gl.allocate_shared_memory(SD, [PR, M], DE_L)
    deh_s.slice(0, P, dim=0).store(gl.permute(de_hi, (1, 0)))
    del_s.slice(0, P, dim=0).store(gl.permute(de_lo, (1, 0)))
    if P < M:
        deh_s.slice(P, M - P, dim=0).store(gl.zeros([M - P, M], SD, ROW))
        del_s.slice(P, M - P, dim=0).store(gl.zeros([M - P, M], SD, ROW))
    if P > M:  # formed once dPhiO's [M, P] registers are free: held beside them, they spill
        wa_hi, wa_lo, wth_s, wtl_s = _weighted_operands(dkqw, AB, SS_L, BF16)

    # ---------------------------------------------------------------- N walk
    i_b = gl.arange(0, M, layout=gl.SliceLayout(1, MB))
    n_b = gl.arange(0, NB, layout=gl.SliceLayout(0, MB))
    ecs_b = gl.load(ECS_S + bh * S + c * C + i_b // R, mask=i_b < VR, other=0.0)
    if TL:
        i_w = gl.arange(0, M, layout=gl.SliceLayout(1, QKL))
        ts_w = gl.load(TS_S + bh * S + c * C + i_w // R, mask=i_w < VR, other=0.0)
    else:
        ts_w = ts_r
    q2_buf = gl.allocate_shared_memory(q2_desc.dtype, [2, M, NB], q2_desc.layout)
    k2_buf = gl.allocate_shared_memory(k2_desc.dtype, [2, M, NB], k2_desc.layout)
    if ROT:
        q2p_buf = gl.allocate_shared_memory(q2_desc.dtype, [2, M, NB], q2_desc.layout)
        k2p_buf = gl.allocate_shared_memory(k2_desc.dtype, [2, M, NB], k2_desc.layout)
    # the states: in the q / k ring's two slots, or (ST1) in a ring of their own of one slot, the
    # next step's issued once this step's dQ products are waited for
    st_buf = gl.allocate_shared_memory(st_desc.dtype, [(1 if ST1 else 2) * CP, NB, P], st_desc.layout)
    bar2 = ring_barriers()
    if ST1:
        bar_st = ring_barriers(1)
    BC_L: gl.constexpr = SW64 if SPLIT_K else gl.NVMMASharedLayout.get_default_for([NB, M], SD)
    BP_L: gl.constexpr = gl.NVMMASharedLayout.get_default_for([NB, P], SD)
    qth_s = gl.allocate_shared_memory(SD, [NB, M], BC_L)  # B of dK and the increment: [K = M, NB]
    qtl_s = gl.allocate_shared_memory(SD, [NB, M], BC_L)
    kth_s = gl.allocate_shared_memory(SD, [NB, M], BC_L)  # B of dQ
    if BF16:
        ktl_s = gl.allocate_shared_memory(SD, [NB, M], BC_L)  # dQ's third pass
    else:
        ktl_s = kth_s  # unread
    if not STB:  # B of the cached-state term, the 16-bit states copied (as TF32, or bf16 without STB)
        st_s = gl.allocate_shared_memory(SD, [NB, P], BP_L)
        if CP == 2:
            st2_s = gl.allocate_shared_memory(SD, [NB, P], BP_L)  # the second chunk's
    if ROT:
        _issue_qks_rot(q2_desc, k2_desc, st_desc, bar2.index(0), q2_buf.index(0), q2p_buf.index(0), k2_buf.index(0),
                       k2p_buf.index(0), st_buf, 0, row_k, row_st, col0, rotary_partner_col(hq, 0, N), 0, N, CP,
                       not ST1)
    else:
        _issue_qks(q2_desc, k2_desc, st_desc, bar2.index(0), q2_buf.index(0), k2_buf.index(0), st_buf, 0,
                   row_k, row_st, 0, N, CP, not ST1)
    if ST1:
        _issue_states_alone(st_desc, bar_st.index(0), st_buf, row_st, 0, N, CP)
    acc_cs = gl.zeros([M], gl.float32, gl.SliceLayout(1, MB))
    if FIN:
        d1 = gl.zeros([M, NB], gl.float32, MB)  # the pair's first-half dQ rows, until its partners come
    STEPS2: gl.constexpr = N // NB
    for j in range(STEPS2):
        slot = j % 2
        n0 = block_col(j, NB, N, FIN)
        n1 = block_col(j + 1, NB, N, FIN)
        if j + 1 < STEPS2:
            cta_barrier()
            if ROT:
                _issue_qks_rot(q2_desc, k2_desc, st_desc, bar2.index(1 - slot), q2_buf.index(1 - slot),
                               q2p_buf.index(1 - slot), k2_buf.index(1 - slot), k2p_buf.index(1 - slot),
                               st_buf, 1 - slot, row_k, row_st, col0 + n1, rotary_partner_col(hq, n1, N), n1, N, CP,
                               not ST1)
            else:
                _issue_qks(q2_desc, k2_desc, st_desc, bar2.index(1 - slot), q2_buf.index(1 - slot),
                           k2_buf.index(1 - slot), st_buf, 1 - slot, row_k, row_st, (j + 1) * NB, N, CP, not ST1)
        mbarrier.wait(bar2.index(slot), (j // 2) % 2)
        if ROT:
            qv = rotated_rows(q2_buf.index(slot).load(QKL), q2p_buf.index(slot).load(QKL), QBIAS, COS_S, SIN_S,
                              b, h, cp, n0, S, H, RD, N, CC, R, QKL)
            kv = rotated_rows(k2_buf.index(slot).load(QKL), k2p_buf.index(slot).load(QKL), KBIAS, COS_S, SIN_S,
                              b, h, cp, n0, S, H, RD, N, CC, R, QKL)
        else:
            qv = q2_buf.index(slot).load(QKL)
            kv = k2_buf.index(slot).load(QKL)
        q_hi, q_lo = split_parts(qv, BF16)
        ks_hi, ks_lo = split_parts(kv * ts_w[:, None], BF16)
        z = j * ZERO  # this step's views of the buffers the products read (gluon_common.at_step)
        qth_j = at_step(qth_s, z, DYN)
        qtl_j = at_step(qtl_s, z, DYN)
        kth_j = at_step(kth_s, z, DYN)
        deh_j = at_step(deh_s, z, DYN)
        del_j = at_step(del_s, z, DYN)
        wth_j = at_step(wth_s, z, DYN)
        wtl_j = at_step(wtl_s, z, DYN)
        ktl_j = at_step(ktl_s, z, DYN)
        dpl_j = at_step(dpl_s, z, DYN)
        dph_j = at_step(dph_s, z, DYN)
        qth_j.store(gl.permute(q_hi, (1, 0)))
        qtl_j.store(gl.permute(q_lo, (1, 0)))
        kth_j.store(gl.permute(ks_hi, (1, 0)))
        if BF16:
            ktl_j.store(gl.permute(ks_lo, (1, 0)))
        if STB:  # bf16 states and parts: the B operand as the TMA brought it (its slot is reissued
            # once this step's products are waited for: at the next step's start, or with ST1 right
            # after the wait)
            st_j = st_buf.index((0 if ST1 else slot) * CP)
            if CP == 2:
                st2_j = st_buf.index((0 if ST1 else slot) * CP + 1)
        else:  # 16-bit states: exact in TF32 (bf16 ones in bf16)
            st_j = at_step(st_s, z, DYN)
            st_j.store(st_buf.index(slot * CP).load(ROW).to(SD))
            if CP == 2:
                st2_j = at_step(st2_s, z, DYN)
                st2_j.store(st_buf.index(slot * CP + 1).load(ROW).to(SD))
        fence_async_shared()
        cta_barrier()
        # the increments of each chunk: its K rows (CP = 2: each chunk's 32 of the 64)
        inc = _increments(deh_j, del_j, qth_j, qtl_j, 0, 0, M // CP, MB)
        if CP == 2:
            inc2 = _increments(deh_j, del_j, qth_j, qtl_j, 0, CR, CR, MB)
        if PR > M:  # P = 2M: the increments' rows M..P
            inc_hi = _increments(deh_j, del_j, qth_j, qtl_j, M, 0, M // CP, MB)
            if CP == 2:
                inc2_hi = _increments(deh_j, del_j, qth_j, qtl_j, M, CR, CR, MB)
        dks = dot3(wa_hi, wa_lo, qth_j.permute((1, 0)), qtl_j.permute((1, 0)),
                    gl.zeros([M, NB], gl.float32, MB), False)
        if BF16:  # dkqw^T ks in three bf16 passes, dPhiO states^T in two (bf16 states exact)
            dqr = dot3(wth_j, wtl_j, kth_j.permute((1, 0)), ktl_j.permute((1, 0)),
                       gl.zeros([M, NB], gl.float32, MB), False)
            if ST1:  # the step's states, issued during the last step
                mbarrier.wait(bar_st.index(0), j % 2)
            dq_raw = warpgroup_mma(dpl_j, st_j.permute((1, 0)), gl.zeros([M, NB], gl.float32, MB),
                                   use_acc=False, is_async=True)
            dq_raw = warpgroup_mma(dph_j, st_j.permute((1, 0)), dq_raw, is_async=True)
        else:
            dqr = warpgroup_mma(wth_j, kth_j.permute((1, 0)), gl.zeros([M, NB], gl.float32, MB),
                                use_acc=False, is_async=True)
            dq_raw = warpgroup_mma(dph_j, st_j.permute((1, 0)), gl.zeros([M, NB], gl.float32, MB),
                                   use_acc=False, is_async=True)
        if CP == 2 and BF16:  # dPhiO against the second chunk's states (its rows kept below), as above
            dq_raw2 = warpgroup_mma(dpl_j, st2_j.permute((1, 0)), gl.zeros([M, NB], gl.float32, MB),
                                    use_acc=False, is_async=True)
            dq_raw2 = warpgroup_mma(dph_j, st2_j.permute((1, 0)), dq_raw2, is_async=True)
        elif CP == 2:
            dq_raw2 = warpgroup_mma(dph_j, st2_j.permute((1, 0)), gl.zeros([M, NB], gl.float32, MB),
                                    use_acc=False, is_async=True)
        if ROT and not BF16:  # the rotated block as its TF32 parts staged above left it: hi + lo is exact
            qr_b = qth_j.permute((1, 0)).load(MB) + qtl_j.permute((1, 0)).load(MB)
        elif not ROT:
            qr_b = q2_buf.index(slot).load(MB)
        cols = n0 + n_b
        if PR > M:
            inc_hi = warpgroup_mma_wait(num_outstanding=0, deps=(inc_hi,))
            gl.store(DST_S + (bhc * N + cols[None, :]) * P + M + i_b[:, None], inc_hi)  # rows: p - M
            if CP == 2:
                inc2_hi = warpgroup_mma_wait(num_outstanding=0, deps=(inc2_hi,))
                gl.store(DST_S + ((bhc + 1) * N + cols[None, :]) * P + M + i_b[:, None], inc2_hi)
        if CP == 2:
            inc, inc2, dks, dqr, dq_raw, dq_raw2 = warpgroup_mma_wait(
                num_outstanding=0, deps=(inc, inc2, dks, dqr, dq_raw, dq_raw2))
            gl.store(DST_S + ((bhc + 1) * N + cols[None, :]) * P + i_b[:, None], inc2, mask=(i_b < P)[:, None])
            dq_raw = gl.where((i_b < CR)[:, None], dq_raw, dq_raw2)
        else:
            inc, dks, dqr, dq_raw = warpgroup_mma_wait(num_outstanding=0, deps=(inc, dks, dqr, dq_raw))
        if ST1:
            if j + 1 < STEPS2:
                cta_barrier()  # every warp's products done reading the slot
                _issue_states_alone(st_desc, bar_st.index(0), st_buf, row_st, n1 if ROT else (j + 1) * NB, N, CP)
        gl.store(DST_S + (bhc * N + cols[None, :]) * P + i_b[:, None], inc, mask=(i_b < P)[:, None])  # rows: p
        gl.store(DKS_S + (bhc * CR + i_b[:, None]) * N + cols[None, :], dks, mask=(i_b < VR)[:, None])
        dqf = dqr + dq_raw * ecs_b[:, None]  # dQ's rotated-domain rows of the block
        if BF16 and ROT:  # bf16 parts do not sum to the rotated block: its fp32 rows formed again in
            # the accumulator's layout from the boxes once the products are waited for (moving qv over
            # took 2 KB of scratch beside the walk's buffers, and with it the third program per SM
            # that stage42's 75800 B let in; formed before the wait, its parts spill more)
            qx, qxp, qcs, qsn = rotation_parts(q2_buf.index(slot).load(MB), q2p_buf.index(slot).load(MB),
                                               QBIAS, COS_S, SIN_S, b, h, cp, n0, S, H, RD, N, CC, R, MB)
            qr_b = rotate(qx, qxp, qcs, qsn, n0, N, MB)
        acc_cs += gl.sum(qr_b * dq_raw, axis=1)
        if FIN:
            if j % 2 == 0:
                d1 = dqf
            else:  # this block holds the partners (x2) of the last one's (x1): both finished here; their
                # pre-rotation rows formed again from the boxes (not held in registers across the products)
                if not BF16:
                    qx, qxp, qcs, qsn = rotation_parts(q2_buf.index(slot).load(MB), q2p_buf.index(slot).load(MB),
                                                       QBIAS, COS_S, SIN_S, b, h, cp, n0, S, H, RD, N, CC, R, MB)
                finish_pair(DQ, DANG, GDB_S, KIN, KBIAS, d1, dqf, qxp, qx, qcs, qsn, b, h, hq, cp, bhcp,
                            n0 - N // 2, S, H, G, RD, N, CC, R, MB, True, False, not FOLD)
        else:
            gl.store(DQR_S + (bhc * CR + i_b[:, None]) * N + cols[None, :], dqf, mask=(i_b < VR)[:, None])
    release_ring(bar2)
    if ST1:
        release_ring(bar_st, 1)
    ddacs = gl.sum(gl.reshape(acc_cs, [MT, R]), axis=1)
    tc = gl.arange(0, MT, layout=ddacs.type.layout)
    gl.store(DDACS + bh * S + c * C + tc, ddacs, mask=tc < CC)


# P = 128 (the increments as two products of 64 rows; 160 KB of shared memory, one program per
# SM, as terms_gluon at P = 128): golden-checked and timed on the H200 (benchmarks/sweep_knob.py
# --knob aux_gluon.WIDE_P=0,1 --cases N64_P128_R4_C16, records/h200-sweep-widep-read-inputs-
# N64_P128-87bed75.json: 4.122 -> 3.395 ms). stage26_widep takes it through supported's wide_p;
# this switch stays off so that stage24 / stage25 keep what their records measured
WIDE_P: bool = False


def supported(meta, wide_p: bool | None = None, chunk_pairs: bool | None = None) -> bool:
    """The shapes this kernel runs on: C*R = 64 fused rows (a warpgroup's least), P = 64 or 32
    (the increments' [P, NB] product on 64 rows; 128 too with WIDE_P), N a multiple of 32 (whole
    k / q blocks of both N walks). The kernel also computes C*R = 32 on 64 rows (the padded rows' paths are written
    and golden-checked on the H200: hopper set, hop-C8), but there it measured slower than
    stage22's aux with its wave pass: on N256_P64_R4_C8 the Gluon aux took 3383 us and the scan
    549 against 1866 us for the Triton aux and 772 for the wave pass
    (records/profile-N256_P64_R4_C8-gluonaux-db00c95/aux-c32/), so C*R = 32 keeps stage22's, unless two
    chunks run per program (``chunk_pairs``, default :data:`CHUNK_PAIRS`: :func:`chunks_per_program`)."""
    widths = (32, 64, 128) if (WIDE_P if wide_p is None else wide_p) else (32, 64)
    rows = meta.C * meta.R * chunks_per_program(meta, chunk_pairs)
    return rows == 64 and meta.P in widths and meta.N % AUX_NB1 == 0


# knob: two chunks per program where C*R = 32 (:func:`chunks_per_program`), the default of
# :func:`supported`'s and launch_aux's ``chunk_pairs``: off, C*R = 32 keeps stage22's Triton aux
CHUNK_PAIRS: bool = False


def chunks_per_program(meta, chunk_pairs: bool | None = None) -> int:
    """The kernel's CP (gluon_common.chunks_per_program) with ``chunk_pairs``, default
    :data:`CHUNK_PAIRS`."""
    return gluon_common.chunks_per_program(meta, CHUNK_PAIRS if chunk_pairs is None else chunk_pairs)


# N columns per step of the k.q^T walk and of the N walk. AUX_NB = 32 halves the second walk's
# steps (and their wgmma descriptor moves) but takes 123-139 KB of shared memory, one program
# per SM: measured +22 % for this kernel on N128_P64_R4_C16 and N128_P32_R4_C16 on an H100
# (records/h100-sweep-auxnb-68ccb02.json), so 16 stays
AUX_NB1, AUX_NB = 32, 16

# the second N walk's wgmma operands viewed per step (gluon_common.at_step): their descriptors
# formed in each step instead of hoisted out of the loop
DYN_DESC: bool = False

# the tiles this kernel copies transposed into shared memory held in layouts whose lanes run down
# their rows (the kernel's TL): ideal shared wavefronts for those copies, 2-4x fewer
# (benchmarks/ptxas_stage.py STAGE N P R C --kernel aux --banks); stage32_banks takes it
TRANSPOSE_LAYOUTS: bool = False

# knob: the states boxes [NB, P] (16-bit) in the 64-byte swizzle and the second walk's fp32 q /
# k boxes [64, 16] in the 32-byte one, instead of their rows' widths: the ROW read of the states
# and the wgmma-accumulator-layout read of q (dQ's cached-state term) take 2x their ideal shared
# wavefronts from the wider swizzles and their ideal from these (mamba3_perf.analysis.banks);
# Triton copies such a box as column slices. Golden on an H100, and the aux within 0.6 % of its
# time either way (records/h100-sweep-narrow-boxes-d8fe947.json): no stage takes it
NARROW_BOXES: bool = False

# warpgroups per program, each taking its share of every product's columns (num_warps = 4 x
# this), the second walk on AUX_NB columns a step per warpgroup, so that no TF32 wgmma has N = 8
# (Triton 3.6+ reads past its shared operand, triton#10629: tests/kernels/test_codegen.py). At P =
# 128 the aux runs one program of one warpgroup per SM (160 KB of shared memory): two warpgroups
# double the warps that hide its latency. Static, sm_90, Triton 3.6 (benchmarks/ptxas_stage.py
# stage30_stepdesc 64 128 4 16 --kernel aux --sass --knob aux_gluon.AUX_WARPGROUPS=2): 8 warps at
# 198 registers and no spills (one warpgroup: 255 and 136 B of spills), 200 KB of shared memory
# (one program per SM, as now), the second walk 659 SASS a 32-column step per warp against 745 a
# 16-column step: 0.88x the instructions per chunk across the program. At P <= 64 two programs
# of one warpgroup fit per SM already and one of two (209 registers, 136 KB) holds no more warps.
# On an H100 (records/h100-sweep-warpgroups-1273703.json, benchmarks/sweep_knob.py --cases
# N64_P128_R4_C16 --stage stage32_banks --knob aux_gluon.AUX_WARPGROUPS=1,2): golden, 1.3 % faster
# (the aux 1270 -> 1236 us); golden also with the transposed layouts on hop-P128 and hop-fp16-noD
# (tests/kernels/test_transpose_layouts.py). Swept again on the seven official shapes the aux runs
# one chunk a program on (records/h100-sweep-warpgroups-all-1c11750.json): faster only there (aux
# 1270 -> 1224 us, the whole kernel -0.9 %), the aux 29-64 % slower at P <= 64 (one program of two
# warpgroups per SM, where two of one ran). A stage for one shape's 1 % is not taken
AUX_WARPGROUPS: int = 1

# knob: slots of the first N walk's TMA ring (its q / k blocks, and with rotation their partners):
# 2 issues each step's blocks one step ahead. Nsight Compute's source page of stage32's aux on
# N128_P64_R4_C16 (records/ncu-source-stage32-h100-b73b611) has the walk's mbarrier wait as the
# kernel's most-stalled instruction (6.6 % of its samples, long scoreboard): its short steps
# (one 32-column k.q^T product each) do not cover a copy's latency. 3 on an H100: golden, the aux
# within 1 % of its time either way (records/h100-sweep-rings-a4b1997.json): no stage takes it
AUX_RING1: int = 2


# knob: the products over bf16 parts inside common.split_bf16x3 (the kernel's BF16; stage37), where
# the cached states are bf16. Compiled for sm_90: 201 registers and 80 KB of shared memory
# against 254 and 102 KB on N128_P64_R4_C16 (benchmarks/ptxas_stage.py stage37_bf16split 128 64 4
# 16 --kernel aux --knob aux_gluon.BF16=0,1). On an H200, golden in both settings, the aux 941 ->
# 846 us on N128_P64_R4_C16 and 1247 -> 1154 us on N64_P128_R4_C16, the stage 4.7 % and 4.0 %
# faster (benchmarks/sweep_knob.py --cases N128_P64_R4_C16,N64_P128_R4_C16,N256_P64_R4_C8,
# N16_P64_R4_C8 --stage stage37_bf16split --knob aux_gluon.BF16=0,1;
# records/h200-sweep-aux-bf16-e408a33.json; the last two run the Triton aux), so on
BF16: bool = True

# knob: BF16 also with two chunks a program (C*R = 32; the kernel's SPLIT_K: the increments'
# buffers in the 64-byte swizzle, where the second chunk's 32 K columns start a swizzle line).
# Compiled for sm_90 (Triton 3.6; benchmarks/ptxas_stage.py stage37_bf16split N P 4 8 --kernel
# aux --knob aux_gluon.BF16_PAIRS=0,1 --knob stage31_chunkpairs.AUX_PAIRS_MIN_P=64): on
# N128_P128_R4_C8 176 -> 131 KB of shared memory and 260 -> 116 B of spill stores at 255
# registers; on N256_P64_R4_C8 (the aux in pairs there only with AUX_PAIRS_MIN_P = 64) 255
# registers and 44 B of spills -> 188 and none, 110 -> 86 KB. On an H100, golden, with
# STATES_OPERAND (stage38_bf16aux as first written, against stage37;
# records/h100-sweep-bf16aux-1995c12.json): N128_P128_R4_C8's aux 2177 -> 1864 us; at
# N256_P64_R4_C8 the Gluon aux in pairs and the scan 1906 + 748 us against the Triton aux and its
# wave pass 1876 + 669 (slower). Off here: stage38_bf16aux takes it at P = 128
BF16_PAIRS: bool = False

# knob: with bf16 parts (BF16), the cached-state term of dQ reads the states' TMA slot as its
# wgmma B operand instead of a copy of it (the kernel's STB): no [NB, P] copy and fence a step,
# and no buffer for it (4 KB at P = 128), which brings N64_P128_R4_C16's aux from 118800 to 114704
# B of shared memory, under the 113 KB two programs per SM take, at 255 registers (ptxas, Triton
# 3.6, sm_90: benchmarks/ptxas_stage.py stage37_bf16split 64 128 4 16 --kernel aux --knob
# aux_gluon.STATES_OPERAND=1). On an H100, golden, with BF16_PAIRS (stage38_bf16aux as first
# written, against stage37): N64_P128_R4_C16's aux 1156 -> 793 us, the stage 2315 -> 1941;
# N128_P64_R4_C16's aux 917 -> 901 us (records/h100-sweep-bf16aux-1995c12.json, -N128_P64-). Off
# here: stage38_bf16aux takes it at P = 128, where it pays
STATES_OPERAND: bool = False

# knob: with STATES_OPERAND (the kernel's STB), the second walk's states in a ring of their own of
# 1 slot (the kernel's ST1) instead of in the q / k ring's 2: the next step's states issued once
# the step's dQ products are waited for, waited just before the next step's dQ products. One
# slot of CP [NB, P] bf16 blocks less (8 KB at P = 128 with two chunks a program), which brings
# N128_P128_R4_C8's aux in stage38_bf16aux from 122896 to 114712 B of shared memory: two programs
# per SM where one ran (ptxas, Triton 3.6, sm_90: benchmarks/ptxas_stage.py stage38_bf16aux 128
# 128 4 8 --kernel aux --knob aux_gluon.STATES_SLOTS=1). It gives up the states' prefetch a
# step ahead. On an H100 (stage38_bf16aux, 2 against 1, golden; records/h100-sweep-states-slots-
# 1995c12.json, -p64-): the aux 1863 -> 1513 us on N128_P128_R4_C8 (two programs per SM), 794 ->
# 786 on N64_P128_R4_C16, 901 -> 898 on N128_P64_R4_C16, 1910 -> 1959 on N256_P64_R4_C8 (slower).
# 2 here: stage38_bf16aux takes 1 at P = 128
STATES_SLOTS: int = 2

# knob: registers per thread for this kernel (its launch's maxnreg; the default of launch_aux's
# ``maxnreg``), None: ptxas's choice. At P = 64 with STATES_OPERAND and one states slot the aux
# takes 75800 B of shared memory, under the 76800 a third program per SM leaves it, at 194
# registers (two programs); 168 fits three, for 40 B of spill stores a thread (ptxas, Triton 3.6,
# sm_90: benchmarks/ptxas_stage.py stage38_bf16aux 128 64 4 16 --kernel aux --knob
# aux_gluon.STATES_OPERAND=1 --knob aux_gluon.STATES_SLOTS=1 --knob aux_gluon.MAXNREG=168).
# stage39_auxregs takes it there
MAXNREG: int | None = None


def supports_rotation(meta) -> bool:
    """Whether ``rot_inline`` applies to ``meta``: every block of both N walks inside one rotary
    half (N / 2 a multiple of AUX_NB1), so that its partners are one box."""
    return (meta.N // 2) % AUX_NB1 == 0


def launch_aux(x: dict, s: dict, out: dict, meta, *, diag_blocks: bool = False, increments: bool = False,
               rot_inline: bool = False, finish_dq: bool = False, fold_diag: bool = False,
               step_desc: bool | None = None,
               chunk_pairs: bool | None = None, transpose_layouts: bool | None = None,
               narrow_boxes: bool | None = None, bf16_pairs: bool | None = None,
               states_operand: bool | None = None, states_slots: int | None = None, maxnreg: int | None = None,
               **_ignored) -> None:
    """stage7_streamaux.launch_aux's signature, for the configuration it is written for (the
    diagonal weight blocks to GDB, the increments formed; PsiV and dPhiO it always forms from the
    inputs, whatever the pre kernel stores): anything else is an error, not a silent change of
    what is computed. ``rot_inline``: the rotated q / k rows from the 16-bit inputs, the biases and
    the pre kernel's cos / sin (s["COS"], s["SIN"]) instead of its QR / KR scratch (stage27);
    ``finish_dq`` (with it): DQ and DANGLES' q half stored here, no DQR (stage29); ``fold_diag``
    (with it, and state_terms' ``fold_diag``): the diagonal terms folded into the weighted scores,
    DFACTOR's part of them stored negated (the kernel's FOLD; stage45); ``step_desc``:
    the second N walk's operands viewed per step (:data:`DYN_DESC`, whose value is the default;
    stage30); ``chunk_pairs``: :func:`chunks_per_program`'s; ``transpose_layouts``: the kernel's TL
    (:data:`TRANSPOSE_LAYOUTS`, whose value is the default; stage32); ``narrow_boxes``: the
    states boxes in the 64-byte swizzle and the second walk's fp32 q / k boxes in the 32-byte one
    (:data:`NARROW_BOXES`, the default); ``bf16_pairs``: the bf16 parts (:data:`BF16`) with two
    chunks a program too (:data:`BF16_PAIRS`, the default); ``states_operand``: with them, the
    states' TMA slot as dQ's wgmma operand (:data:`STATES_OPERAND`, the default); ``states_slots``:
    with that, the states' ring slots (:data:`STATES_SLOTS`, the default); ``maxnreg``: registers
    per thread (:data:`MAXNREG`, the default; None: ptxas's choice)."""
    slots = STATES_SLOTS if states_slots is None else states_slots
    regs = MAXNREG if maxnreg is None else maxnreg
    if slots not in (1, 2):
        raise ValueError(f"states_slots: 1 or 2, got {slots}")
    if not (diag_blocks and increments):
        raise ValueError("the Gluon aux runs only with diag_blocks and increments (stage22's configuration "
                         f"on its shapes); got diag_blocks={diag_blocks}, increments={increments}")
    if (rot_inline or finish_dq) and not supports_rotation(meta):
        raise ValueError(f"rot_inline: N / 2 = {meta.N // 2} is not a multiple of {AUX_NB1}")
    if finish_dq and not rot_inline:
        raise ValueError("finish_dq: only with rot_inline (the pre-rotation q rows it needs are the ones it rotates)")
    if fold_diag and not finish_dq:
        raise ValueError("fold_diag: only with finish_dq (both finishings then leave the diagonal terms out)")
    N = meta.N
    cp = chunks_per_program(meta, chunk_pairs)
    if meta.C * meta.R * cp != WG_ROWS:
        raise ValueError(f"the Gluon aux runs {WG_ROWS} fused rows a program: C*R = {meta.C * meta.R} with "
                         f"{cp} chunk(s) a program")
    nb2 = AUX_NB * AUX_WARPGROUPS  # the second walk's columns a step: AUX_NB per warpgroup
    # inside common.split_bf16x3 (stage37), with bf16 cached states (exact as bf16 wgmma operands),
    # and with two chunks a program only with ``bf16_pairs``
    pairs = BF16_PAIRS if bf16_pairs is None else bf16_pairs
    bf16 = (BF16 and dot_precision(x["q"].device) == SPLIT_BF16X3 and x["states"].dtype == torch.bfloat16
            and (cp == 1 or pairs))
    sd, kw, ik = split_format(bf16)
    narrow = NARROW_BOXES if narrow_boxes is None else narrow_boxes
    stb = bf16 and bool(STATES_OPERAND if states_operand is None else states_operand)
    if rot_inline:
        qk = [input_rows(x[n], meta, [WG_ROWS, nb]) for nb in (AUX_NB1, nb2) for n in ("q", "k")]
        rot = (x["q_bias"], x["k_bias"], s["COS"], s["SIN"])
    else:
        # the second walk's fp32 boxes [64, 16] in the 32-byte swizzle with NARROW_BOXES (dQ's
        # cached-state term reads q in the wgmma accumulator layout)
        qk = [row_blocks(s[n], N, [WG_ROWS, nb], 32 if narrow and nb == AUX_NB else None)
              for nb in (AUX_NB1, nb2) for n in ("QR", "KR")]
        rot = (x["q_bias"], x["k_bias"], x["q_bias"], x["k_bias"])  # unread
    launching.launch(bwd_bwd_aux_gluon_kernel, (meta.B * meta.H * meta.nchunks // cp,))(
        *qk, row_blocks(x["states"], meta.P, [nb2, meta.P], 64 if narrow else None),
        x["qk_dot"], x["d"] if meta.has_d else x["mimo_v"], s["GAM"], s["TS"], s["ECS"], s["WT"],
        s["DPSIV"], s["DKS"], s["DQR"], s["DDP"], s["GDB"], s["DST"],
        out["DSSDA"], out["DGAMMA"], out["DDA_CS"], out["DFACTOR"],
        x["dout"], x["v"], x["mimo_v"], x["mimo_o"] if meta.reduce_o else x["mimo_v"],
        *rot, out["DQ"], out["DANGLES"], x["k"],
        meta.S, meta.H, meta.G, meta.RD, 0,
        N=N, P=meta.P, C=meta.C, R=meta.R, M=WG_ROWS, NB1=AUX_NB1, NB=nb2, PR=max(meta.P, WG_ROWS),
        HAS_D=meta.has_d, REDUCE_O=meta.reduce_o, ROT=rot_inline, FIN=finish_dq, FOLD=fold_diag,
        DYN=bool(DYN_DESC if step_desc is None else step_desc), CP=cp,
        TL=bool(TRANSPOSE_LAYOUTS if transpose_layouts is None else transpose_layouts), SL1=AUX_RING1,
        BF16=bf16, SD=sd, KW=kw, IK=ik,
        STB=stb, ST1=stb and slots == 1,
        num_warps=4 * AUX_WARPGROUPS, **({"maxnreg": regs} if regs else {}),
    )
