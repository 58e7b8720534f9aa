"""Run a stage on a case and judge it against the fp64 golden (used by tests, CLI, benchmarks)."""
from __future__ import annotations

import torch

from mamba3_perf.kernels.accuracy import GradCheck, check
from mamba3_perf.kernels.api import mamba3_mimo_bwd_bwd
from mamba3_perf.kernels.bwd_bwd.common import DOT_PRECISIONS, forced_dot_precision
from mamba3_perf.kernels.cases import Case
from mamba3_perf.kernels.inputs import make_inputs
from mamba3_perf.kernels.reference import bwd_bwd_golden, bwd_bwd_ref
from mamba3_perf.kernels.registry import get_stage


def oracles(x: dict, case: Case) -> tuple[dict, dict]:
    """(golden fp64, reference fp32) for the inputs ``x``, computed on x's device."""
    kw = dict(chunk_size=case.C, rotary_dim_divisor=case.rotary_dim_divisor)
    return bwd_bwd_golden(**x, **kw), bwd_bwd_ref(**x, **kw)


def split_variant(variant: str) -> tuple[str, str | None]:
    """``STAGE`` or ``STAGE@PRECISION`` (every dot forced to one input precision, e.g.
    ``stage10_fewscratch@tf32``: :func:`common.forced_dot_precision`) -> (stage, precision).
    Raises StageError for an unknown stage and ValueError for an unknown precision."""
    stage, _, precision = variant.partition("@")
    get_stage(stage)
    if precision and precision not in DOT_PRECISIONS:
        raise ValueError(f"{variant!r}: precision after '@' must be one of {', '.join(DOT_PRECISIONS)}")
    return stage, precision or None


def run_stage(stage: str, x: dict, case: Case) -> dict:
    """The 12 outputs of ``stage`` (a stage name or ``STAGE@PRECISION``, :func:`split_variant`)."""
    name, precision = split_variant(stage)
    with forced_dot_precision(precision):
        return mamba3_mimo_bwd_bwd(**x, chunk_size=case.C, rotary_dim_divisor=case.rotary_dim_divisor,
                                   stage=name)


def check_stage(stage: str, case: Case, *, device="cpu", seed: int = 0,
                inputs: dict | None = None, golden=None) -> list[GradCheck]:
    x = inputs if inputs is not None else make_inputs(case, seed=seed, device=device)
    g, r = golden if golden is not None else oracles(x, case)
    out = run_stage(stage, x, case)
    if x["q"].is_cuda:
        torch.cuda.synchronize()
    return check(out, g, r)
