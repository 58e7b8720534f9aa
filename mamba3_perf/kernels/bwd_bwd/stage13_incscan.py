"""stage13_incscan: the dstates increments come from the aux; the serial pass only adds them up.

stage6's state pass walks the chunks of each (b, h) serially and, at every step, computes the
chunk's increment qr^T (dPhiO * exp(da_cs)) with a dot before it can take the next step: on the
H200 that kernel executed 320 M warp instructions on N128_P64_R4_C16 (27 % of stage12's,
records/ncu-N128_P64_R4_C16/stage12_pipeaux-details.csv) at 255 registers and two programs per
SM, 711 us of device time (records/profile-N128_P64_R4_C16-stage12-2dd9b64/). Only the
``dstates * decay`` is serial. Here the streamed aux, which already holds the chunk's dPhiO,
exp(da_cs) and each 16-column block of qr, also computes that increment (one more dot per N
block, ``INC``) and stores it where the dstates of the chunk go (DST[c]); the scan kernel then
runs ``run = run * decay_c + inc_c`` in place over DST, elementwise on (B*H, N*P / SCAN_BLOCK)
programs, each element's next increment loaded a step ahead. No new scratch: DST holds the
increments until the scan overwrites each with the dstates that chunk sees.

Where the aux does not fold (C*R > 64, not on the official grid) this stage runs stage12.
"""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels.bwd_bwd import stage7_streamaux, stage11_steptrig, stage12_pipeaux
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage

SCAN_BLOCK = 512  # elements of [N, P] per scan program (4 per thread on 4 warps)
SCAN_LAUNCH = dict(num_warps=4, num_stages=1)


@triton.jit
def bwd_bwd_state_scan_kernel(DECAY_S, DST_S, S, NP, C: tl.constexpr, BLOCK: tl.constexpr):
    """In place over one (b, h) and BLOCK elements of [N, P]: DST[c] holds chunk c's increment
    and becomes the dstates chunk c sees (run = 0 at the last chunk; from chunk c to c - 1,
    run = run * decay_c + inc_c)."""
    bh = tl.program_id(0).to(tl.int64)
    e = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = e < NP
    nc = S // C
    base = DST_S + bh * nc * NP + e
    run = tl.zeros([BLOCK], dtype=tl.float32)
    inc = tl.load(base + (nc - 1) * NP, mask=m, other=0.0)
    for cc in range(0, nc):
        c = nc - 1 - cc
        nxt = tl.load(base + tl.maximum(c - 1, 0) * NP, mask=m, other=0.0)  # unused after c = 0
        decay = tl.load(DECAY_S + bh * nc + c)
        tl.store(base + c * NP, run, mask=m)
        run = run * decay + inc
        inc = nxt


def launch_state_scan(s: dict, meta) -> None:
    np_ = meta.N * meta.P
    bwd_bwd_state_scan_kernel[(meta.B * meta.H, triton.cdiv(np_, SCAN_BLOCK))](
        s["DECAY"], s["DST"], meta.S, np_, C=meta.C, BLOCK=SCAN_BLOCK, **SCAN_LAUNCH,
    )


def run(x: dict, out: dict, meta) -> None:
    stage11_steptrig.run_with(x, out, meta, aux_launch=stage12_pipeaux.aux_launch(meta),
                              scan=launch_state_scan)


_S12 = stage12_pipeaux.STAGE.kernels
STAGE = register_stage(StageSpec(
    name="stage13_incscan",
    parent="stage12_pipeaux",
    summary="the streamed aux also writes each chunk's dstates increment; the serial pass is an "
            "elementwise in-place scan over them (no dot in the serial chain)",
    entry=run,
    kernels=_S12[:2] + (KernelSpec("bwd_bwd_state_scan_kernel", Tag.SCAN,
                                   "elementwise in-place dstates scan over the aux's increments"),)
    + _S12[2:],
    zero_outputs=False,
))
