"""stage30_stepdesc: stage26 with the Gluon aux's second N walk reading its operands through views
formed per step (aux_gluon.DYN_DESC, gluon_common.at_step).

Where stage26's aux spent its second N walk (records/ncu-source-stage26-h100-68ccb02/, README
"Where the Gluon kernels' instructions go"): 630 SASS a 16-column step, 245 of them moves between
vector and uniform registers. Each step issues 64 TF32 wgmma (64x16x8), each reading one or two
64-bit shared-memory descriptors; the buffers they read sit at fixed addresses, so the compiler
hoisted every descriptor out of the loop: more than the 63 uniform registers hold, so most lived
in vector registers (with 84 B of spills at P = 64, 440 B at P = 128) and were moved back with
R2UR before each wgmma. Here the walk reads each buffer through ``buf[z]`` with ``z = j * ZERO``
(ZERO a runtime 0: the same addresses, but not loop-invariant to the compiler), so a step forms
its descriptors from one base in uniform registers. Static, sm_90, Triton 3.6
(``benchmarks/ptxas_stage.py stage26_widep N P R C --kernel aux --sass --knob
aux_gluon.DYN_DESC=0/1``): the walk 630 -> 566 SASS a step at P = 64, its register moves 245 ->
97 (R2UR in the kernel 231 -> 66, spills 84 B -> 0), 1036 -> 745 at P = 128, moves 523 -> 161
(spills 440 -> 136 B); registers, shared memory and wgmma shapes unchanged.

Measured on an H100 (benchmarks/sweep_knob.py --knob aux_gluon.DYN_DESC=0,1 over the eight
official shapes where the Gluon aux runs, golden passed in all sixteen combinations,
records/h100-sweep-dyndesc-2022889.json): the aux 1-21 % faster (N64_P128_R4_C16 1736 -> 1365
us, N128_P64_R4_C16 1140 -> 1076, N128_P32_R4_C16 942 -> 935), the stage 0.2-13 %. The same walk
treatment of state_terms' N walk compiled longer (447 -> 486 SASS a step) and is not taken, nor
the aux's first walk (no fewer instructions). Against TileLang on the H200, all eleven official
shapes side by side (records/h200-stepdesc-vs-tilelang-ea994c0.json, golden 132/132): 1.172x
slower in geomean (stage26: 1.233x at 4fc1088), faster on N32_P64_R4_C16 and N16_P64_R4_C8.

Elsewhere (the Triton aux's shapes, the interpreter, other GPUs) this stage is stage26.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage25_subchunk, stage26_widep
from mamba3_perf.kernels.registry import StageSpec, register_stage


def plan(x: dict, meta) -> dict:
    """This stage's keywords over stage25's: stage26's, and the aux's ``step_desc``."""
    return dict(stage26_widep.plan(x, meta), step_desc=True)


def run(x: dict, out: dict, meta) -> None:
    stage25_subchunk.run_with(x, out, meta, **plan(x, meta))


STAGE = register_stage(StageSpec(
    name="stage30_stepdesc",
    parent="stage26_widep",
    summary="stage26 with the Gluon aux's second N walk forming its wgmma descriptors per step "
            "(not hoisted into vector registers): fewer instructions, no spills",
    entry=run,
    kernels=stage26_widep.STAGE.kernels,
    zero_outputs=False,
    hopper_only=True,
))
