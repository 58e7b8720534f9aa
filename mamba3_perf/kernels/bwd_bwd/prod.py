"""prod: a ``post`` kernel on (B,H,nchunks) does the inverse rotary, the q/k diagonal
correction and DANGLES, so the serial scan only writes dK in the rotated domain; every output
is fully written, so none is zero-filled first (torch.empty). The post kernel reads all its
operands from scratch, so it gathers rotate-half partners by address (no permutation dots):
that is what lets prod run at N=256, where the [N, N] permutation operand of the in-register
finish needs 256 KB of shared memory."""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.bwd_bwd import stage1_pre, stage4_nblock, stage5_rankloop
from mamba3_perf.kernels.bwd_bwd.common import (
    AUX_SCRATCH, CHUNK_LAUNCH, PRE_SCRATCH, alloc_scratch, angle_grad_pair, blocks, chunk_frame,
    load_angles_cs,
    load_biased_rows, load_rows, rot_cols, rows_to_time, sub_chunk,
)
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage


@triton.jit
def _rows_at(X, bhc, i, cols, mask, ncols, CR: tl.constexpr):
    """X[bhc, i, cols] of a fused-row scratch buffer, 0 where ``mask`` is false (load_rows
    with a mask other than cols < ncols: the angle columns j < RD and j + N/2)."""
    return tl.load(X + (bhc * CR + i[:, None]) * ncols + cols[None, :], mask=mask[None, :], other=0.0)


@triton.jit
def _angle_grad(x1, x2, DX_S, bhc, i, j, jp, mj, cj, sj, N, CR: tl.constexpr):
    """d(loss)/d(angle j) per row through the rotation of x (pre-rotation columns x1 = x[:, j],
    x2 = x[:, jp], jp = j + N/2)."""
    return angle_grad_pair(_rows_at(DX_S, bhc, i, j, mj, N, CR), _rows_at(DX_S, bhc, i, jp, mj, N, CR),
                           x1, x2, cj, sj)


@triton.jit
def bwd_bwd_post_kernel(
    ANG, QB_S, KB_S, DQR_S, DKR_S, DQD_S, DKD_S,
    DQ, DK, DANG,
    Q, K, QBIAS, KBIAS,
    S, H, G, N, RD,
    C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, BRD: tl.constexpr, INPUTS: tl.constexpr,
):
    """Everything here reads scratch, so the rotate-half partner columns are gathered by
    address instead of the permutation / fold dots the in-register finish needs
    (:func:`common.finalize_qk`): no [BN, BN] operand in shared memory, any N. INPUTS
    (stage10): the pre-rotation q / k come from the inputs, not the pre kernel's QB / KB."""
    b, h, c, bh, bhc, i, _ti, ri, tpos, tc = chunk_frame(S, H, C, R)
    CR: tl.constexpr = C * R
    n, partner, sgn, jn, rot = rot_cols(N, RD, BN)
    mn = n < N
    cs, sn = load_angles_cs(ANG, b, h, tpos, n, jn, rot, S, H, N, RD)
    orow = ((b * S * R + c * CR + i[:, None]) * H + h) * N + n[None, :]
    dq = (cs * load_rows(DQR_S, bhc, i, n, N, CR)
          - sgn[None, :] * sn * load_rows(DQR_S, bhc, i, partner, N, CR)
          + load_rows(DQD_S, bhc, i, n, N, CR))
    tl.store(DQ + orow, dq.to(DQ.dtype.element_ty), mask=mn[None, :])
    dk = (cs * load_rows(DKR_S, bhc, i, n, N, CR)
          - sgn[None, :] * sn * load_rows(DKR_S, bhc, i, partner, N, CR)
          + load_rows(DKD_S, bhc, i, n, N, CR))
    tl.store(DK + orow, dk.to(DK.dtype.element_ty), mask=mn[None, :])
    # DANGLES per angle j: both columns it rotates, j and j + N/2
    # (xr_j = cos x_j - sin x_j', xr_j' = cos x_j' + sin x_j with j' = j + N/2)
    j = tl.arange(0, BRD)
    mj = j < RD
    jp = j + N // 2
    a = tl.load(ANG + ((b * S + tpos[:, None]) * H + h) * RD + j[None, :], mask=mj[None, :], other=0.0)
    cj = tl.cos(a)
    sj = tl.sin(a)
    if INPUTS:
        hq = h // (H // G)
        q1 = load_biased_rows(Q, QBIAS, b, h, hq, tpos, ri, j, S, G, N, R)
        q2 = load_biased_rows(Q, QBIAS, b, h, hq, tpos, ri, jp, S, G, N, R)
        k1 = load_biased_rows(K, KBIAS, b, h, hq, tpos, ri, j, S, G, N, R)
        k2 = load_biased_rows(K, KBIAS, b, h, hq, tpos, ri, jp, S, G, N, R)
    else:
        q1 = _rows_at(QB_S, bhc, i, j, mj, N, CR)
        q2 = _rows_at(QB_S, bhc, i, jp, mj, N, CR)
        k1 = _rows_at(KB_S, bhc, i, j, mj, N, CR)
        k2 = _rows_at(KB_S, bhc, i, jp, mj, N, CR)
    g = (_angle_grad(q1, q2, DQR_S, bhc, i, j, jp, mj, cj, sj, N, CR)
         + _angle_grad(k1, k2, DKR_S, bhc, i, j, jp, mj, cj, sj, N, CR))
    tl.store(DANG + ((b * S + c * C + tc[:, None]) * H + h) * RD + j[None, :],
             rows_to_time(g, C, R, BRD), mask=mj[None, :])


