"""Triton proton outputs -> KERNEL_EVENTS (source ``proton``).

- :func:`parse_proton_tree` — hatchet output ``[tree, device_info]``: a node whose metrics
  carry ``device_id`` is a kernel (``time (ns)`` summed over ``count`` calls: one row with
  ``calls`` = count); its descendants are in-kernel scopes (rows with ``region`` set); the
  host scopes above a kernel (``proton.scope``) become ``cpu_op`` ("a/b").
- :func:`parse_proton_trace` — chrome_trace output. CUPTI mode: ``cat`` kernel events,
  ``tid`` = stream, ``args.call_stack`` = host scopes. Instrumentation mode: ``pid`` is
  ``"<kernel> Core<n> CTA<id> ..."``, ``tid`` ``"warp <w> ..."``, ``name`` the scope, ``ts`` /
  ``dur`` in cycles/1000: one row per (CTA, warp, scope) with ``region`` set; cycles become µs
  through the SM clock (``clock_khz``, else the ``clock_rate`` of a ``.hatchet`` file next to
  the trace).

The tree has no timestamps: its rows are laid end to end (``start_kind`` = ``serialized``).

Error policy: empty / non-JSON / wrong-shape file, a node with an unreadable time, an
instrumentation trace without a known clock: :class:`ParseError`; a chrome trace that breaks
off after some events: those events + a warning (as every streamed JSON).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from mamba3_perf.errors import ParseError
from mamba3_perf.traces._io import Progress, exact_ns, iter_json_items, serialized_starts
from mamba3_perf.traces.attribution import label
from mamba3_perf.traces.schema import conform

TIME_METRIC = "time (ns)"
INSTR_PID = re.compile(r"^(?P<kernel>.+?) Core(?P<core>\d+) CTA(?P<cta>\d+)")


def _load_small_json(path: Path):
    """Hatchet files are small (one node per call path): plain json, with clear errors."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ParseError(f"{path}: cannot read: {e}") from None
    if not text.strip():
        raise ParseError(f"{path}: empty file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(f"{path}: not valid JSON ({e})") from None


def device_clock_khz(hatchet_path: str | Path) -> float | None:
    """The SM clock (kHz) of the first device listed in a hatchet file's device_info."""
    data = _load_small_json(Path(hatchet_path))
    info = data[1] if isinstance(data, list) and len(data) > 1 else {}
    for devices in (info or {}).values():
        for dev in (devices or {}).values():
            if "clock_rate" in dev:
                return float(dev["clock_rate"])
    return None


def parse_proton_tree(path: str | Path) -> pd.DataFrame:
    """A proton hatchet file -> one row per kernel call path (and per in-kernel scope)."""
    path = Path(path)
    data = _load_small_json(path)
    if not (isinstance(data, list) and data and isinstance(data[0], dict) and "frame" in data[0]):
        raise ParseError(f"{path}: not a proton hatchet tree ([tree, device_info] expected)")
    rows: list[dict] = []

    def walk(node: dict, host: list[str], kernel: str | None, device: str | None) -> None:
        name = str((node.get("frame") or {}).get("name"))
        metrics = node.get("metrics") or {}
        is_kernel = kernel is None and "device_id" in metrics
        if is_kernel or kernel is not None:
            try:
                dur_us = float(metrics.get(TIME_METRIC, 0)) / 1000.0
            except (TypeError, ValueError):
                raise ParseError(f"{path}: node {name!r}: {TIME_METRIC} = {metrics.get(TIME_METRIC)!r}") from None
            dev = str(metrics.get("device_id", device))
            rows.append({
                "kernel_name": name if is_kernel else kernel,
                "region": None if is_kernel else name,
                "device": dev,
                "dur_us": dur_us,
                "calls": metrics.get("count"),
                "cpu_op": "/".join(host) or None,
            })
            kernel, device = (name, dev) if is_kernel else (kernel, device)
        for child in node.get("children") or []:
            walk(child, host if kernel else host + ([name] if name != "ROOT" else []), kernel, device)

    walk(data[0], [], None, None)
    if not rows:
        raise ParseError(f"{path}: no kernel nodes (no node has device_id metrics)")
    df = pd.DataFrame(rows)
    df["start_us"] = serialized_starts(list(df["dur_us"]))
    df["start_kind"] = "serialized"
    df["source"] = "proton"
    return conform(label(df), origin=str(path))


def _clock_for(path: Path, clock_khz: float | None) -> float:
    if clock_khz is not None:
        return float(clock_khz)
    for sibling in sorted(path.parent.glob("*.hatchet")):
        khz = device_clock_khz(sibling)
        if khz:
            return khz
    raise ParseError(f"{path}: instrumentation-mode trace times are cycles; pass clock_khz "
                     "(SM clock) or keep the run's .hatchet file beside it")


def parse_proton_trace(path: str | Path, *, clock_khz: float | None = None,
                       progress: Progress | None = None) -> pd.DataFrame:
    """A proton chrome_trace (CUPTI or instrumentation mode) -> KERNEL_EVENTS rows."""
    path = Path(path)
    rows: list[dict] = []
    for e in iter_json_items(path, "traceEvents.item", progress):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        m = INSTR_PID.match(str(e.get("pid", "")))
        if m:
            rows.append({"kernel_name": m["kernel"], "region": e.get("name"), "device": "unknown",
                         "ts": e.get("ts"), "dur": e.get("dur"), "cycles": True})
        elif e.get("cat") == "kernel":
            stack = [s for s in ((e.get("args") or {}).get("call_stack") or []) if s != "ROOT"]
            rows.append({"kernel_name": e.get("name"), "region": None, "device": "unknown",
                         "stream": str(e.get("tid")), "cpu_op": "/".join(stack[:-1]) or None,
                         "ts": e.get("ts"), "dur": e.get("dur"), "cycles": False})
    if not rows:
        raise ParseError(f"{path}: no kernel or instrumentation events in the proton trace")
    df = pd.DataFrame(rows)
    # cycles/1000 -> µs: x * 1000 cycles / (clock_khz / 1000 cycles per µs)
    us_per_unit = [1e6 / _clock_for(path, clock_khz) if c else 1.0 for c in df.pop("cycles")]
    ts_ns = [exact_ns(t, origin=str(path), field="ts") for t in df.pop("ts")]
    df["start_us"] = [t / 1000.0 * k for t, k in zip(ts_ns, us_per_unit)]
    df["dur_us"] = [float(d) * k for d, k in zip(df.pop("dur"), us_per_unit)]
    df["start_kind"] = "clock"
    df["source"] = "proton"
    return conform(label(df), origin=str(path))
