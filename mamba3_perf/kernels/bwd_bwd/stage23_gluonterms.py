"""stage23_gluonterms: stage22 with state_terms as a Gluon kernel on Hopper GPUs.

state_terms waits on memory: on N128_P64_R4_C16 (Nsight Compute, records/ncu-N128_P64_R4_C16/)
half its stall cycles are long-scoreboard waits, at two 4-warp programs per SM (255 registers),
with its N loop not software pipelined (Triton's pipelining of it lost: more registers and
shared memory). terms_gluon.bwd_bwd_state_terms_gluon_kernel does the same arithmetic with the
operands staged by hand: the next N block's dstates, states, k and dK rows in flight by TMA
while this block computes, PsiV's TF32 parts in shared memory once per chunk instead of in
registers, the six TF32 wgmma of a block issued asynchronously. Where it applies
(:func:`uses_gluon`: a CUDA device of compute capability 9, and terms_gluon.supported) this
stage is stage22 with that kernel; elsewhere (the interpreter, Ascend, other GPUs, other
shapes) it is stage22.

ptxas (Triton 3.6, N128_P64_R4_C16): 180 registers, no spills, 78 KB of shared memory, two
programs per SM. Measured on the H200, state_terms alone, both stages in one process (`perf
profile`, golden all passed; records/profile-gluonterms-3c7c395/, and N256 from
records/profile-N256_P64_R4_C8-gluonaux-db00c95/), us:

    N32_P64_R4_C16   454 -> 280     N128_P32_R4_C16  559 -> 359     N128_P64_R1_C64  280 -> 158
    N64_P64_R4_C16   672 -> 388     N128_P64_R2_C32  558 -> 307     N256_P64_R4_C8  3262 -> 1904
    N128_P64_R4_C16 1114 -> 609

(N128_P64_R4_C16 end to end 3.529 -> 3.022 ms.) At P = 128 its [64, 128] PsiV parts and
accumulator take 139 KB of shared memory (232 registers, no spills): one program per SM, and still
faster than stage22's (255 registers, 552 B of spills), same process again
(records/profile-P128-gluonterms-9449fa2/): 1554 -> 865 us on N64_P128_R4_C16 (end to end 4.79 ->
4.10 ms), 3105 -> 2419 on N128_P128_R4_C8 (C*R = 32: half the rows padding; 6.95 -> 6.23 ms).
Two warpgroups per program (8 warps, 32 N rows a step, each warpgroup on half the columns: 221 KB)
measured slower there, 989 and 2674 us (records/h200-sweep-gluonterms-9449fa2.json), so
terms_gluon.warps stays 4.
"""
from __future__ import annotations

import functools

from mamba3_perf.kernels.bwd_bwd import stage22_lkqblock
from mamba3_perf.kernels.bwd_bwd.common import is_hopper
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage

try:  # Gluon is Triton's; a Triton without it (or without its Hopper module) keeps stage22
    from mamba3_perf.kernels.bwd_bwd import terms_gluon
except ImportError:  # pragma: no cover - depends on the installed Triton
    terms_gluon = None


def uses_gluon(x: dict, meta) -> bool:
    """Whether this stage runs the Gluon state_terms on ``x``'s device for ``meta``."""
    return terms_gluon is not None and is_hopper(x["q"].device) and terms_gluon.supported(meta)


def run_with(x: dict, out: dict, meta, *, chunk_pairs: bool = False, transpose_layouts: bool = False,
             pipeline: bool = False, terms_ring: int | None = None, terms_maxnreg: int | None = None,
             fold_diag: bool = False, **kw) -> None:
    """stage23's pipeline; ``chunk_pairs``, ``transpose_layouts``, ``pipeline``: the Gluon
    state_terms' launch keywords (stage31, stage32; ``pipeline`` is terms_gluon.PIPELINE's, which no
    stage takes: within the run's spread on an H100); ``terms_ring``: its TMA ring's slots
    (launch_state_terms' ``ring``; stage40); ``terms_maxnreg``: its registers a thread
    (launch_state_terms' ``maxnreg``; stage43); ``fold_diag``: its ``fold_diag`` (stage45: the aux's
    too, stage24_gluonaux passes both); ``kw``: more stage22_lkqblock.run_with keywords (stage24)."""
    terms = None
    if uses_gluon(x, meta):
        terms = terms_gluon.launch_state_terms
        launch = {k: True for k, on in (("chunk_pairs", chunk_pairs), ("transpose_layouts", transpose_layouts),
                                        ("pipeline", pipeline), ("fold_diag", fold_diag)) if on}
        if terms_ring is not None:
            launch["ring"] = terms_ring
        if terms_maxnreg is not None:
            launch["maxnreg"] = terms_maxnreg
        if launch:
            terms = functools.partial(terms, **launch)
    elif fold_diag:
        raise ValueError("fold_diag: only where the Gluon state_terms runs")
    stage22_lkqblock.run_with(x, out, meta, state_terms=terms, **kw)


def run(x: dict, out: dict, meta) -> None:
    run_with(x, out, meta)


STAGE = register_stage(StageSpec(
    name="stage23_gluonterms",
    parent="stage22_lkqblock",
    summary="state_terms in Gluon on Hopper: the next N block's operands in flight by TMA, PsiV's "
            "TF32 parts in shared memory, asynchronous wgmma (stage22 elsewhere)",
    entry=run,
    kernels=stage22_lkqblock.STAGE.kernels
    + (KernelSpec("bwd_bwd_state_terms_gluon_kernel", Tag.POST,
                  "dstates-dependent terms per chunk, Gluon: TMA ring, async wgmma"),),
    zero_outputs=False,
    hopper_only=True,
))