def launch_post(x: dict, s: dict, out: dict, meta, *, inputs: bool = False, kernel=None,
                diag_blocks: bool | None = None, launch: dict | None = None, steps: int | None = None,
                heads_inner: bool = False, k_done: bool = False) -> None:
    """``inputs``: the pre-rotation q / k from the inputs instead of QB / KB scratch (stage10);
    ``kernel``: another post kernel of the same signature (stage11); ``diag_blocks``: for a
    kernel that also takes GDB_S and DIAG_BLOCKS (stage11's), whether it forms the diagonal
    terms from s["GDB"] (stage13); ``launch``: its launch options (default CHUNK_LAUNCH;
    stage18); ``steps``: time steps per program, a divisor of the chunk size (default: the whole
    chunk; stage25). Every post kernel reads per-step rows only (each step's C*R fused rows of the
    scratch, its angles, its diagonal weight block), and a chunk's rows are contiguous in every
    scratch buffer, so launching it with C = ``steps`` (and that many more programs) splits each
    chunk into sub-chunks with nothing else changed. ``heads_inner``: for a ``kernel`` that
    takes HEADS_INNER (stage11's and stage21's), program ids in (b, chunk, head) order (common.chunk_coords).
    ``k_done``: for the same kernels, K_DONE: state_terms stored DK and DANGLES' k half (stage28)."""
    meta = sub_chunk(meta, steps)
    bk = blocks(meta)
    extra = {} if diag_blocks is None else dict(GDB_S=s["GDB"] if diag_blocks else out["DANGLES"],
                                                DIAG_BLOCKS=diag_blocks)
    if heads_inner:
        extra["HEADS_INNER"] = True
    if k_done:
        extra["K_DONE"] = True
    launching.launch(kernel or bwd_bwd_post_kernel, (meta.B * meta.H * meta.nchunks,))(
        x["angles"], s["QB"], s["KB"], s["DQR"], s["DKR"], s["DQD"], s["DKD"],
        out["DQ"], out["DK"], out["DANGLES"],
        x["q"], x["k"], x["q_bias"], x["k_bias"],
        meta.S, meta.H, meta.G, meta.N, meta.RD,
        C=meta.C, R=meta.R, BN=bk["BN"], BRD=bk["BRD"], INPUTS=inputs, **extra, **(launch or CHUNK_LAUNCH),
    )


def run(x: dict, out: dict, meta) -> None:
    s = alloc_scratch(meta, x["q"].device, PRE_SCRATCH + AUX_SCRATCH + ("DKR",))
    stage1_pre.launch_pre(x, s, meta)
    stage5_rankloop.launch_aux(x, s, out, meta)
    stage4_nblock.launch_scan_for(x, s, out, meta, finalize=False)
    launch_post(x, s, out, meta)


STAGE = register_stage(StageSpec(
    name="prod",
    parent="stage5_rankloop",
    summary="post kernel (B,H,nchunks) does inverse rotary, q/k diagonal correction and DANGLES; outputs torch.empty",
    entry=run,
    kernels=stage4_nblock.STAGE.kernels + (
        KernelSpec("bwd_bwd_post_kernel", Tag.POST, "inverse rotary, diagonal correction, DANGLES"),),
    zero_outputs=False,
))
