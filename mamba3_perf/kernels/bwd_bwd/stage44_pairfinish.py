"""stage44_pairfinish: stage43 with its finishing also where a chunk has 32 fused rows (C*R = 32),
on two chunks a Gluon program: q / k rotated in the Gluon aux and state_terms, dQ finished in the
aux, dK in state_terms, no post kernel.

Why (README, "The HBM ceiling of stage42's pipeline"): stage43 finishes only where a chunk fills a
warpgroup's 64 rows (C*R = 64), so the two heaviest shapes of the official grid keep stage42's
QR / KR and DQR / DKR round trips: N256_P64_R4_C8 (11.59 GB counted a call, 5.37 of them those
round trips; TileLang's H200 time is only 1.39x its floor, and stage42 was 0.718x of TileLang's
speed there on an H100) and N128_P128_R4_C8 (10.25 GB, 2.68). Both Gluon kernels already compute
C*R = 32 on pairs of chunks adjacent in time (stage31, CP = 2), and their rotation and finishing
take the program's chunks as one block of 2C steps (gluon_common.rotated_rows / finish_pair with
the program's step count): the paths golden-tested through stage29 with both CHUNK_PAIRS knobs on
(tests/kernels/test_chunkpairs.py) and never taken by a stage.

Where (:func:`changes`): where stage43 does not change stage42 and both Gluon kernels can run in
pairs and rotate (stage27_rotinline.rotates_inline with the aux's ``chunk_pairs``: a Hopper GPU,
16-bit inputs and cached states, C*R = 32 over an even number of chunks, N / 2 a multiple of 32).
At P = 128 the aux runs in pairs in stage42 already (N128_P128_R4_C8); at P = 64
(N256_P64_R4_C8), where stage42 keeps the streamed Triton aux and its wave pass, it runs the Gluon
aux in pairs on stage38's bf16 path (its states operand from the TMA slot, bf16 parts in pairs)
with :data:`STATES_SLOTS` states slots (2 measured faster there than 1 without rotation, 1910
against 1959 us on an H100: stage38's docstring). Elsewhere this stage is stage43.

Compiled for sm_90 (Triton 3.6, no device; ``benchmarks/ptxas_stage.py stage42_precap|
stage44_pairfinish N P R C``), stage42 -> this stage:
* N256_P64_R4_C8: the Triton aux (168 registers, 30 KB) and the wave pass -> the Gluon aux
  rotating and finishing in pairs (228 registers, no spills, 2 programs per SM); state_terms 168
  -> 255 registers (3 -> 2 programs per SM; at 168 it would spill 304 B); pre 72 -> 32 registers;
  no post kernel.
* N128_P128_R4_C8: the aux 255 registers, 64 -> 72 B of spills (2 programs per SM either way);
  state_terms 255 registers, 12 -> 260 B of spills (2 programs per SM); pre 80 -> 45; no post.
Not yet measured on a device: neither golden-checked nor timed.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage27_rotinline, stage34_poststeps, stage38_bf16aux, stage43_finish
from mamba3_perf.kernels.registry import StageSpec, register_stage

# knob (benchmarks/sweep_knob.py --knob stage44_pairfinish.PAIRS=0,1): 0 runs stage43
PAIRS: bool = True

# knob: the Gluon aux's states ring slots where this stage runs it in pairs at P = 64 (stage38 takes
# 1 at P = 128, where two programs per SM need it)
STATES_SLOTS: int = 2


def changes(x: dict, meta) -> bool:
    """Whether this stage launches anything other than stage43's kernels for ``x`` and ``meta``:
    where stage43 does not finish and the Gluon aux and state_terms both run on chunk pairs and can
    rotate (stage27_rotinline.rotates_inline with ``chunk_pairs``)."""
    return (PAIRS and stage43_finish.FINISH and not stage43_finish.changes(x, meta)
            and stage27_rotinline.rotates_inline(x, meta, chunk_pairs=True))


def keywords(x: dict, meta) -> dict:
    """This stage's stage38_bf16aux.run_with keywords: stage43's, and where :func:`changes` the
    aux in pairs (stage31's ``aux_pairs``) rotating and finishing (stage27-29's keywords), on
    stage38's bf16 path where stage38 does not take it (P = 64)."""
    kw = stage43_finish.keywords(x, meta)
    if changes(x, meta):
        kw.update(aux_pairs=True, rot_inline=True, finish_dk=True, finish_dq=True)
        if not stage38_bf16aux.changes(meta):
            kw.update(states_operand=True, bf16_pairs=True, states_slots=STATES_SLOTS)
    return kw


def run(x: dict, out: dict, meta) -> None:
    stage38_bf16aux.run_with(x, out, meta, **keywords(x, meta))


STAGE = register_stage(StageSpec(
    name="stage44_pairfinish",
    parent="stage43_finish",
    summary="stage43 with the rotation and finishing in the Gluon kernels also on chunks of 32 rows, "
            "two chunks a program: no QR / KR or DQR / DKR through HBM on N256_P64 and N128_P128 C8",
    entry=run,
    kernels=stage34_poststeps.STAGE.kernels,
    zero_outputs=False,
    hopper_only=True,
))
