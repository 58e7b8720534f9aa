"""stage15_passwave: the state pass in one wave, each program on all of P.

stage6's state pass runs the dstates recurrence on [32, 32] tiles: B*H * N/32 * P/32 programs
(512 on N128_P64_R4_C16), each walking every chunk. At 255 registers and 4 warps two programs
fit an SM, so on the H200's 132 SMs those 512 programs run in two waves, and each program
recomputes its chunk's dPhiO columns from dout for its own P block. Here a program keeps a
[P, BNB] tile of dstates transposed, so that its increment dPhiO^T (qr) has P rows, the
operand order wgmma takes (stage6's [32, CR] x [CR, 32] runs mma.sync), and takes all of P at
once: B*H * N/BNB programs, BNB = 32 up to N = 128 and 64 beyond (256 programs at B*H = 64 on
the official grid's N = 128 and 256), one wave. Everything else is stage14.

Measured on the H200 with this pass on every shape (records/h200-passwave-3465c15.json, stage14
/ stage15 device time): 1.02-1.05x on the seven shapes where stage6's pass took two waves or
more and this one still fills the SMs (N128_P64_R4_C16: state pass 701 -> 594 us, its executed
instructions 320 M -> 113 M by ncu: the pass is bound by its serial chain of 128 steps, ~4.6 us
each, not by instructions), 0.89-0.99x where stage6's pass was one wave already (N <= 64 at
P = 64, N128_P32) or where this one leaves SMs idle (N64_P128_R4_C16: 128 programs, and spills
at P = 128). So :func:`uses_wave` takes it only where stage6's pass needs more than
2 x 132 programs (two per SM of the H200, where this was measured) and this one at least
132; elsewhere this stage is stage14.
"""
from __future__ import annotations

import triton
import triton.language as tl

from mamba3_perf.kernels import launching
from mamba3_perf.kernels.bwd_bwd import (
    stage6_statepass, stage11_steptrig, stage12_pipeaux, stage13_diagpost, stage14_latesums,
)
from mamba3_perf.kernels.bwd_bwd.common import dot_precision, pow2
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage


@triton.jit
def bwd_bwd_state_pass_wave_kernel(
    QR_S, DPHIO_S, ECS_S, DECAY_S, DST_S,
    DOUT, V, MV, MO,
    S, H, N, P,
    C: tl.constexpr, R: tl.constexpr, BNB: tl.constexpr, BP: tl.constexpr, PREC: tl.constexpr,
    REDUCE_O: tl.constexpr, INPUTS: tl.constexpr,
):
    """stage6's state pass on a (B*H, N/BNB) grid of transposed [BP, BNB] dstates tiles, all of P
    per program (stage6_statepass.state_pass_loop with TRANS)."""
    stage6_statepass.state_pass_loop(QR_S, DPHIO_S, ECS_S, DECAY_S, DST_S, DOUT, V, MV, MO,
                                     tl.program_id(0).to(tl.int64), tl.program_id(1) * BNB + tl.arange(0, BNB),
                                     tl.arange(0, BP), S, H, N, P, C, R, BNB, BP, PREC, REDUCE_O, INPUTS, True)


H200_SMS = 132  # the SMs of the device the rule below was measured on


def uses_wave(meta) -> bool:
    """Whether the state pass runs on transposed [P, BNB] tiles for ``meta``: where stage6's pass
    launches more than two programs per SM of the H200 (more than one wave) and this one at
    least one per SM (module docstring)."""
    bh = meta.B * meta.H
    tn, tp = stage6_statepass.pass_tiles(meta)
    stage6_programs = bh * triton.cdiv(meta.N, tn) * triton.cdiv(meta.P, tp)
    return stage6_programs > 2 * H200_SMS and bh * triton.cdiv(meta.N, wave_block(meta)) >= H200_SMS


# knob: BNB in place of wave_block's rule. At N = 256 the rule's 64 columns
# give B*H * 4 = 256 programs of 254 registers (ncu, records/ncu-stage26-4fc1088: two per SM,
# 0.97 waves, 783 us on N256_P64_R4_C8); 32 gives twice the programs, each on half the columns.
# Measured on stage26 on an H100 (records/h100-sweep-wavebnb-d57951a.json): the pass 791 -> 1006
# us a call there with 32, the stage 6477 -> 6685 us; the rule stays.
WAVE_BNB: int | None = None


def wave_block(meta) -> int:
    """BNB: 32 columns of N up to N = 128, 64 beyond (at least 16, the dot's least), or
    :data:`WAVE_BNB` where set."""
    return min(pow2(meta.N), WAVE_BNB or (32 if meta.N <= 128 else 64))


def launch_state_pass_wave(x: dict, s: dict, meta, *, inputs: bool = False) -> None:
    """stage6_statepass.launch_state_pass's signature; ``inputs``: dPhiO from the inputs."""
    bnb = wave_block(meta)
    launching.launch(bwd_bwd_state_pass_wave_kernel, (meta.B * meta.H, triton.cdiv(meta.N, bnb)))(
        s["QR"], s["DPHIO"], s["ECS"], s["DECAY"], s["DST"],
        *stage6_statepass.value_inputs(x),
        meta.S, meta.H, meta.N, meta.P,
        C=meta.C, R=meta.R, BNB=bnb, BP=pow2(meta.P), PREC=dot_precision(x["q"].device),
        REDUCE_O=meta.reduce_o, INPUTS=inputs, **stage6_statepass.PASS_LAUNCH,
    )


def run_with(x: dict, out: dict, meta, *, aux_launch: dict | None = None, state_pass=None, **kw) -> None:
    """stage15's pipeline; ``aux_launch``: the streamed aux's launch options (default
    stage12_pipeaux.aux_launch); ``state_pass``: the state pass's launcher in place of this
    stage's choice (stage17); ``kw``: more stage11_steptrig.run_with keywords (stage16)."""
    if state_pass is None:
        state_pass = launch_state_pass_wave if uses_wave(meta) else None
    stage11_steptrig.run_with(x, out, meta, aux_launch=aux_launch or stage12_pipeaux.aux_launch(meta),
                              diag_blocks=stage13_diagpost.moves_diagonal(meta),
                              late_sums=stage14_latesums.sums_late(meta), state_pass=state_pass, **kw)


def run(x: dict, out: dict, meta) -> None:
    run_with(x, out, meta)


_S14 = stage14_latesums.STAGE.kernels
STAGE = register_stage(StageSpec(
    name="stage15_passwave",
    parent="stage14_latesums",
    summary="the state pass keeps a transposed [P, 32] dstates tile per program: one wave of "
            "programs, the increment's dot with P rows (wgmma), dPhiO formed once per chunk",
    entry=run,
    # stage6's state pass stays in the list: the shapes outside uses_wave launch it
    kernels=_S14[:2] + (KernelSpec("bwd_bwd_state_pass_wave_kernel", Tag.SCAN, "elementwise dstates recurrence, "
                                   "transposed [P, BNB] tiles"),) + _S14[2:],
    zero_outputs=False,
))
