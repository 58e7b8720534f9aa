"""The report of one stored run, generated one way for ``perf report`` and ``perf profile``:
ladder table with limits, stage breakdown, ``report.md`` and its HTML charts, console text.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mamba3_perf.analysis.ladder import LadderSummary
from mamba3_perf.analysis.limits import DeviceSpec, device_for


def ladder_with_limits(timings: pd.DataFrame, meta: dict, *, baseline: pd.DataFrame | None = None):
    """(ladder table with limit columns, its summary, case_id -> Case, device spec) of a run
    (the fractions of the limits left empty where the run's times are interpreter times).

    ``baseline`` is a recorded TileLang baseline (default: the packaged H200 record); it gives
    the TileLang time where the run has no live ``tilelang`` row, on the device it was recorded
    on only (:func:`baseline_for_run`).
    """
    from mamba3_perf.analysis.ladder import ladder_table, resolve_cases, summarize_ladder
    from mamba3_perf.analysis.limits import with_limits

    cases = resolve_cases(timings["case_id"], meta.get("cases") or ())
    spec = device_for(meta.get("device"))
    base = baseline_for_run(meta, baseline)
    table = with_limits(ladder_table(timings, cases=cases, baseline=base), cases, spec)
    if meta.get("timing_kind") == "interpreter":  # a CPU interpreter's time is no fraction of a device's limit
        table[[c for c in table.columns if c.startswith("frac_")]] = float("nan")
    return table, summarize_ladder(table), cases, spec


def baseline_for_run(meta: dict, baseline: pd.DataFrame | None = None) -> pd.DataFrame | None:
    """The recorded TileLang baseline a run's ratios may use: ``baseline`` (default: the packaged
    H200 record) where it names no device or the run's device is the same kind (analysis.limits
    .device_for), else None: an H100's or an interpreter's time over the H200's is no speedup."""
    from mamba3_perf.analysis.ladder import load_gpu_baseline

    base = baseline if baseline is not None else load_gpu_baseline()
    recorded = base.attrs.get("device")
    name = recorded.get("name") if isinstance(recorded, dict) else recorded
    if not name:
        return base
    run = device_for(meta.get("device"), default=None)
    return base if run is not None and run is device_for(str(name), default=None) else None


def _whole_kernels(events: pd.DataFrame) -> pd.DataFrame:
    """The whole-kernel rows (region rows would count kernels twice)."""
    if "region" in events.columns and events["region"].notna().any():
        return events[events["region"].isna()]
    return events


def run_breakdown(events: pd.DataFrame) -> pd.DataFrame:
    """Stage breakdown of the whole-kernel rows."""
    from mamba3_perf.analysis.breakdown import stage_breakdown

    bd = stage_breakdown(_whole_kernels(events))
    return bd if "variant" in bd.columns else bd.assign(variant="(all)")


@dataclass(frozen=True)
class RunReport:
    table: pd.DataFrame
    summary: LadderSummary
    breakdown: pd.DataFrame | None
    written: tuple[Path, ...]  # report.md, then its charts
    notes: tuple[str, ...] = ()  # what was not written, and why
    stalls: pd.DataFrame | None = None  # warp stalls per kernel (ncu runs), analysis.breakdown.kernel_stalls
    traffic: pd.DataFrame | None = None  # DRAM bytes per kernel (ncu runs), analysis.breakdown.kernel_traffic
    occupancy: pd.DataFrame | None = None  # blocks per SM and their limiter (CUDA traces), analysis.occupancy
    device: DeviceSpec | None = None  # whose HBM bandwidth the traffic floor uses


