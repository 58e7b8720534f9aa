"""``perf report``, ``perf compare``, ``perf timeline``: adapters from a stored run to reports."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from mamba3_perf.cli import app
from mamba3_perf.errors import RunStoreError


@app.command()
def report(
    run_dir: Path = typer.Argument(..., help="a stored run directory"),
    out: Optional[Path] = typer.Option(None, help="markdown file (default RUN_DIR/report.md); "
                                                  "HTML charts are written beside it"),
):
    """Regenerate the markdown record and HTML charts of a stored run; print its summary."""
    from mamba3_perf.reports.record import console_text, write_run_report
    from mamba3_perf.runs import read_run

    run = read_run(run_dir)
    rep = write_run_report(run, out)
    if run.meta.get("timing_kind") == "interpreter":
        typer.echo("note: Triton-interpreter timings, not device timings")
    typer.echo(console_text(rep, title=f"Run {run.name}"))
    for p in rep.written:
        typer.echo(f"wrote {p}")
    for note in rep.notes:
        typer.echo(f"note: {note}", err=True)


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
