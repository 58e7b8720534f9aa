"""``perf bench``: check and time the ladder on a set of cases; store the run, print the ladder."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Iterator, Optional

import typer

from mamba3_perf.cli import app

INTERPRETER_NOTE = "note: Triton-interpreter timings (CPU), not device timings"


@contextlib.contextmanager
def progress_bar(total: int, what: str) -> Iterator[Callable[[str], None]]:
    """A rich progress bar on stderr; yields the ``progress(description)`` callable."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda desc: bar.update(task, advance=1, description=f"{what}: {desc}")


@app.command()
def bench(
    cases: str = typer.Option(..., "--cases", help="case set(s) of mamba3_perf/data/cases.yaml (official, "
                                                   "official-b8, regular, official-small, pairwise, tail, "
                                                   "edge, hopper, all) and/or comma-separated case ids"),
    stages: str = typer.Option("all", help="all, or a comma list of stages (may include 'tilelang'; "
                                           "STAGE@tf32 runs a stage with every dot forced to one "
                                           "TF32 pass, timed for reference)"),
    backend: str = typer.Option("auto", help="auto | npu | cuda | cpu"),
    out: Path = typer.Option(Path("runs"), help="run store directory"),
    name: Optional[str] = typer.Option(None, help="run name (default bench-<UTC time>)"),
    warmup_ms: float = typer.Option(25, help="do_bench warmup (device backends)"),
    rep_ms: float = typer.Option(100, help="do_bench repetition time (device backends)"),
    rounds: int = typer.Option(1, min=1, help="interleaved timing rounds per case (every variant "
                                              "in turn, samples pooled)"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="also write one JSON record "
                                                                 "(meta, timings, accuracy, ladder, limits)"),
    cuda_graph: bool = typer.Option(False, "--cuda-graph", help="time CUDA-graph replays of one call "
                                                                "(CUDA only): the device time without "
                                                                "the host's launch path"),
):
    """Check every stage against the fp64 golden, time those that pass, store the run."""
    from mamba3_perf import backend as be

    bk = be.resolve(backend)
    if bk.timing_kind == "interpreter":
        typer.echo(INTERPRETER_NOTE)
    from mamba3_perf.bench import run_bench, select_cases, select_stages
    from mamba3_perf.reports.console import ladder_means, run_summary, run_title

    case_list = select_cases(cases)
    stage_list, tilelang = select_stages(stages)
    total = len(case_list) * (len(stage_list) + tilelang)
    with progress_bar(total, "bench") as progress:
        res = run_bench(case_list, stage_list, backend=bk, out_root=out, name=name,
                        warmup_ms=warmup_ms, rep_ms=rep_ms, tilelang=tilelang,
                        json_path=json_out, progress=progress, rounds=rounds, graph=cuda_graph)
    typer.echo(run_summary(res.table, title=run_title(res.run_path.name, bk, cuda_graph)))
    typer.echo(ladder_means(res.summary))
    typer.echo(f"wrote {res.run_path}")
    if res.json_path is not None:
        typer.echo(f"wrote {res.json_path}")
