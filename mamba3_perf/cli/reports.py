"""``perf report``, ``perf compare``, ``perf timeline``: adapters from a stored run to reports."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd
import typer

from mamba3_perf.cli import app
from mamba3_perf.errors import RunStoreError


def _breakdown(events: pd.DataFrame) -> pd.DataFrame:
    """Stage breakdown of the whole-kernel rows (region rows would count kernels twice)."""
    from mamba3_perf.analysis.breakdown import stage_breakdown

    if "region" in events.columns and events["region"].notna().any():
        events = events[events["region"].isna()]
    bd = stage_breakdown(events)
    return bd if "variant" in bd.columns else bd.assign(variant="(all)")


@app.command()
def report(
    run_dir: Path = typer.Argument(..., help="a stored run directory"),
    out: Optional[Path] = typer.Option(None, help="markdown file (default RUN_DIR/report.md); "
                                                  "HTML charts are written beside it"),
):
    """Regenerate the markdown record and HTML charts of a stored run; print its summary."""
    from mamba3_perf.analysis.ladder import (
        ladder_table, load_gpu_baseline, resolve_cases, summarize_ladder,
    )
    from mamba3_perf.analysis.limits import device_for, with_limits
    from mamba3_perf.reports import write_html
    from mamba3_perf.reports.charts import speedup_ladder_chart, stage_breakdown_chart
    from mamba3_perf.reports.console import breakdown_table, ladder_means, run_summary
    from mamba3_perf.reports.markdown import optimization_record
    from mamba3_perf.runs import read_run, write_text_atomic

    run = read_run(run_dir)
    timings = run.table("timings")
    cases = resolve_cases(timings["case_id"], run.meta.get("cases") or ())
    table = with_limits(ladder_table(timings, cases=cases, baseline=load_gpu_baseline()), cases,
                        device_for(run.meta.get("device")))
    summary = summarize_ladder(table)
    breakdown = _breakdown(run.table("events")) if run.has("events") else None
    md_path = out or run.path / "report.md"
    write_text_atomic(md_path, optimization_record(run.meta, table, summary, breakdown=breakdown))
    written = [md_path, write_html(speedup_ladder_chart(table), md_path.with_name(md_path.stem + "-ladder.html"))]
    if breakdown is not None and not breakdown.empty:
        written.append(write_html(stage_breakdown_chart(breakdown),
                                  md_path.with_name(md_path.stem + "-breakdown.html")))
    if run.meta.get("timing_kind") == "interpreter":
        typer.echo("note: Triton-interpreter timings, not device timings")
    typer.echo(run_summary(table, title=f"Run {run.name}"))
    typer.echo(ladder_means(summary))
    if breakdown is not None and not breakdown.empty:
        typer.echo(breakdown_table(breakdown))
    for p in written:
        typer.echo(f"wrote {p}")


@app.command()
def compare(
    run_a: Path = typer.Argument(..., help="the reference run"),
    run_b: Path = typer.Argument(..., help="the run to compare with it"),
):
    """Median deltas of RUN_B vs RUN_A, flagged only beyond both runs' p10-p90 spread."""
    from mamba3_perf.analysis.compare import compare_runs
    from mamba3_perf.reports.console import compare_table
    from mamba3_perf.runs import read_run

    a, b = read_run(run_a), read_run(run_b)
    kinds = {a.meta.get("timing_kind"), b.meta.get("timing_kind")}
    if len(kinds) > 1:
        typer.echo(f"warning: comparing timing kinds {sorted(map(str, kinds))}", err=True)
    cmp = compare_runs(a, b)
    typer.echo(compare_table(cmp, title=f"{b.name} vs {a.name}"))
    changed = cmp[cmp["changed"]]
    typer.echo(f"{len(changed)} of {len(cmp)} case/variant pairs changed beyond the spread")


@app.command()
def timeline(
    run_dir: Path = typer.Argument(..., help="a stored run with an events table"),
    out: Optional[Path] = typer.Option(None, help="HTML file (default RUN_DIR/timeline.html)"),
):
    """Write the interactive kernel timeline of a stored run as one offline HTML file."""
    from mamba3_perf.reports.timeline import write_timeline
    from mamba3_perf.runs import read_run

    run = read_run(run_dir)
    if not run.has("events"):
        raise RunStoreError(f"run {str(run.path)!r} has no events table (no kernel trace)")
    path = write_timeline(run.table("events"), out or run.path / "timeline.html",
                          title=f"bwd_bwd kernel timeline: run {run.name}")
    typer.echo(f"wrote {path}")
