"""stage43_finish: stage42 with stages 27-29's finishing where the Gluon kernels can rotate: q / k
rotated in the Gluon aux and state_terms from the 16-bit inputs, dK finished in state_terms, dQ in
the aux, and no post kernel.

Why (README, "The HBM ceiling of stage42's pipeline"): counted on the interpreter, stage42's six
kernels address 1.48-11.59 GB a call on the official grid, and at the H200's 4.3 TB/s that floor
is only 1.93x under TileLang's H200 times in geomean: no tuning of those kernels reaches issue 5's
2x. The rotated rows QR / KR and the rotated-domain gradient rows DQR / DKR are 0.33-5.37 GB of
those bytes; without them the floor would be 3.28x under TileLang's times, 1.94x or more on every
shape. Stages 27-29 removed exactly those round trips on stage26's kernels and measured slower on
an H100 (the rotation and the finishing cost the Gluon kernels registers they did not have); since
then stages 37-42 put the Gluon kernels on bf16 parts and capped registers, and the H200's wider
HBM pays more for bytes than the H100 those stages were judged on.

Compiled for sm_90 (Triton 3.6, no device; ``benchmarks/ptxas_stage.py`` on both stages,
records/ptxas-stage43-840522c.txt), stage42 -> this stage on the seven official shapes where it
applies: the aux, capped at 168 registers at P <= 64, at stage42's shared memory (75800 B at P =
64: three programs per SM by both counts; at e432311 a layout conversion's scratch took it to
77848 B, two programs), 44-128 B of spill stores a thread instead of 28-52 (at P = 32 52 B where
stage42's ran uncapped at 162 registers; at P = 128 255 registers and 116 B instead of 48);
state_terms 133-139 -> 226-255 registers at P = 64 (three programs per SM -> two; at 168, with
the knob :data:`CAP_MAX_P` at 64, 104-140 B of spills), 96 -> 168 and no spills at P = 32 (five
programs per SM -> three), 212 -> 255 and 64 B of spills at P = 128; the pre kernel, which stores
cos / sin instead of the rotated rows, 26-45 registers where it took 72-80 (80 where it took 56 at
R = 1, C = 64); no post kernel.

At P <= :data:`CAP_MAX_P` (32) both Gluon kernels run at stage39's 168 registers a thread, three
programs per SM where uncapped they took 228 and 178, two.

Measured on an H100 side by side with stage42 and TileLang where it finished on all seven shapes
stage27 rotates on (records/h100-finish-pairfinish-vs-tilelang-13cac0a.json; golden 132/132 on the
official grid, 14/14 on the hopper set): N128_P32_R4_C16 1897 -> 1768 us (1.073x), N128_P64_R2_C32
1.059x, N128_P64_R1_C64 1.048x, N128_P64_R4_C16 1.002x; slower at N = 64 (N64_P64_R4_C16 0.965x,
N64_P128_R4_C16 0.983x) and at R = 8 (N128_P64_R8_C8 0.947x), where state_terms' two programs per
SM and the aux's spills cost more than the bytes saved.

Where (:func:`changes`): at N >= :data:`MIN_N` and R <= :data:`MAX_R` (:func:`finishes`: where
it measured as fast or faster) where stage27 rotates inline (both Gluon kernels run and can rotate
their blocks: C*R = 64, N >= 64, 16-bit inputs), on a Hopper GPU: four of the eleven official
shapes; elsewhere, on other GPUs and on the interpreter, this stage is stage42 (its outputs are
stage42's bit for bit). Not yet run on an H200.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import (
    stage27_rotinline, stage34_poststeps, stage38_bf16aux, stage39_auxregs, stage42_precap,
)
from mamba3_perf.kernels.registry import StageSpec, register_stage

# knob (benchmarks/sweep_knob.py --knob stage43_finish.FINISH=0,1): 0 runs stage42
FINISH: bool = True

# knob: both Gluon kernels at stage39's 168 registers a thread (three programs of 128 threads per
# SM) where they finish at P <= this, on bf16 parts. At P = 32 they take 228 (the aux) and 178
# (state_terms) uncapped, two programs per SM each, and at 168 spill 52 B and none (ptxas, sm_90,
# N128_P32_R4_C16; their shared memory, 68.6 and 34.8 KB, holds three); at P = 64 the aux is
# capped already (stage39) and state_terms, at 226-238 registers, spills 104-140 B at 168: 64
# caps it there too: measured slower on an H100 (N128_P64_R8_C8 with MIN_N / MAX_R lifted: state_terms
# 1664 -> 1929 us, the call 4926 -> 5197; records/h100-sweep-finish-capmaxp-r8-09b8e52.json)
CAP_MAX_P: int = 32


# knobs: the shapes where it finishes, N >= MIN_N and R <= MAX_R (none: no bound). Measured on an
# H100 side by side with stage42 (records/h100-finish-pairfinish-vs-tilelang-13cac0a.json):
# faster at N = 128 with R <= 2 or P = 32 (1.048x-1.073x), even at N128_P64_R4_C16 (1.002x), slower
# at N = 64 (0.965x at P = 64, 0.983x at P = 128) and at R = 8 (0.947x)
MIN_N: int | None = 128
MAX_R: int | None = 4


def finishes(meta) -> bool:
    """Whether ``meta``'s shape is one this stage finishes on where it can (:data:`MIN_N`,
    :data:`MAX_R`)."""
    return (MIN_N is None or meta.N >= MIN_N) and (MAX_R is None or meta.R <= MAX_R)


def changes(x: dict, meta) -> bool:
    """Whether this stage launches anything other than stage42's kernels for ``x`` and ``meta``:
    on the shapes it :func:`finishes` on, where stage27 rotates q / k inline
    (stage27_rotinline.rotates_inline: the Gluon aux and state_terms both run, which only a Hopper
    GPU does, and can rotate their blocks)."""
    return FINISH and finishes(meta) and stage27_rotinline.rotates_inline(x, meta)


def keywords(x: dict, meta) -> dict:
    """This stage's stage38_bf16aux.run_with keywords: stage42's, and where :func:`changes` the
    rotation inline (stage27), dK finished in state_terms (stage28) and dQ in the aux (stage29),
    both Gluon kernels capped at P <= :data:`CAP_MAX_P` on bf16 parts."""
    own = dict(rot_inline=True, finish_dk=True, finish_dq=True) if changes(x, meta) else {}
    if own and meta.P <= CAP_MAX_P and stage39_auxregs.aux_bf16_parts(x):
        own.update(aux_maxnreg=stage39_auxregs.AUX_MAXNREG, terms_maxnreg=stage39_auxregs.AUX_MAXNREG)
    return {**stage42_precap.keywords(x, meta), **own}


def run(x: dict, out: dict, meta) -> None:
    stage38_bf16aux.run_with(x, out, meta, **keywords(x, meta))


STAGE = register_stage(StageSpec(
    name="stage43_finish",
    parent="stage42_precap",
    summary="stage42 with q / k rotated in the Gluon kernels, dK finished in state_terms and dQ in "
            "the aux (no post kernel) where they can rotate: no QR / KR or DQR / DKR through HBM",
    entry=run,
    kernels=stage34_poststeps.STAGE.kernels,
    zero_outputs=False,
    hopper_only=True,
))