def write_run_report(run, md_path: str | Path | None = None, *,
                     baseline: pd.DataFrame | None = None) -> RunReport:
    """Write ``report.md`` (default in the run directory) and, beside it, ``<stem>-ladder.html``
    and (when the run has kernel events) ``<stem>-breakdown.html``. Without plotly (a bare
    device image) only the markdown is written and ``notes`` says so."""
    from mamba3_perf.analysis.breakdown import kernel_stalls, kernel_traffic
    from mamba3_perf.analysis.occupancy import kernel_occupancy
    from mamba3_perf.reports import write_html
    from mamba3_perf.reports.markdown import optimization_record
    from mamba3_perf.runs import write_text_atomic

    table, summary, _, spec = ladder_with_limits(run.table("timings"), run.meta, baseline=baseline)
    events = run.table("events") if run.has("events") else None
    breakdown = run_breakdown(events) if events is not None else None
    kernels = _whole_kernels(events) if events is not None else None
    stalls = kernel_stalls(kernels) if kernels is not None else None
    traffic = kernel_traffic(kernels, spec.hbm_bytes_per_s) if kernels is not None else None
    occupancy = kernel_occupancy(kernels, spec) if kernels is not None else None
    extra = dict(stalls=stalls, traffic=traffic, occupancy=occupancy, device=spec)
    md = Path(md_path) if md_path is not None else run.path / "report.md"
    pages, notes = run_source_pages(run)
    write_text_atomic(md, optimization_record(run.meta, table, summary, breakdown=breakdown, kernels=kernels,
                                              source_pages=pages))
    try:
        from mamba3_perf.reports.charts import speedup_ladder_chart, stage_breakdown_chart
    except ImportError as e:
        return RunReport(table, summary, breakdown, (md,), (*notes, f"no HTML charts: {e}"), **extra)
    written = [md, write_html(speedup_ladder_chart(table), md.with_name(md.stem + "-ladder.html"))]
    if breakdown is not None and not breakdown.empty:
        written.append(write_html(stage_breakdown_chart(breakdown),
                                  md.with_name(md.stem + "-breakdown.html")))
    return RunReport(table, summary, breakdown, tuple(written), tuple(notes), **extra)


SOURCE_PAGE_PREFIX, SOURCE_PAGE_SUFFIX = "sass-", ".csv.gz"


def source_page_path(trace_dir: str | Path, variant: str) -> Path:
    """Where a run keeps ``variant``'s ncu source page (``perf profile --source-page`` writes it,
    :func:`run_source_pages` reads it)."""
    return Path(trace_dir) / f"{SOURCE_PAGE_PREFIX}{variant.replace('@', '_')}{SOURCE_PAGE_SUFFIX}"


def run_source_pages(run) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """(variant -> page, notes): the ncu source pages ``perf profile --source-page`` kept in the
    run (:func:`source_page_path`); a page that does not read is a note, not an error."""
    from mamba3_perf.analysis.sass import read_source_page
    from mamba3_perf.errors import ParseError

    pages, notes = {}, []
    for path in sorted((Path(run.path) / "traces").glob(f"{SOURCE_PAGE_PREFIX}*{SOURCE_PAGE_SUFFIX}")):
        variant = path.name[len(SOURCE_PAGE_PREFIX):-len(SOURCE_PAGE_SUFFIX)]
        try:
            pages[variant] = read_source_page(path)
        except ParseError as e:
            notes.append(f"source page {path.name} left out: {e}")
    return pages, notes


def console_text(rep: RunReport, *, title: str) -> str:
    """Run summary, ladder means and (when traced) the stage breakdown as plain text, the warp
    stalls and DRAM traffic per kernel where ncu measured them, and each kernel's occupancy
    where the trace gave its registers and block size (CUDA)."""
    from mamba3_perf.reports.console import (
        breakdown_table, ladder_means, occupancy_table, run_summary, stall_table, traffic_table,
    )

    parts = [run_summary(rep.table, title=title), ladder_means(rep.summary)]
    if rep.breakdown is not None and not rep.breakdown.empty:
        parts.append(breakdown_table(rep.breakdown))
    if rep.stalls is not None and not rep.stalls.empty:
        parts.append(stall_table(rep.stalls))
    if rep.traffic is not None and not rep.traffic.empty:
        parts.append(traffic_table(rep.traffic, device=rep.device))
    if rep.occupancy is not None and not rep.occupancy.empty:
        parts.append(occupancy_table(rep.occupancy, device=rep.device))
    return "\n".join(parts)
