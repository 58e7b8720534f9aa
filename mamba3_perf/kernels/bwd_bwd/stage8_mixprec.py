"""stage8_mixprec: stage7 with the aux's dot precision split by the outputs each product reaches.

On CUDA every fp32 dot of the stages below runs as tf32x3 (three TF32 tensor-core passes,
fp32-level error), which triples the MMA work and holds each register operand twice (high and
low parts). Here the aux's qk_dot diagonal terms (they reach only DQ and DK, stored in the
16-bit input dtype) and, where the cached states are 16-bit as upstream stores them, its
rotated-domain dQ and cached-state term (DQ, DANGLES, DDA_CS: their fp32 reference already
carries the states' rounding) run as one TF32 pass; everything an fp32-level output needs keeps
tf32x3 (common.split_precisions says which and why). fp32 inputs, and every device but CUDA
(interpreter, Ascend: "ieee" dots), get stage7's precision. The golden criterion on the
interpreter with TF32 emulated: tests/kernels/test_mixprec.py.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage7_streamaux
from mamba3_perf.kernels.registry import StageSpec, register_stage


def run(x: dict, out: dict, meta) -> None:
    stage7_streamaux.run_with(x, out, meta, low_precision=True)


STAGE = register_stage(StageSpec(
    name="stage8_mixprec",
    parent="stage7_streamaux",
    summary="CUDA: the aux's dots that reach only 16-bit-level outputs run as one TF32 pass "
            "instead of tf32x3",
    entry=run,
    kernels=stage7_streamaux.STAGE.kernels,
    zero_outputs=False,
))
