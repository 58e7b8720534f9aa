"""``perf profile``: measure, trace and report one case across the ladder in one run directory."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from mamba3_perf.cli import app
from mamba3_perf.cli.bench import INTERPRETER_NOTE, progress_bar
from mamba3_perf.cli.check import CaseOpt, ChunkOpt, DtypeOpt, NOpt, POpt, RankOpt, case_options


@app.command()
def profile(
    shape: Optional[str] = typer.Option(None, help="B,S,H,G (default: 1,64,2,1 N32 P32 R2 on the "
                                                   "CPU interpreter, 8,512,16,8 N64 P64 R4 on a device)"),
    n: NOpt = 64,
    p: POpt = 64,
    rank: RankOpt = 4,
    chunk: ChunkOpt = 16,
    dtype: DtypeOpt = "fp16",
    case: CaseOpt = None,
    stages: str = typer.Option("all", help="all, or a comma list of stages (STAGE@tf32: every dot one TF32 pass)"),
    backend: str = typer.Option("auto", help="auto | npu | cuda | cpu"),
    out: Path = typer.Option(Path("runs"), help="run store directory"),
    name: Optional[str] = typer.Option(None, help="run name (default profile-<case>-<UTC time>)"),
    gpu_baseline: Optional[Path] = typer.Option(None, help="recorded TileLang baseline JSON for the "
                                                           "ratio column where no live TileLang row runs "
                                                           "(default: the packaged H200 record); used only "
                                                           "on the device it names"),
    hw_metrics: bool = typer.Option(False, "--hw-metrics", help="add Nsight Compute metrics (CUDA, ncu): "
                                    "pipe utilization, DRAM bytes, instructions, warp stalls"),
    source_page: Optional[str] = typer.Option(None, "--source-page", metavar="KERNEL",
                                              help="add Nsight Compute's source page of KERNEL (a name or "
                                                   "regex:...) per stage (CUDA, ncu): its instructions, stall "
                                                   "samples and bank conflicts per loop body and opcode"),
    force: bool = typer.Option(False, "--force", help="run a shape the CPU interpreter would take long on"),
    no_tilelang: bool = typer.Option(False, "--no-tilelang", help="skip the live upstream TileLang row"),
):
    """Check, time and trace every stage on one case; write run, report.md, charts, timeline."""
    from mamba3_perf import backend as be

    bk = be.resolve(backend)
    if bk.timing_kind == "interpreter":
        typer.echo(INTERPRETER_NOTE)
    from mamba3_perf import profile as prof
    from mamba3_perf.analysis.ladder import load_gpu_baseline
    from mamba3_perf.bench import select_stages
    from mamba3_perf.reports.console import run_title
    from mamba3_perf.reports.record import console_text

    c = (case_options(shape, case, n, p, rank, chunk, dtype) if shape or case
         else prof.default_case(bk.name))
    stage_list, _ = select_stages(stages)
    if bk.name == "cpu":
        est = prof.check_interpreter_budget(c, len(stage_list), force=force)
        typer.echo(f"{c.id}: about {est:.0f} s on the interpreter")
    baseline = load_gpu_baseline(gpu_baseline) if gpu_baseline is not None else None
    variants, _ = prof.variants_of(stage_list, bk, tilelang=not no_tilelang)
    steps = prof.n_steps(len(variants), hw_metrics=hw_metrics and bk.name == "cuda",
                         source_page=bool(source_page) and bk.name == "cuda")
    with progress_bar(steps, "profile") as progress:
        res = prof.profile_run(c, stage_list, bk, out_root=out, name=name,
                               tilelang=not no_tilelang, hw_metrics=hw_metrics, source_page=source_page,
                               baseline=baseline, progress=progress)
    typer.echo(console_text(res.report, title=run_title(f"{res.run_path.name}: {c.shape_label}", bk)))
    for w in res.warnings:
        typer.echo(f"warning: {w}", err=True)
    for path in (res.run_path, *res.report.written, res.timeline):
        if path is not None:
            typer.echo(f"wrote {path}")
