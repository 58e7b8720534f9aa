"""stage33_chunksum: stage32 with the chunks' DMIMO_V and D parts summed by a wide kernel.

stage6's chunk_sum adds each (b, h)'s nc parts of DMIMO_V ([R, P] a chunk) and D in one program
of B*H: 64 programs on the official grid, each walking its nc chunks one [R, P] tile at a time.
On an H100 it takes 17 us where a chunk has C = 16 steps and 33-93 us at C = 8 (256 chunks; R = 8
or P = 128: 92 us on N128_P128_R4_C8, 93 on N128_P64_R8_C8), 1.2-2.5 % of stage32's time
(records/profile-*-stage32-*/) for 8-34 MB read. Here a (B*H, R*P / BLOCK) grid of programs
each sums one BLOCK of the [R, P] elements over the chunks, CHUNKS chunks a load: the same sums
in another order (fp32), every chunk's part read once. Everything else is stage32; this kernel is
portable Triton (it runs on the interpreter, Ascend and any GPU, after stage32's kernels there).
"""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.bwd_bwd import stage25_subchunk, stage32_banks
from mamba3_perf.kernels.bwd_bwd.common import scalar_ptr_or_dummy
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage


@triton.jit
def bwd_bwd_chunk_sum_wide_kernel(
    DMVP_S, DDP_S,  # each chunk's DMIMO_V part [B*H, nc, R*P]; D part [B*H, nc]
    DMV, DD,  # DMIMO_V [B, H, R, P]; DD [B, H]
    nc, RP,
    BLOCK: tl.constexpr, CHUNKS: tl.constexpr, HAS_D: tl.constexpr,
):
    """Program (bh, j): DMIMO_V[bh] elements [j*BLOCK, j*BLOCK + BLOCK) of its R*P, the sum of
    the chunks' parts, CHUNKS chunks a load; program j = 0 also DD[bh]."""
    bh = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    e = j * BLOCK + tl.arange(0, BLOCK)
    me = e < RP
    ch = tl.arange(0, CHUNKS)
    acc = tl.zeros([CHUNKS, BLOCK], dtype=tl.float32)
    for c0 in range(0, nc, CHUNKS):
        c = c0 + ch
        acc += tl.load(DMVP_S + (bh * nc + c[:, None]) * RP + e[None, :], mask=(c < nc)[:, None] & me[None, :],
                       other=0.0)
    tl.store(DMV + bh * RP + e, tl.sum(acc, axis=0), mask=me)
    if HAS_D:
        if j == 0:
            dd = tl.zeros([CHUNKS], dtype=tl.float32)
            for c0 in range(0, nc, CHUNKS):
                c = c0 + ch
                dd += tl.load(DDP_S + bh * nc + c, mask=c < nc, other=0.0)
            tl.store(DD + bh, tl.sum(dd, axis=0))


BLOCK = 128  # [R, P] elements a program
CHUNKS = 16  # chunks a load: [CHUNKS, BLOCK] fp32, 16 a thread at 4 warps


def launch_chunk_sum_wide(x: dict, s: dict, out: dict, meta) -> None:
    """stage6_statepass.launch_chunk_sum's signature and outputs, on a (B*H, R*P / BLOCK) grid."""
    rp = meta.R * meta.P
    launching.launch(bwd_bwd_chunk_sum_wide_kernel, (meta.B * meta.H, triton.cdiv(rp, BLOCK)))(
        s["DMVP"], s["DDP"], out["DMIMO_V"], scalar_ptr_or_dummy(out["DD"], out["DMIMO_V"]),
        meta.nchunks, rp,
        BLOCK=BLOCK, CHUNKS=CHUNKS, HAS_D=meta.has_d, num_warps=4,
    )


def plan(x: dict, meta) -> dict:
    """This stage's keywords over stage25's: stage32's, and the wide chunk sum."""
    return dict(stage32_banks.plan(x, meta), chunk_sum=launch_chunk_sum_wide)


def run(x: dict, out: dict, meta) -> None:
    stage25_subchunk.run_with(x, out, meta, **plan(x, meta))


STAGE = register_stage(StageSpec(
    name="stage33_chunksum",
    parent="stage32_banks",
    summary="stage32 with the chunks' DMIMO_V and D parts summed on a (B*H, R*P/128) grid, 16 "
            "chunks a load, instead of one program per (b, h) walking its chunks",
    entry=run,
    kernels=tuple(k for k in stage32_banks.STAGE.kernels if k.name != "bwd_bwd_chunk_sum_kernel")
    + (KernelSpec("bwd_bwd_chunk_sum_wide_kernel", Tag.POST, "DMIMO_V and DD chunk sums, wide grid"),),
    zero_outputs=False,
))
