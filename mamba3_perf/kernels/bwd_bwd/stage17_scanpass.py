"""stage17_scanpass: stage16 with the state pass split into a parallel product and an elementwise scan.

The reverse recurrence dstates_{c-1} = dstates_c * decay_c + (dPhiO_c exp(da_cs))^T qr_c has a
term that does not depend on dstates. stage15's pass forms it inside its serial walk over the
chunks, so every one of the 128 steps on N128_P64_R4_C16 loads and splits the chunk's operands,
stages them in shared memory and runs three TF32 wgmma before the next step can start: ~4.6 us a
step, 0.6 ms in all (records/profile-N128_P64_R4_C16-stage16-91b37ca/), its loop 1262 SASS
instructions, 692 of them integer (benchmarks/ptxas_stage.py --sass). Here:

* ``pass_increment`` computes every chunk's term at once on a (B*H*nc, N / BNB) grid, no loop,
  and writes it where the pass writes that chunk's dstates (DST[c], [N, P] fp32);
* ``pass_scan`` walks the chunks per (b, h) and block of SCAN_BLOCK elements of [N, P], in
  place: u = DST[c]; DST[c] = run; run = run * decay_c + u, with the next chunks' terms loaded
  two chunks ahead, so that a step waits for no load and does no product.

The same products as stage15's pass (same precision); DST ends identical up to the rounding of
the separate add. Everything else is stage16.

Measured on the H200 with this pass on every shape (records/h200-scanpass-205f466.json, stage16
/ stage17 device time, golden 288/288): 1.02-1.06x where a chunk has C*R = 64 fused rows and
P >= 64 (N128_P64_R4_C16 4.01 -> 3.90 ms: the pass's 595 us became 331 us of increments and
148 us of scan, the scan near its HBM floor of 0.54 GB, the increment kernel at a third of
its own), 0.94-0.97x where C*R = 32 (twice the chunks, each increment a K = 32 product: the
per-program cost outweighs the work) or P = 32. So :func:`splits_pass` takes it where
C*R >= 64 and P >= 64; elsewhere this stage is stage16.
"""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.bwd_bwd import stage6_statepass, stage15_passwave, stage16_regcap
from mamba3_perf.kernels.bwd_bwd.common import chunk_coords, dot_precision, fdot, pow2, store_state_tile_t
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage

SCAN_BLOCK = 1024  # [N, P] elements per scan program
INCREMENT_LAUNCH = dict(num_warps=4, num_stages=1)
SCAN_LAUNCH = dict(num_warps=4, num_stages=1)


