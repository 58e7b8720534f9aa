"""stage20_auxinc: stage19 with the dstates increments formed in the streamed aux.

stage17 split the state pass into a parallel increment kernel, every chunk's term
(dPhiO exp(da_cs))^T qr of the reverse recurrence into DST[c], and an elementwise scan. The
increment kernel loads the chunk's qr rows and dPhiO again: the aux's second N loop already
holds both (qr for dK and the cached-state term of dQ, dPhiO for that term). Here that loop also
forms the increment on each [C*R, 16] block of qr it loads, one more [P, C*R] x [C*R, 16] dot per
block, and stores it to DST[c] (bwd_bwd_aux_streamed_kernel's INCREMENTS); the pass is the scan
alone. Where stage17
keeps stage15's or stage6's pass (:func:`stage17_scanpass.splits_pass` false) this stage is
stage19.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage19_splitdot
from mamba3_perf.kernels.registry import StageSpec, register_stage


def forms_increments(meta) -> bool:
    """Whether the aux forms the increments for ``meta`` (module docstring): where its [C*R, P]
    operands have fewer than stage19_splitdot.AUX_ELEMS elements, the aux stage19 splits."""
    return stage19_splitdot.splits_aux(meta)


def run_with(x: dict, out: dict, meta, **kw) -> None:
    """stage20's pipeline; ``kw``: more stage19_splitdot.run_with keywords (stage21)."""
    stage19_splitdot.run_with(x, out, meta, aux_increments=forms_increments(meta), **kw)


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
