"""Nsight Compute CSV -> KERNEL_EVENTS (source ``ncu``), one row per profiled launch.

Both CSV shapes go through one long table ``(launch id, metric, unit, value)``:
- ``--page raw`` (wide): row 1 header (id columns then metric names), row 2 units, then one
  row per launch — melted to long;
- ``--page details`` / ``--metrics`` (long): one row per (launch, section, metric).
:data:`METRICS` maps both raw metric names and the details page's display names to schema
columns; :data:`SUMMED` columns add several metrics (DRAM read + write bytes, static +
dynamic shared memory), :data:`MULTIPLIED` ones multiply them (executed instructions from a
details page's IPC, active cycles and SM count). Values lose their thousands separators and are
scaled by their unit (time to µs, bytes to B; ncu's SI prefixes).

ncu serializes launches and gives no timestamps: ``start_us`` lays launches end to end in
launch-id order (``start_kind`` = ``serialized``).

Error policy: empty file or no quoted CSV lines after the ``==PROF==`` / ``==WARNING==``
noise, a header without ``ID`` / ``Kernel Name``, or a launch without a duration metric:
:class:`ParseError` naming the file and launch.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import pandas as pd

from mamba3_perf.errors import ParseError
from mamba3_perf.traces._io import NA_CELLS, number_or_na, serialized_starts
from mamba3_perf.traces.attribution import label
from mamba3_perf.traces.schema import conform

# the warp-stall reasons with a schema column (stall_<reason>), of the ~20 ncu splits
# cycles_per_issue into; the raw page of the WarpStateStats section has all of them
STALL_REASONS = ("long_scoreboard", "barrier", "short_scoreboard", "mio_throttle", "wait",
                 "math_pipe_throttle", "gmma")
# metric (raw name or details display name) -> schema column; first present wins per column
METRICS: dict[str, str] = {
    "gpu__time_duration.sum": "dur_us",
    "Duration": "dur_us",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pipe_pct",
    "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active": "alu_pipe_pct",
    "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue_active_pct",
    "One or More Eligible": "issue_active_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "DRAM Throughput": "dram_throughput_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "warps_active_pct",
    "Achieved Occupancy": "warps_active_pct",
    "launch__registers_per_thread": "registers_per_thread",
    "Registers Per Thread": "registers_per_thread",
    "launch__grid_size": "block_dim",
    "Grid Size": "block_dim",
    "smsp__inst_executed.sum": "instructions",
    "smsp__average_warp_latency_per_inst_issued.ratio": "cycles_per_issue",
    "Warp Cycles Per Issued Instruction": "cycles_per_issue",
    **{f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio": f"stall_{reason}"
       for reason in STALL_REASONS},
}
# schema column -> metrics added together (those present)
SUMMED: dict[str, tuple[str, ...]] = {
    "dram_bytes": ("dram__bytes_read.sum", "dram__bytes_write.sum"),
    "smem_bytes": ("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic",
                   "Static Shared Memory Per Block", "Dynamic Shared Memory Per Block"),
}
# schema column -> metrics multiplied together, where the column has no metric of its own and
# every factor is present (a details page has no instruction count, but its rate and cycles)
MULTIPLIED: dict[str, tuple[str, ...]] = {
    "instructions": ("Executed Ipc Active", "SM Active Cycles", "# SMs"),
}
UNIT_EXP10: dict[str, int] = {  # value * 10**exp: times to µs, sizes to bytes
    "ns": -3, "nsecond": -3, "us": 0, "usecond": 0, "ms": 3, "msecond": 3, "s": 6, "second": 6,
    "byte": 0, "Kbyte": 3, "Mbyte": 6, "Gbyte": 9, "Tbyte": 12, "byte/block": 0, "Kbyte/block": 3,
}
ID_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
              "Block Size", "Grid Size", "Device", "CC")
LONG_MARKER = "Metric Name"


def _csv_rows(path: Path) -> list[list[str]]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise ParseError(f"{path}: cannot read: {e}") from None
    quoted = [ln for ln in lines if ln.startswith('"')]  # drops ==PROF== / ==WARNING== noise
    if not quoted:
        raise ParseError(f"{path}: no ncu CSV lines (empty file, or ncu ran without --csv)")
    return list(csv.reader(quoted))


def _long_records(path: Path, rows: list[list[str]]) -> tuple[list[dict], dict[str, dict]]:
    """(long records, launch id -> id columns) from either CSV shape."""
    header = rows[0]
    for need in ("ID", "Kernel Name"):
        if need not in header:
            raise ParseError(f"{path}: not an ncu CSV: no {need!r} column (header starts {header[:5]})")
    ids: dict[str, dict] = {}
    records: list[dict] = []
    if LONG_MARKER in header:
        i_name, i_unit, i_val = (header.index(c) for c in (LONG_MARKER, "Metric Unit", "Metric Value"))
        for r in rows[1:]:
            rec = dict(zip(header, r))
            ids.setdefault(rec["ID"], {c: rec.get(c) for c in ID_COLUMNS})
            if r[i_name]:
                records.append({"id": rec["ID"], "metric": r[i_name], "unit": r[i_unit], "value": r[i_val]})
        return records, ids
    if len(rows) < 3:
        raise ParseError(f"{path}: ncu raw page without launch rows (header and units only)")
    units = rows[1]
    for r in rows[2:]:
        rec = dict(zip(header, r))
        ids[rec["ID"]] = {c: rec.get(c) for c in ID_COLUMNS}
        for name, unit, value in zip(header, units, r):
            if name not in ID_COLUMNS:
                records.append({"id": rec["ID"], "metric": name, "unit": unit, "value": value})
    return records, ids


def _value(rec: dict) -> float:
    v = number_or_na(rec["value"]) if rec["value"] not in NA_CELLS else float("nan")
    exp = UNIT_EXP10.get(rec["unit"], 0)
    return v / 10 ** -exp if exp < 0 else v * 10 ** exp  # divide: 30208 ns -> 30.208 exactly


def _dims(cell: str | None) -> str | None:
    if not cell:
        return None
    return ",".join(p.strip() for p in cell.strip("()").split(","))


def parse_ncu(path: str | Path) -> pd.DataFrame:
    """An ncu ``--csv`` export (raw, details or --metrics page) -> KERNEL_EVENTS."""
    path = Path(path)
    records, ids = _long_records(path, _csv_rows(path))
    per_launch: dict[str, dict] = {i: {} for i in ids}
    for rec in records:
        values = per_launch[rec["id"]]
        col = METRICS.get(rec["metric"])
        if col is not None and col not in values:
            try:
                values[col] = _value(rec)
            except ValueError:
                raise ParseError(f"{path}: launch {rec['id']}: {rec['metric']} = {rec['value']!r} "
                                 "is not a number") from None
        for col, names in (*SUMMED.items(), *MULTIPLIED.items()):
            if rec["metric"] in names:
                values.setdefault(f"_{col}", {}).setdefault(rec["metric"], _value(rec))
    out = []
    for lid in sorted(ids, key=lambda s: int(s) if s.isdigit() else s):
        idc, values = ids[lid], per_launch[lid]
        if "dur_us" not in values:
            raise ParseError(f"{path}: launch {lid} ({idc['Kernel Name']}) has no duration metric "
                             "(gpu__time_duration.sum or Duration)")
        for col in SUMMED:
            parts = values.pop(f"_{col}", None)
            if parts:
                values[col] = sum(parts.values())
        for col, names in MULTIPLIED.items():
            parts = values.pop(f"_{col}", None)
            if col not in values and parts and len(parts) == len(names):
                values[col] = math.prod(parts.values())
        grid = _dims(idc.get("Grid Size"))
        if "block_dim" not in values and grid:
            values["block_dim"] = math.prod(int(d) for d in grid.split(","))
        out.append({
            "kernel_name": idc["Kernel Name"],
            "device": idc.get("Device") or "cuda",
            "stream": idc.get("Stream"),
            "grid": grid,
            "block": _dims(idc.get("Block Size")),
            **values,
        })
    df = pd.DataFrame(out)
    df["start_us"] = serialized_starts(list(df["dur_us"]))
    df["start_kind"] = "serialized"
    df["source"] = "ncu"
    return conform(label(df), origin=str(path))
