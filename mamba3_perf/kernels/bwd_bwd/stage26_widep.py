"""stage26_widep: stage25 with the Gluon aux at P = 128 and the 16-bit inputs read where the scratch
copies of them measured slower.

Two of stage25's knobs, measured on the H200 (sweep_knob.py, golden passed in every combination,
at 87bed75):

* ``aux_gluon.WIDE_P``: the Gluon aux at P = 128 (C*R = 64), in place of the Triton aux that
  spilled 2.1 KB per thread there, and with it every reader on the inputs (``inputs``; the Gluon
  aux reads them anyway, so the pre kernel's fp32 PsiV / dPhiO copies were only written):
  N64_P128_R4_C16 4.122 -> 3.395 ms with the Gluon aux, 3.099 with the inputs too
  (records/h200-sweep-widep-read-inputs-N64_P128-87bed75.json; the Triton aux with the inputs
  lost, 4.669, as stage10 measured at P = 128);
* ``READ_INPUTS=2`` where N > 128: the pre-rotation q / k from the inputs (the pre kernel stops
  writing QB / KB, the post kernel loads q / k; PsiV / dPhiO stay in scratch for the Triton aux):
  N256_P64_R4_C8 6.380 -> 6.105 ms, the pre kernel 910 -> 431 us, the post kernel 847 -> 1068
  (records/h200-sweep-read-inputs-N256-87bed75.json, h200-sweep-heads-inner-N256-87bed75.json);
  on N128_P128_R4_C8 the same lost, 6.273 -> 6.353 (h200-sweep-read-inputs-P128-N16-87bed75.json),
  so the rule takes N > 128 only.

Elsewhere (the interpreter, Ascend, other GPUs) the Gluon aux does not run and this stage is
stage25 with the second rule.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage24_gluonaux, stage25_subchunk
from mamba3_perf.kernels.registry import StageSpec, register_stage


def plan(x: dict, meta) -> dict:
    """This stage's keywords over stage25's for ``x`` and ``meta`` (module docstring)."""
    if meta.P > 64 and stage24_gluonaux.uses_gluon_aux(x, meta, wide_p=True):
        return dict(wide_p=True, inputs=True)
    kw = dict(wide_p=True)
    if meta.N > 128 and stage25_subchunk.takes_qk_inputs(meta):
        kw["qk_inputs"] = True
    return kw


def run(x: dict, out: dict, meta) -> None:
    stage25_subchunk.run_with(x, out, meta, **plan(x, meta))


STAGE = register_stage(StageSpec(
    name="stage26_widep",
    parent="stage25_subchunk",
    summary="the Gluon aux at P = 128 with every reader on the 16-bit inputs there, and the "
            "pre-rotation q / k from the inputs where N > 128 (both measured faster on the H200)",
    entry=run,
    kernels=stage25_subchunk.STAGE.kernels,
    zero_outputs=False,
))
