"""prod: a ``post`` kernel on (B,H,nchunks) does the inverse rotary, the q/k diagonal
correction and DANGLES, so the serial scan only writes dK in the rotated domain; every output
is fully written, so none is zero-filled first (torch.empty)."""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels.bwd_bwd import stage1_pre, stage4_nblock, stage5_rankloop
from mamba3_perf.kernels.bwd_bwd.common import (
    AUX_SCRATCH, CHUNK_LAUNCH, PRE_SCRATCH, alloc_scratch, blocks, chunk_coords, dot_precision,
    finalize_qk, load_angles_cs, load_rows, rot_cols,
)
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage


@triton.jit
def bwd_bwd_post_kernel(
    ANG, QB_S, KB_S, DQR_S, DKR_S, DQD_S, DKD_S,
    DQ, DK, DANG,
    S, H, N, RD,
    C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, BRD: tl.constexpr, PREC: tl.constexpr,
):
    nc = S // C
    b, h, c, bh, bhc = chunk_coords(H, nc)
    CR: tl.constexpr = C * R
    i = tl.arange(0, CR)
    tpos = c * C + i // R
    n, partner, sgn, jn, rot = rot_cols(N, RD, BN)
    cs, sn = load_angles_cs(ANG, b, h, tpos, n, jn, rot, S, H, N, RD)
    finalize_qk(DQ, DK, DANG, load_rows(DQR_S, bhc, i, n, N, CR), load_rows(DKR_S, bhc, i, n, N, CR),
                load_rows(QB_S, bhc, i, n, N, CR), load_rows(QB_S, bhc, i, partner, N, CR),
                load_rows(KB_S, bhc, i, n, N, CR), load_rows(KB_S, bhc, i, partner, N, CR),
                cs, sn, load_rows(DQD_S, bhc, i, n, N, CR), load_rows(DKD_S, bhc, i, n, N, CR),
                b, h, c, i, n, partner, sgn, jn, rot, S, H, N, RD, C, R, BN, BRD, PREC)


def launch_post(x: dict, s: dict, out: dict, meta) -> None:
    bk = blocks(meta)
    bwd_bwd_post_kernel[(meta.B * meta.H * meta.nchunks,)](
        x["angles"], s["QB"], s["KB"], s["DQR"], s["DKR"], s["DQD"], s["DKD"],
        out["DQ"], out["DK"], out["DANGLES"],
        meta.S, meta.H, meta.N, meta.RD,
        C=meta.C, R=meta.R, BN=bk["BN"], BRD=bk["BRD"], PREC=dot_precision(x["q"].device),
        **CHUNK_LAUNCH,
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
