"""Ascend profiler outputs -> KERNEL_EVENTS (torch_npu.profiler and the msprof command line).

Readers:
- :func:`parse_kernel_table` — ``kernel_details.csv`` (torch_npu) and ``op_summary_*.csv``
  (msprof); the two differ only in header names, mapped by :data:`CSV_COLUMNS`, which also
  lists the renames across versions (``Block Dim`` / ``Block Num``, unprefixed PMU names on
  older chips). PipeUtilization metrics are kept when present, NaN otherwise.
- :func:`parse_trace_json` — ``trace_view.json`` / ``msprof_*.json`` (a JSON array of Chrome
  events), streamed with ijson; device tasks are the ``X`` events of the process whose
  ``process_name`` is ``Ascend Hardware``.
- :func:`read_op_statistic` — the per-op aggregate ``op_statistic*.csv`` (not events; for
  cross-checking totals).

Times: ``Start Time(us)`` is an epoch-clock µs string (with a trailing tab in real files);
it is parsed exactly into ``start_ns`` and ``start_us`` is µs from the file's first task.

Error policy (one per case):
- empty file, not CSV/JSON, a CSV without the name/start/duration columns, op_statistic or
  another aggregate given as events: :class:`ParseError` naming the file and the problem;
- a JSON array that breaks off after some events: the events before the break + a warning;
- a trace_view without ``process_name`` metadata (some msprof exports): device tasks are
  taken as the ``X`` events whose args carry ``Task Type``, with a warning;
- several ``Ascend Hardware`` processes (mixed devices in one trace): ParseError;
- ``N/A`` cells (HCCL, AI_CPU rows, very long tasks): NA in that row only.
"""
from __future__ import annotations

import csv
import io
import warnings
from pathlib import Path

import pandas as pd

from mamba3_perf.errors import ParseError
from mamba3_perf.traces._io import Progress, exact_ns, iter_json_items, number_or_na, relative_us
from mamba3_perf.traces.attribution import label
from mamba3_perf.traces.schema import conform

# schema column -> header names across kernel_details / op_summary / versions (first found wins)
CSV_COLUMNS: dict[str, tuple[str, ...]] = {
    "kernel_name": ("Name", "Op Name"),
    "start": ("Start Time(us)", "Task Start Time(us)"),
    "dur_us": ("Duration(us)", "Task Duration(us)"),
    "wait_us": ("Wait Time(us)", "Task Wait Time(us)"),
    "device": ("Device_id",),
    "stream": ("Stream ID",),
    "accelerator_core": ("Accelerator Core", "Task Type"),
    "block_dim": ("Block Dim", "Block Num"),
    "mix_block_dim": ("Mix Block Dim", "Mix Block Num"),
    "aic_mac_ratio": ("aic_mac_ratio", "mac_ratio"),
    "aic_scalar_ratio": ("aic_scalar_ratio", "scalar_ratio"),
    "aiv_scalar_ratio": ("aiv_scalar_ratio",),
    "aiv_vec_ratio": ("aiv_vec_ratio", "vec_ratio"),
    "aic_mte1_ratio": ("aic_mte1_ratio", "mte1_ratio"),
    "aic_mte2_ratio": ("aic_mte2_ratio", "mte2_ratio"),
    "aiv_mte2_ratio": ("aiv_mte2_ratio",),
    "aiv_mte3_ratio": ("aiv_mte3_ratio", "mte3_ratio"),
    "aic_fixpipe_ratio": ("aic_fixpipe_ratio", "fixpipe_ratio"),
    "cube_utilization_pct": ("cube_utilization(%)",),
}
REQUIRED_CSV = ("kernel_name", "start", "dur_us")
_TEXT = ("kernel_name", "device", "stream", "accelerator_core")
_INTS = ("block_dim", "mix_block_dim")
AGGREGATE_MARKERS = ("Core Type", "Total Time(us)")  # op_statistic: per op type, not per task
DEVICE_PROCESS = "Ascend Hardware"


def _read_csv_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise ParseError(f"{path}: cannot read as text: {e}") from None
    if not text.strip():
        raise ParseError(f"{path}: empty file")
    rows = list(csv.reader(io.StringIO(text)))
    header = [h.strip() for h in rows[0]]
    body = [r for r in rows[1:] if any(c.strip() for c in r)]
    return header, body


def _block(cell: str) -> float:
    # triton-ascend reports (mixBlockNumRatio << 16) + blockNum; real block counts are < 2**16
    v = number_or_na(cell)
    return float(int(v) & 0xFFFF) if v == v and v >= 1 << 16 else v


