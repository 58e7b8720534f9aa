"""stage16_regcap: stage15 with the registers of three kernels capped where that measured faster.

Every kernel of stage15 compiles to 255 registers per thread, so the pre kernel (8 warps) runs
one program per SM and the streamed aux and state_terms (4 warps) two. Triton's ``maxnreg``
launch option caps the registers: fewer per thread, more programs per SM to hide latency, and
more spills. Measured on the H200 for each kernel alone (benchmarks/sweep_launch.py on
stage15_passwave, records/h200-sweep-regcap-50c900b.json, device time per call):

    kernel, cap                      N128_P64_R4_C16  N128_P64_R2_C32  N64_P64_R4_C16  N16_P64_R4_C8  N64_P128_R4_C16
    pre (8 warps)    none -> 128     470 -> 303 us    309 -> 202       139 -> 175      156 -> 174     409 -> 414
    aux (4 warps)    none -> 168     1391 -> 1801     744 -> 977       982 -> 1358     632 -> 576     2090 -> 2499
    terms (4 warps)  none -> 168     1108 -> 1108     549 -> 547       668 -> 672      560 -> 534     1687 -> 3015

(the post kernel shares the pre kernel's launch options in stage15 and ran slower with every cap
tried; the caps of 128 on the aux and state_terms were slower everywhere.) So :func:`caps` caps the
pre kernel at 128 where its [C, R, N] tile has at least 8192 elements (the N = 128 shapes with
C*R = 64 measured; C*R*N = 4096 lost or tied), and the aux and state_terms at 168 where N <= 16
(one 16-column block). Everything else is stage15.

Measured with this rule against stage15 and live TileLang, side by side on the H200
(records/h200-regcap-91b37ca.json, golden 144/144 for both stages): 1.02-1.06x on the seven
capped shapes (N128_P64_R4_C16 4.21 -> 4.05 ms, its pre kernel 474 -> 302 us), 1.00x elsewhere;
1.026x in geomean over the 12 cases.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage9_termsblock, stage12_pipeaux, stage15_passwave
from mamba3_perf.kernels.bwd_bwd.common import CHUNK_LAUNCH
from mamba3_perf.kernels.registry import StageSpec, register_stage

PRE_CAP = 128  # 8 warps x 128 registers: two pre programs per SM instead of one
NARROW_CAP = 168  # 4 warps x 168 registers: three programs per SM instead of two


def caps(meta) -> dict:
    """Registers per thread of the pre kernel, the streamed aux and state_terms for ``meta``
    (None: uncapped, as stage15), by the measured rule of the module docstring."""
    narrow = NARROW_CAP if meta.N <= 16 else None
    return dict(pre=PRE_CAP if meta.C * meta.R * meta.N >= 8192 else None, aux=narrow, terms=narrow)


def _capped(launch: dict, cap: int | None) -> dict:
    return dict(launch, maxnreg=cap) if cap else launch


def run_with(x: dict, out: dict, meta, *, state_pass=None, stream_maxnreg: int | None = None,
             pre_maxnreg: int | None = None, **kw) -> None:
    """stage16's pipeline; ``state_pass``: the state pass's launcher in place of stage15's
    choice (stage17); ``stream_maxnreg`` / ``pre_maxnreg``: the streamed aux's / the pre kernel's
    registers a thread in place of :func:`caps`' (stage41 / stage42); ``kw``: more
    stage11_steptrig.run_with keywords (stage18), a ``pre_launch`` among them in place of this
    stage's (stage25)."""
    c = caps(meta)
    for kernel, cap in (("aux", stream_maxnreg), ("pre", pre_maxnreg)):
        if cap is not None:
            c[kernel] = cap
    terms = stage9_termsblock.terms_choice(meta)
    if c["terms"] and terms:  # only the narrow state_terms (4 warps) was measured capped
        terms = dict(terms, launch=_capped(terms["launch"], c["terms"]))
    kw.setdefault("pre_launch", _capped(CHUNK_LAUNCH, c["pre"]))
    stage15_passwave.run_with(x, out, meta, aux_launch=_capped(stage12_pipeaux.aux_launch(meta), c["aux"]),
                              terms=terms, state_pass=state_pass, **kw)


def run(x: dict, out: dict, meta) -> None:
    run_with(x, out, meta)


STAGE = register_stage(StageSpec(
    name="stage16_regcap",
    parent="stage15_passwave",
    summary="registers capped (maxnreg) where more programs per SM measured faster: the pre kernel "
            "at 128 on [C, R, N] tiles of 8192+ elements, the aux and state_terms at 168 at N = 16",
    entry=run,
    kernels=stage15_passwave.STAGE.kernels,
    zero_outputs=False,
))
