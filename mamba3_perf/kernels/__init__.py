"""Kernels of the Mamba-3 MIMO bwd_bwd: the public API, the stage ladder, the oracles."""
from mamba3_perf.kernels.api import mamba3_mimo_bwd_bwd
from mamba3_perf.kernels.cases import Case, case_from_shape, cases, get_case
from mamba3_perf.kernels.graphs import GraphedBwdBwd
from mamba3_perf.kernels.inputs import make_inputs
from mamba3_perf.kernels.reference import bwd_bwd_golden, bwd_bwd_ref, forward_cache
from mamba3_perf.kernels.registry import Tag, get_stage, list_stages

__all__ = [
    "mamba3_mimo_bwd_bwd", "GraphedBwdBwd", "Case", "case_from_shape", "cases", "get_case", "make_inputs",
    "bwd_bwd_golden", "bwd_bwd_ref", "forward_cache", "Tag", "get_stage", "list_stages",
]
