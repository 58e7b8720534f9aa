"""PyTorch profiler (Kineto) Chrome traces from CUDA -> KERNEL_EVENTS (source ``kineto``).

Reads ``.json`` and ``.json.gz`` by streaming ``traceEvents.item`` with ijson. Device rows are
the ``X`` events of categories :data:`DEVICE_CATEGORIES` (kernels, memcpy, memset); the
launching CPU op is found through ``args["External id"]`` (the enclosing ``cpu_op``), the
launch through ``args.correlation`` (kept in ``correlation``).

Times: newer traces give ``ts`` relative to ``baseTimeNanoseconds`` (kept as ``start_us``;
``start_ns`` = base + ts), older ones absolute integer µs (``start_ns`` = ts).

Error policy: empty, non-JSON or event-less file: :class:`ParseError`; a file that breaks off
after some events: the events before the break + a warning; an unknown ``schemaVersion``
(not 1): a warning, then parsed as version 1; a trace with no device events: ParseError.
Several GPUs in one trace are kept apart in ``device`` (not an error).
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import pandas as pd

from mamba3_perf.errors import ParseError
from mamba3_perf.traces._io import Progress, exact_ns, iter_json_items, top_level_number
from mamba3_perf.traces.attribution import label
from mamba3_perf.traces.schema import conform

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
KNOWN_SCHEMA_VERSIONS = (1,)
# schema column -> Kineto kernel args key
ARGS: dict[str, str] = {
    "correlation": "correlation",
    "registers_per_thread": "registers per thread",
    "smem_bytes": "shared memory",
}


def _dims(v) -> str | None:
    return ",".join(str(int(x)) for x in v) if isinstance(v, list) else None


def _grid_blocks(v) -> int | None:
    return math.prod(int(x) for x in v) if isinstance(v, list) else None


def parse_kineto(path: str | Path, *, progress: Progress | None = None) -> pd.DataFrame:
    """A Kineto trace (.json / .json.gz) -> one row per device kernel / memcpy / memset."""
    path = Path(path)
    version = top_level_number(path, "schemaVersion")
    if version is not None and version not in KNOWN_SCHEMA_VERSIONS:
        warnings.warn(f"{path}: Kineto schemaVersion {version} is not one of "
                      f"{KNOWN_SCHEMA_VERSIONS}; parsed as version 1", stacklevel=2)
    base_ns = top_level_number(path, "baseTimeNanoseconds") or 0
    rows: list[dict] = []
    cpu_ops: dict[int, str] = {}  # External id -> cpu_op name
    for e in iter_json_items(path, "traceEvents.item", progress):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = e.get("cat")
        args = e.get("args") or {}
        if cat == "cpu_op" and "External id" in args:
            cpu_ops[int(args["External id"])] = str(e.get("name"))
        elif cat in DEVICE_CATEGORIES:
            rows.append({
                "kernel_name": e.get("name"),
                "device": str(args.get("device", e.get("pid"))),
                "stream": str(args.get("stream", e.get("tid"))),
                "ts": e.get("ts"),
                "dur_us": float(e.get("dur", "nan")),
                "grid": _dims(args.get("grid")),
                "block": _dims(args.get("block")),
                "block_dim": _grid_blocks(args.get("grid")),
                "external_id": args.get("External id"),
                **{col: args.get(key) for col, key in ARGS.items()},
            })
    if not rows:
        raise ParseError(f"{path}: no device events (categories {DEVICE_CATEGORIES}) in the trace")
    df = pd.DataFrame(rows)
    ts_ns = [exact_ns(t, origin=str(path), field="ts") for t in df.pop("ts")]
    df["start_us"] = [t / 1000.0 for t in ts_ns]
    df["start_ns"] = pd.array([base_ns + t for t in ts_ns], dtype="Int64")
    df["start_kind"] = "clock"
    ext = df.pop("external_id")
    df["cpu_op"] = [cpu_ops.get(int(x)) if x is not None and x == x else None for x in ext]
    df["source"] = "kineto"
    return conform(label(df), origin=str(path))
