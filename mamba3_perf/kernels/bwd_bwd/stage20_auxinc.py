"""stage20_auxinc: stage19 with the dstates increments formed in the streamed aux.

stage17 split the state pass into a parallel increment kernel, every chunk's term
(dPhiO exp(da_cs))^T qr of the reverse recurrence into DST[c], and an elementwise scan. The
increment kernel loads the chunk's qr rows and forms dPhiO again: the aux's second N loop
already holds both (qr for dK and the cached-state term of dQ, dPhiO for that term). Here that
loop also forms the increment on each [C*R, 16] block of qr it loads, one more
[P, C*R] x [C*R, 16] dot per block, and stores it to DST[c] (bwd_bwd_aux_streamed_kernel's
INCREMENTS); the pass is the scan alone. Where stage17 keeps stage15's or stage6's pass
(stage17_scanpass.splits_pass false) this stage is stage19.

Measured on the H200 (`perf profile`, per-kernel device time, golden all passed):

* where in the aux (records/profile-*-auxinc-0c0fbf8/): in the first N loop (beside k.q^T) the
  aux grew 1357 -> 1832 us on N128_P64_R4_C16 against the increment kernel's 330, in the second
  1357 -> 1628, in a third loop of its own (qr loaded again) 1357 -> 1703; on N64_P128_R4_C16,
  whose [C*R, P] operands fill the aux's registers, every placement lost (aux 2091 -> 2556 at
  best, increments 297);
* the second-loop placement against stage19 on every shape (records/profile-grid-halves-4091bbf/,
  both stages in one process): 1.005-1.019x where the pass splits and C*R*P < 8192
  (N128_P64_R4_C16 3788 -> 3718 us: aux 1355 -> 1610, increments 329 -> 0; N128_P64_R8_C8
  1.018x, N128_P64_R2_C32 1.014x, N64_P64_R4_C16 1.008x, N128_P64_R1_C64 1.006x,
  regular-8x512x16x8 1.005x), 0.993x on N32_P64_R4_C16 (aux +97 us against 87 of increments;
  left in: stage21's records were measured with it).

So :func:`forms_increments` takes it where the aux's [C*R, P] operands have fewer than 8192
elements (stage19_splitdot.splits_aux's bound, the same register limit).
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage19_splitdot
from mamba3_perf.kernels.registry import StageSpec, register_stage


def forms_increments(meta) -> bool:
    """Whether the aux forms the increments for ``meta`` (module docstring): where its [C*R, P]
    operands have fewer than stage19_splitdot.AUX_ELEMS elements, the aux stage19 splits."""
    return stage19_splitdot.splits_aux(meta)


def run_with(x: dict, out: dict, meta, *, aux_increments: bool | None = None, **kw) -> None:
    """stage20's pipeline; ``aux_increments``: whether the aux forms the increments (None:
    :func:`forms_increments`; stage24's Gluon aux always does); ``kw``: more
    stage19_splitdot.run_with keywords (stage21)."""
    inc = forms_increments(meta) if aux_increments is None else aux_increments
    stage19_splitdot.run_with(x, out, meta, aux_increments=inc, **kw)


def run(x: dict, out: dict, meta) -> None:
    run_with(x, out, meta)


_S19 = stage19_splitdot.STAGE.kernels
STAGE = register_stage(StageSpec(
    name="stage20_auxinc",
    parent="stage19_splitdot",
    summary="the dstates recurrence's chunk terms formed in the aux's second N loop, which holds "
            "qr and dPhiO already; the state pass is the elementwise scan alone",
    entry=run,
    kernels=_S19,
    zero_outputs=False,
))