def parse_kernel_table(path: str | Path) -> pd.DataFrame:
    """kernel_details.csv or op_summary_*.csv -> KERNEL_EVENTS (source ``kernel_details`` / ``op_summary``)."""
    path = Path(path)
    header, body = _read_csv_rows(path)
    if all(m in header for m in AGGREGATE_MARKERS):
        raise ParseError(f"{path}: per-op aggregate table (op_statistic), not kernel events; "
                         "give kernel_details.csv, op_summary_*.csv or the profiler directory")
    where = {col: next((header.index(n) for n in names if n in header), None)
             for col, names in CSV_COLUMNS.items()}
    missing = [CSV_COLUMNS[c][0] for c in REQUIRED_CSV if where[c] is None]
    if missing:
        raise ParseError(f"{path}: not an Ascend kernel table: columns {missing} missing "
                         f"(header starts {header[:6]})")
    source = "op_summary" if "Op Name" in header and "Name" not in header else "kernel_details"
    out: dict[str, list] = {c: [] for c, i in where.items() if i is not None and c != "start"}
    start_ns: list[int] = []
    for lineno, row in enumerate(body, start=2):
        if len(row) < len(header):
            raise ParseError(f"{path}: line {lineno} has {len(row)} cells, header has {len(header)} (truncated?)")
        start_ns.append(exact_ns(row[where["start"]], origin=f"{path}:{lineno}", field="Start Time(us)"))
        for col in out:
            cell = row[where[col]].strip()
            if col in _TEXT:
                out[col].append(None if cell in ("", "N/A") else cell)
            elif col in _INTS:
                out[col].append(_block(cell))
            else:
                out[col].append(number_or_na(cell))
    df = pd.DataFrame(out)
    df["start_ns"] = pd.array(start_ns, dtype="Int64")
    df["start_us"] = relative_us(start_ns)
    df["start_kind"] = "clock"
    df["source"] = source
    if "device" not in df.columns:
        df["device"] = "npu"
    df["device"] = df["device"].fillna("npu")
    return conform(label(df), origin=str(path))


def _device_pids(path: Path, meta: list[dict]) -> set | None:
    names = {e.get("pid"): (e.get("args") or {}).get("name") for e in meta if e.get("name") == "process_name"}
    if not names:
        return None
    pids = {pid for pid, n in names.items() if n == DEVICE_PROCESS}
    if len(pids) > 1:
        raise ParseError(f"{path}: {len(pids)} '{DEVICE_PROCESS}' processes (mixed devices in one "
                         "trace); split it per device")
    if not pids:
        raise ParseError(f"{path}: no '{DEVICE_PROCESS}' process in the trace (processes: "
                         f"{sorted(str(n) for n in names.values())})")
    return pids


def parse_trace_json(path: str | Path, *, progress: Progress | None = None) -> pd.DataFrame:
    """trace_view.json / msprof_*.json -> KERNEL_EVENTS (source ``trace_view`` / ``msprof_json``).

    Streams the array (ijson); keeps metadata and the ``X`` events that can be device tasks
    (in an announced device process, or with ``Task Id`` / ``Task Type`` args), then picks the
    device process. Memory is bounded by the device tasks, not by the file.
    """
    path = Path(path)
    source = "msprof_json" if path.name.startswith("msprof") else "trace_view"
    meta: list[dict] = []
    tasks: list[tuple] = []  # (pid, tid, ts, dur, name, task type)
    hardware: set = set()  # device pids announced so far
    for e in iter_json_items(path, "item", progress):
        if not isinstance(e, dict):
            raise ParseError(f"{path}: array item is {type(e).__name__}, not a trace event")
        ph = e.get("ph")
        if ph == "M":
            meta.append(e)
            if e.get("name") == "process_name" and (e.get("args") or {}).get("name") == DEVICE_PROCESS:
                hardware.add(e.get("pid"))
        elif ph == "X":
            args = e.get("args") or {}
            # keep only device-task candidates (memory bound): a known device pid, or task args
            if e.get("pid") in hardware or "Task Id" in args or "Task Type" in args:
                tasks.append((e.get("pid"), e.get("tid"), e.get("ts"), e.get("dur"), e.get("name"),
                              args.get("Task Type")))
    pids = _device_pids(path, meta)
    if pids is None:
        warnings.warn(f"{path}: no process_name metadata; taking events with a 'Task Type' arg "
                      "as device tasks", stacklevel=2)
        kept = [t for t in tasks if t[5] is not None]
    else:
        kept = [t for t in tasks if t[0] in pids]
    start_ns = [exact_ns(t[2], origin=str(path), field="ts") for t in kept]
    df = pd.DataFrame({
        "kernel_name": [t[4] for t in kept],
        "stream": [None if t[1] is None else str(t[1]) for t in kept],
        "dur_us": [float(t[3]) if t[3] is not None else float("nan") for t in kept],
        "accelerator_core": [t[5] for t in kept],
    })
    if df["dur_us"].isna().any():
        raise ParseError(f"{path}: {int(df['dur_us'].isna().sum())} device events without 'dur'")
    df["start_ns"] = pd.array(start_ns, dtype="Int64")
    df["start_us"] = relative_us(start_ns)
    df["start_kind"] = "clock"
    df["source"] = source
    df["device"] = "npu"
    return conform(label(df), origin=str(path))


def read_op_statistic(path: str | Path) -> pd.DataFrame:
    """op_statistic*.csv -> columns op_type, core_type, count, total_us (per-op aggregates)."""
    path = Path(path)
    header, body = _read_csv_rows(path)
    need = ("OP Type", "Core Type", "Count", "Total Time(us)")
    missing = [n for n in need if n not in header]
    if missing:
        raise ParseError(f"{path}: not an op_statistic table: columns {missing} missing")
    idx = [header.index(n) for n in need]
    return pd.DataFrame({
        "op_type": [r[idx[0]] for r in body],
        "core_type": [r[idx[1]] for r in body],
        "count": [int(number_or_na(r[idx[2]])) for r in body],
        "total_us": [number_or_na(r[idx[3]]) for r in body],
    })
