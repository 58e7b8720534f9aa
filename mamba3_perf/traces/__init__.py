"""Profiler traces -> one pandas frame with the KERNEL_EVENTS schema.

``load(path)`` detects the source; one parser module per source: :mod:`.msprof` (Ascend
torch_npu / msprof), :mod:`.torch_profiler` (Kineto, CUDA), :mod:`.ncu` (Nsight Compute CSV),
:mod:`.proton` (Triton proton), :mod:`.ablation` (region split by ablation). Kernel names
become stage tags in :mod:`.attribution`.
"""
from mamba3_perf.traces.ablation import region_split_from_ablation
from mamba3_perf.traces.attribution import RULES, classify, label
from mamba3_perf.traces.loader import detect_file, find_sources, load
from mamba3_perf.traces.msprof import parse_kernel_table, parse_trace_json, read_op_statistic
from mamba3_perf.traces.ncu import parse_ncu
from mamba3_perf.traces.proton import parse_proton_trace, parse_proton_tree
from mamba3_perf.traces.schema import COLUMNS, KERNEL_EVENTS, METRIC_COLUMNS, conform, describe, empty
from mamba3_perf.traces.torch_profiler import parse_kineto

__all__ = [
    "COLUMNS", "KERNEL_EVENTS", "METRIC_COLUMNS", "RULES", "classify", "conform", "describe",
    "detect_file", "empty", "find_sources", "label", "load", "parse_kernel_table", "parse_kineto",
    "parse_ncu", "parse_proton_trace", "parse_proton_tree", "parse_trace_json",
    "read_op_statistic", "region_split_from_ablation",
]
