"""``perf import``: read a profiler output, print its stage breakdown, store it as a run."""
from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

from mamba3_perf.cli import app

PROGRESS_MIN_BYTES = 16 << 20  # show a progress bar for inputs from 16 MiB


def _input_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@app.command("import")
def import_trace(
    path: Path = typer.Argument(..., help="profiler output: a file or a directory to walk"),
    case: Optional[str] = typer.Option(None, "--case", help="case id the trace was taken on"),
    stage: Optional[str] = typer.Option(None, "--stage", help="ladder stage (variant) the trace is of"),
    out: Optional[Path] = typer.Option(None, "--out", help="run store root; the events are stored there as a new run"),
    name: Optional[str] = typer.Option(None, "--name", help="run name (default: import-<input>-<UTC time>)"),
):
    """Import PATH (Ascend torch_npu/msprof, Kineto, ncu CSV, proton) and print its stage breakdown."""
    from mamba3_perf import runs
    from mamba3_perf.analysis.breakdown import kernel_stalls, kernel_traffic, stage_breakdown
    from mamba3_perf.analysis.limits import device_among
    from mamba3_perf.analysis.occupancy import kernel_occupancy
    from mamba3_perf.reports.console import breakdown_table, occupancy_table, stall_table, traffic_table
    from mamba3_perf.traces import load

    console = Console()
    if path.exists() and _input_bytes(path) >= PROGRESS_MIN_BYTES:
        with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                      TimeRemainingColumn(), console=console, transient=True) as bar:
            task = bar.add_task(f"reading {path.name}", total=None)
            events = load(path, case_id=case, variant=stage,
                          progress=lambda done, total: bar.update(task, completed=done, total=total))
    else:
        events = load(path, case_id=case, variant=stage)
    sources = ", ".join(sorted(events["source"].unique()))
    # tables rendered at their own width: soft wrap leaves long lines to the terminal
    console.print(breakdown_table(stage_breakdown(events),
                                  title=f"Stage breakdown - {path.name} ({sources}, {len(events)} events)"),
                  soft_wrap=True)
    stalls = stall_table(kernel_stalls(events))
    if stalls:
        console.print(stalls, soft_wrap=True)
    spec = device_among(events["device"].unique() if "device" in events.columns else ())
    traffic = traffic_table(kernel_traffic(events, spec.hbm_bytes_per_s), device=spec)
    if traffic:
        console.print(traffic, soft_wrap=True)
    occupancy = occupancy_table(kernel_occupancy(events, spec), device=spec)
    if occupancy:
        console.print(occupancy, soft_wrap=True)
    if out is not None:
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        run_name = name or f"import-{path.name.split('.')[0]}-{stamp}"
        meta = {"timing_kind": "device", "source_path": os.fspath(path), "sources": sources,
                "cases": [case] if case else [], "stages": [stage] if stage else []}
        with runs.create_run(out, run_name, meta) as run:
            run.write_table("events", events)
        console.print(f"stored {len(events)} events in {Path(out) / run_name}")


@app.command("sass")
def sass_page(
    path: Path = typer.Argument(..., help="an ncu source page as CSV (ncu --import R --page source --csv "
                                          "--print-source sass; benchmarks/ncu_source.py writes one), or a "
                                          "kernel's nvdisasm -c listing (.gz too)"),
    rows: int = typer.Option(15, "--rows", min=1, help="opcodes and hottest instructions to show"),
):
    """Where one kernel's instructions go: an ncu source page summed per loop body and per opcode;
    or, from a static nvdisasm listing, its instruction mix, wgmma waits and any write of a wgmma's
    register operand before its wait."""
    from mamba3_perf.analysis.sass import is_listing, parse_source_page, read_text
    from mamba3_perf.errors import ParseError
    from mamba3_perf.reports.console import source_page_tables, static_listing_tables

    if not path.is_file():
        raise ParseError(f"{path}: no such file")
    text = read_text(path)
    if is_listing(text):
        out = static_listing_tables(text, title=path.name)
    else:
        out = source_page_tables(parse_source_page(text), rows=rows, title=path.name)
    Console().print(out, soft_wrap=True, markup=False, highlight=False)