@triton.jit
def bwd_bwd_pass_increment_kernel(
    QR_S, DPHIO_S, ECS_S, DST_S,
    DOUT, V, MV, MO,
    S, H, N, P,
    C: tl.constexpr, R: tl.constexpr, BNB: tl.constexpr, BP: tl.constexpr, PREC: tl.constexpr,
    REDUCE_O: tl.constexpr, INPUTS: tl.constexpr,
):
    """Chunk c's term of the recurrence on N columns [j*BNB, j*BNB + BNB) and all of P, into
    DST[c] (stage6_statepass.pass_operands, as stage15's pass forms it)."""
    _b, _h, c, bh, bhc = chunk_coords(H, S // C)
    cols = tl.program_id(1) * BNB + tl.arange(0, BNB)
    p = tl.arange(0, BP)
    dphio, ecs, qr = stage6_statepass.pass_operands(QR_S, DPHIO_S, ECS_S, DOUT, V, MV, MO, bh, c, cols, p,
                                                    S, H, N, P, C, R, REDUCE_O, INPUTS)
    inc = fdot(tl.trans(dphio * ecs[:, None]), qr, PREC)  # [BP, BNB]
    store_state_tile_t(DST_S, inc, bhc, cols, p, N, P)


@triton.jit
def bwd_bwd_pass_scan_kernel(
    DECAY_S, DST_S, NP, nc,
    BLOCK: tl.constexpr,
):
    """The recurrence over the chunks of (b, h) = program 0 for [N, P] elements
    [j*BLOCK, j*BLOCK + BLOCK), in place over the terms the increment kernel left in DST: each
    chunk's slot ends holding the dstates that chunk sees. Each step loads the term of the chunk
    two steps on, so the next two are in registers when their steps begin."""
    bh = tl.program_id(0).to(tl.int64)
    e = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = e < NP
    base = DST_S + bh * nc * NP + e
    run = tl.zeros([BLOCK], dtype=tl.float32)
    u = tl.load(base + (nc - 1) * NP, mask=m, other=0.0)
    u_next = tl.load(base + (nc - 2) * NP, mask=m & (tl.full([BLOCK], nc, tl.int32) > 1), other=0.0)
    for cc in range(0, nc):
        c = nc - 1 - cc
        u_ahead = tl.load(base + (c - 2) * NP, mask=m & (tl.full([BLOCK], c, tl.int32) >= 2), other=0.0)
        decay = tl.load(DECAY_S + bh * nc + c)
        tl.store(base + c * NP, run, mask=m)
        run = run * decay + u
        u = u_next
        u_next = u_ahead


def launch_increments(x: dict, s: dict, meta, *, inputs: bool = False) -> None:
    """Every chunk's term of the recurrence into DST (bwd_bwd_pass_increment_kernel)."""
    bnb = stage15_passwave.wave_block(meta)
    launching.launch(bwd_bwd_pass_increment_kernel, (meta.B * meta.H * meta.nchunks, triton.cdiv(meta.N, bnb)))(
        s["QR"], s["DPHIO"], s["ECS"], s["DST"],
        *stage6_statepass.value_inputs(x),
        meta.S, meta.H, meta.N, meta.P,
        C=meta.C, R=meta.R, BNB=bnb, BP=pow2(meta.P), PREC=dot_precision(x["q"].device),
        REDUCE_O=meta.reduce_o, INPUTS=inputs, **INCREMENT_LAUNCH,
    )


def launch_scan(x: dict, s: dict, meta, *, inputs: bool = False) -> None:
    """The in-place scan over the terms DST holds (stage6_statepass.launch_state_pass's
    signature; ``inputs`` is unused: the scan reads only DST and DECAY)."""
    n_p = meta.N * meta.P
    launching.launch(bwd_bwd_pass_scan_kernel, (meta.B * meta.H, triton.cdiv(n_p, SCAN_BLOCK)))(
        s["DECAY"], s["DST"], n_p, meta.nchunks, BLOCK=SCAN_BLOCK, **SCAN_LAUNCH,
    )


def launch_scan_pass(x: dict, s: dict, meta, *, inputs: bool = False) -> None:
    """stage6_statepass.launch_state_pass's signature: the increments, then the scan."""
    launch_increments(x, s, meta, inputs=inputs)
    launch_scan(x, s, meta, inputs=inputs)


def splits_pass(meta) -> bool:
    """Whether the state pass runs as increments + scan for ``meta``: C*R >= 64 fused rows and
    P >= 64, where it measured faster (module docstring)."""
    return meta.C * meta.R >= 64 and meta.P >= 64


def run_with(x: dict, out: dict, meta, *, aux_increments: bool = False, split: bool | None = None,
             **kw) -> None:
    """stage17's pipeline; ``aux_increments``: where the pass splits, the aux forms the
    increments and only the scan is launched here (stage20); ``split``: whether the pass splits,
    in place of :func:`splits_pass` (stage24); ``kw``: more stage16_regcap.run_with keywords
    (stage18)."""
    if not (splits_pass(meta) if split is None else split):
        stage16_regcap.run_with(x, out, meta, **kw)
    elif aux_increments:
        stage16_regcap.run_with(x, out, meta, state_pass=launch_scan, aux_increments=True, **kw)
    else:
        stage16_regcap.run_with(x, out, meta, state_pass=launch_scan_pass, **kw)


def run(x: dict, out: dict, meta) -> None:
    run_with(x, out, meta)


_S16 = stage16_regcap.STAGE.kernels
_SCAN = [k.tag for k in _S16].index(Tag.SCAN)
STAGE = register_stage(StageSpec(
    name="stage17_scanpass",
    parent="stage16_regcap",
    summary="the state pass as every chunk's increment at once (a parallel product) and an "
            "elementwise in-place scan with its loads two chunks ahead",
    entry=run,
    # stage16's state pass kernels stay in the list: the shapes outside splits_pass launch them
    kernels=_S16[:_SCAN] + (
        KernelSpec("bwd_bwd_pass_increment_kernel", Tag.AUX, "each chunk's dstates increment, (dPhiO e)^T qr"),
        KernelSpec("bwd_bwd_pass_scan_kernel", Tag.SCAN, "elementwise in-place reverse scan over the chunks"),
    ) + _S16[_SCAN:],
    zero_outputs=False,
))
