"""stage24_gluonaux: stage23 with the streamed aux as a Gluon kernel on Hopper GPUs.

After stage23 the streamed aux is the largest kernel (1523 of 3022 us on N128_P64_R4_C16,
records/profile-gluonterms-3c7c395/): 255 registers, two 4-warp programs per SM, spills, its two
N walks loading each block when it needs it. aux_gluon.bwd_bwd_aux_gluon_kernel does the same
products with the operands staged by hand (aux_gluon's docstring): k / q / state blocks by TMA
with the next in flight, the loop-invariant operands (dPhiO and the weighted scores, TF32 parts)
in shared memory or registers once per chunk, every product on asynchronous wgmma. Where it
applies (:func:`uses_gluon_aux`: a Hopper GPU, aux_gluon.supported, and stage22's aux
configuration there: the diagonal weight blocks, the increments)
this stage is stage23 with that kernel; elsewhere it is stage23.

ptxas (Triton 3.6, N128_P64_R4_C16): 255 registers, 84 B of spill stores (stage22's aux: 572),
100 KB of shared memory, two programs per SM. Measured on the H200, the aux alone, stage23 and
stage24 in one process (records/profile-gluonaux-e0b9914/): 1512 -> 1102 us on N128_P64_R4_C16,
3052 -> 2162 on N128_P64_R8_C8, 425 -> 326 on N128_P64_R1_C64; on N256_P64_R4_C8 (C*R = 32,
run on 64 rows) it lost, 3383 us with the split pass's scan at 549 against stage22's aux 1866
and wave pass 772 (records/profile-N256_P64_R4_C8-gluonaux-db00c95/), so aux_gluon.supported
takes C*R = 64 only. End to end, side by side with stage22 and live TileLang, one process per
case (records/h200-gluonaux-vs-tilelang-db00c95.json, golden passed for both stages): 1.10x
(N16_P64_R4_C8, stage23's kernel only) to 1.40x (N32_P64_R4_C16) over stage22, 1.286x in geomean
over the seven official cases reached; against TileLang 0.84x (N32_P64_R4_C16: faster) to 1.39x
slower (N128_P64_R2_C32), 1.137x slower in geomean there.
"""
from __future__ import annotations

import functools

from mamba3_perf.kernels.bwd_bwd import stage13_diagpost, stage23_gluonterms
from mamba3_perf.kernels.bwd_bwd.common import HALF_DTYPES, is_hopper
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage

try:  # Gluon is Triton's; a Triton without it (or without its Hopper module) keeps stage23
    from mamba3_perf.kernels.bwd_bwd import aux_gluon
except ImportError:  # pragma: no cover - depends on the installed Triton
    aux_gluon = None


def uses_gluon_aux(x: dict, meta, wide_p: bool | None = None, chunk_pairs: bool | None = None) -> bool:
    """Whether this stage runs the Gluon aux on ``x``'s device for ``meta``: a Hopper GPU, a shape
    aux_gluon is written for, 16-bit inputs and cached states (where stage22 runs dQ's two
    products at one TF32 pass: common.split_precisions' PQ), and the aux configuration it
    implements (the diagonal weight blocks: stage13's rule). It always forms the increments (one
    product per N block), so wherever it runs the state pass is the scan alone, stage17's and
    stage20's rules or not (on the P <= 64 shapes it takes, stage20 forms them anyway).
    ``wide_p``: P = 128 too (aux_gluon.supported's; stage26); ``chunk_pairs``: C*R = 32 too, two
    chunks a program (aux_gluon.supported's; stage31)."""
    return (aux_gluon is not None and is_hopper(x["q"].device) and aux_gluon.supported(meta, wide_p, chunk_pairs)
            and x["q"].dtype in HALF_DTYPES and x["states"].dtype in HALF_DTYPES
            and stage13_diagpost.moves_diagonal(meta))


def run_with(x: dict, out: dict, meta, *, wide_p: bool | None = None, step_desc: bool = False,
             aux_pairs: bool | None = None, transpose_layouts: bool = False, bf16_pairs: bool = False,
             states_operand: bool = False, states_slots: int | None = None, aux_maxnreg: int | None = None,
             fold_diag: bool = False, **kw) -> None:
    """stage24's pipeline; ``wide_p``, ``aux_pairs``: :func:`uses_gluon_aux`'s ``wide_p`` (stage26)
    and ``chunk_pairs`` (stage31), the latter also launch_aux's; ``step_desc``: the Gluon aux's
    launch_aux keyword (stage30); ``transpose_layouts``: both Gluon kernels' (stage32); ``bf16_pairs``,
    ``states_operand``, ``states_slots``: launch_aux's (stage38); ``aux_maxnreg``: its ``maxnreg``
    (stage39); ``fold_diag``: both Gluon kernels' (stage45: launch_aux's and launch_state_terms');
    ``kw``: more stage23_gluonterms.run_with keywords (stage25)."""
    launch = {k: True for k, on in (("step_desc", step_desc), ("transpose_layouts", transpose_layouts),
                                    ("bf16_pairs", bf16_pairs), ("states_operand", states_operand),
                                    ("fold_diag", fold_diag)) if on}
    if aux_pairs is not None:
        launch["chunk_pairs"] = aux_pairs
    if states_slots is not None:
        launch["states_slots"] = states_slots
    if aux_maxnreg is not None:
        launch["maxnreg"] = aux_maxnreg
    aux = functools.partial(aux_gluon.launch_aux, **launch) if launch else aux_gluon.launch_aux
    gluon = (dict(aux=aux, split=True, aux_increments=True)
             if uses_gluon_aux(x, meta, wide_p, aux_pairs) else {})
    if fold_diag and not gluon:
        raise ValueError("fold_diag: only where the Gluon aux runs (it folds the diagonal terms)")
    stage23_gluonterms.run_with(x, out, meta, transpose_layouts=transpose_layouts, fold_diag=fold_diag,
                                **gluon, **kw)


def run(x: dict, out: dict, meta) -> None:
    run_with(x, out, meta)


STAGE = register_stage(StageSpec(
    name="stage24_gluonaux",
    parent="stage23_gluonterms",
    summary="the streamed aux in Gluon on Hopper: k / q / state blocks by TMA, loop-invariant "
            "operands staged once, asynchronous wgmma (stage23 elsewhere)",
    entry=run,
    kernels=stage23_gluonterms.STAGE.kernels
    + (KernelSpec("bwd_bwd_aux_gluon_kernel", Tag.AUX,
                  "rank-folded aux, Gluon: TMA rings, async wgmma"),),
    zero_outputs=False,
    hopper_only=True,
))
