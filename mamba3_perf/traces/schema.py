"""The one schema every trace parser returns: ``KERNEL_EVENTS``.

One row per device kernel execution (or, for in-kernel region sources, per region of one
execution). The schema is data: each column has a name, a pandas dtype, a unit, whether
a parser must fill it, and a description. :func:`conform` validates a parser's frame
against it (adding optional columns as NaN/NA, casting, rejecting missing required
columns) and :func:`empty` gives a zero-row frame that still carries every column.

Time columns are microseconds (``_us``). ``start_us`` is relative to the trace's own
origin where the source gives one (Kineto ``baseTimeNanoseconds``), else to the earliest
event of the file (Ascend epoch-clock µs do not fit a float64 exactly: the exact raw clock
value is kept in ``start_ns``); durations are never rebased. Sources without timestamps (ncu,
proton tree, ablation) lay launches end to end in launch order and say so in ``start_kind``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from mamba3_perf.errors import ParseError


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str  # pandas dtype string
    unit: str
    required: bool
    doc: str


KERNEL_EVENTS: tuple[Column, ...] = (
    # identity
    Column("source", "string", "", True, "parser that produced the row: kernel_details, op_summary, trace_view, msprof_json, kineto, ncu, proton, ablation, interpreter (perf profile on the CPU Triton interpreter: each launch timed on the host, plus a host row for the time outside kernels)"),
    Column("device", "string", "", True, "device id or name as the source gives it (e.g. '0', 'npu:0', 'NVIDIA H200')"),
    Column("stream", "string", "", False, "stream id as the source gives it"),
    Column("kernel_name", "string", "", True, "kernel (Triton jit function / op) name as the profiler shows it"),
    Column("stage_tag", "string", "", True, "pre / aux / scan / post / fused / host / other, from the stage registry and rule table"),
    Column("variant", "string", "", False, "mamba3-perf stage name (stage0, prod, ...) or tilelang, when known"),
    Column("case_id", "string", "", False, "case id the trace was taken on, when known"),
    Column("region", "string", "", False, "in-kernel region name (proton scopes, ablation); NA for whole kernels"),
    # time
    Column("start_us", "float64", "us", True, "start time"),
    Column("start_ns", "Int64", "ns", False, "exact start on the source's own clock (Ascend epoch clock, Kineto base + ts)"),
    Column("start_kind", "string", "", False, "'clock': start_us from the profiler's clock; 'serialized': no timestamps in the source, launches laid end to end"),
    Column("dur_us", "float64", "us", True, "duration on the device"),
    Column("wait_us", "float64", "us", False, "Ascend Wait Time(us): gap to the previous task"),
    # launch shape
    Column("accelerator_core", "string", "", False, "Ascend Accelerator Core / Task Type (AI_CORE, AI_VECTOR_CORE, MIX_AIC ...)"),
    Column("block_dim", "Int64", "", False, "Ascend Block Dim / Block Num; NVIDIA grid size (blocks)"),
    Column("mix_block_dim", "Int64", "", False, "Ascend Mix Block Dim / Mix Block Num"),
    Column("grid", "string", "", False, "NVIDIA grid as 'x,y,z'"),
    Column("block", "string", "", False, "NVIDIA block as 'x,y,z'"),
    Column("registers_per_thread", "Int64", "", False, "NVIDIA registers per thread"),
    Column("smem_bytes", "Int64", "B", False, "NVIDIA shared memory per block"),
    Column("correlation", "Int64", "", False, "Kineto correlation id linking the kernel to its launch"),
    Column("cpu_op", "string", "", False, "name of the CPU op that launched the kernel, when the trace links them"),
    Column("calls", "Int64", "", False, "executions aggregated in this row (proton tree); NA means one"),
    # Ascend PipeUtilization metrics (fractions 0..1 unless noted)
    Column("aic_mac_ratio", "float64", "ratio", False, "Cube (MAC) busy cycles / total cycles on the cube core"),
    Column("aic_scalar_ratio", "float64", "ratio", False, "scalar unit cycles / total on the cube core"),
    Column("aiv_scalar_ratio", "float64", "ratio", False, "scalar unit cycles / total on the vector core"),
    Column("aiv_vec_ratio", "float64", "ratio", False, "vector unit cycles / total on the vector core"),
    Column("aic_mte1_ratio", "float64", "ratio", False, "L1 -> L0A/B transfer cycles / total"),
    Column("aic_mte2_ratio", "float64", "ratio", False, "GM -> cube core transfer cycles / total"),
    Column("aiv_mte2_ratio", "float64", "ratio", False, "GM -> vector core transfer cycles / total"),
    Column("aiv_mte3_ratio", "float64", "ratio", False, "vector core -> GM transfer cycles / total"),
    Column("aic_fixpipe_ratio", "float64", "ratio", False, "L0C -> out cycles / total"),
    Column("cube_utilization_pct", "float64", "%", False, "cube_utilization(%)"),
    # NVIDIA analogues (Nsight Compute), percent of peak
    Column("tensor_pipe_pct", "float64", "%", False, "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active (Cube analogue)"),
    Column("alu_pipe_pct", "float64", "%", False, "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active (scalar analogue)"),
    Column("issue_active_pct", "float64", "%", False, "smsp__issue_active.avg.pct_of_peak_sustained_active"),
    Column("dram_throughput_pct", "float64", "%", False, "dram__throughput.avg.pct_of_peak_sustained_elapsed (MTE2 analogue)"),
    Column("warps_active_pct", "float64", "%", False, "sm__warps_active.avg.pct_of_peak_sustained_active (occupancy)"),
    Column("dram_bytes", "float64", "B", False, "dram__bytes_read.sum + dram__bytes_write.sum"),
    Column("instructions", "float64", "inst", False, "executed warp instructions of the launch: smsp__inst_executed.sum, or on an ncu details page Executed Ipc Active x SM Active Cycles x # SMs (the same count: per-SM rate x average active cycles x SMs)"),
    # NVIDIA warp state (Nsight Compute): the cycles between two instructions a warp issues, and
    # how many of them it spent stalled for each leading reason (raw page, WarpStateStats section)
    Column("cycles_per_issue", "float64", "cycles", False, "smsp__average_warp_latency_per_inst_issued.ratio ('Warp Cycles Per Issued Instruction'): cycles between two instructions one warp issues; the stall_* columns are parts of it"),
    Column("stall_long_scoreboard", "float64", "cycles", False, "of cycles_per_issue, waiting for a global or local memory (L1TEX) result: smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"),
    Column("stall_barrier", "float64", "cycles", False, "waiting at a block-wide barrier: smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"),
    Column("stall_short_scoreboard", "float64", "cycles", False, "waiting for a shared-memory or special-function (MUFU) result: smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio"),
    Column("stall_mio_throttle", "float64", "cycles", False, "the memory input/output queue (shared memory, special functions) full: smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio"),
    Column("stall_wait", "float64", "cycles", False, "a fixed-latency dependency: smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"),
    Column("stall_math_pipe_throttle", "float64", "cycles", False, "the math pipe it needs busy: smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio"),
    Column("stall_gmma", "float64", "cycles", False, "waiting for a Hopper warpgroup MMA (wgmma): smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio"),
)

COLUMNS: tuple[str, ...] = tuple(c.name for c in KERNEL_EVENTS)
REQUIRED: tuple[str, ...] = tuple(c.name for c in KERNEL_EVENTS if c.required)
# rates and per-instruction cycles: averaged over launches (duration-weighted), not summed
METRIC_COLUMNS: tuple[str, ...] = tuple(
    c.name for c in KERNEL_EVENTS if c.unit in ("ratio", "%", "cycles")
)
# per-launch hardware counts (not rates): summed over launches, not averaged
COUNT_COLUMNS: tuple[str, ...] = ("dram_bytes", "instructions")
_BY_NAME = {c.name: c for c in KERNEL_EVENTS}


def empty() -> pd.DataFrame:
    """A zero-row frame with every schema column at its dtype."""
    return pd.DataFrame({c.name: pd.Series([], dtype=c.dtype) for c in KERNEL_EVENTS})


def conform(df: pd.DataFrame, *, origin: str = "trace") -> pd.DataFrame:
    """Validate ``df`` against KERNEL_EVENTS and return it with exactly the schema's columns.

    Missing optional columns are added as NA; extra columns are an error (a parser bug);
    required columns must be present with no NA; durations must be >= 0.
    ``origin`` (a file name) goes into the error messages.
    """
    extra = [c for c in df.columns if c not in _BY_NAME]
    if extra:
        raise ParseError(f"{origin}: columns outside the KERNEL_EVENTS schema: {extra}")
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ParseError(f"{origin}: required columns missing: {missing}")
    out = {}
    n = len(df)
    for col in KERNEL_EVENTS:
        if col.name in df.columns:
            s = df[col.name]
            try:
                if col.dtype == "float64":
                    s = pd.to_numeric(s, errors="raise").astype("float64")
                elif col.dtype == "Int64":
                    s = pd.to_numeric(s, errors="raise").astype("Int64")
                else:
                    s = s.astype("string")
            except (ValueError, TypeError) as e:
                raise ParseError(f"{origin}: column {col.name!r} is not {col.dtype}: {e}") from None
        else:
            s = pd.Series([pd.NA] * n, dtype=col.dtype) if col.dtype != "float64" else pd.Series(np.full(n, np.nan))
        out[col.name] = s.reset_index(drop=True)
    res = pd.DataFrame(out)
    for name in REQUIRED:
        if res[name].isna().any():
            bad = int(res[name].isna().sum())
            raise ParseError(f"{origin}: required column {name!r} has {bad} empty values")
    if (res["dur_us"] < 0).any():
        raise ParseError(f"{origin}: negative durations")
    return res


def describe() -> str:
    """The schema as a markdown table (used by docs and ``perf import --schema``)."""
    lines = ["| column | dtype | unit | required | meaning |", "|---|---|---|---|---|"]
    for c in KERNEL_EVENTS:
        lines.append(f"| {c.name} | {c.dtype} | {c.unit} | {'yes' if c.required else ''} | {c.doc} |")
    return "\n".join(lines)
