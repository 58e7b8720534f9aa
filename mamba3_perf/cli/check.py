"""``perf check`` and ``perf stages``: run a stage against the fp64 golden."""
from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from mamba3_perf.cli import app


# the options that name one case, shared by the commands that take one (defaults in each signature)
ShapeOpt = Annotated[Optional[str], typer.Option(help="B,S,H,G")]
CaseOpt = Annotated[Optional[str], typer.Option(help="a named case instead of --shape")]
NOpt = Annotated[int, typer.Option("--n", help="qk head dim N (with --shape)")]
POpt = Annotated[int, typer.Option("--p", help="value head dim P (with --shape)")]
RankOpt = Annotated[int, typer.Option(help="MIMO rank R (with --shape)")]
ChunkOpt = Annotated[int, typer.Option(help="chunk size C (with --shape)")]
DtypeOpt = Annotated[str, typer.Option(help="fp16 | bf16 | fp32 (with --shape)")]


def case_options(shape: Optional[str], case: Optional[str], n: int, p: int, rank: int, chunk: int,
                 dtype: str, per_rank: bool = False, no_d: bool = False):
    """One Case from either --case ID or --shape B,S,H,G plus the per-dimension options."""
    from mamba3_perf.errors import CaseError
    from mamba3_perf.kernels.cases import case_from_shape, get_case

    if case and shape:
        raise CaseError("give either --case or --shape, not both")
    if case:
        return get_case(case)
    if not shape:
        raise CaseError("give --shape B,S,H,G or --case ID")
    return case_from_shape(shape, N=n, P=p, R=rank, C=chunk, dtype=dtype,
                           reduce_o=not per_rank, has_d=not no_d)


@app.command()
def check(
    shape: ShapeOpt = None,
    case: CaseOpt = None,
    n: NOpt = 64,
    p: POpt = 64,
    rank: RankOpt = 4,
    chunk: ChunkOpt = 16,
    dtype: DtypeOpt = "fp16",
    per_rank: bool = typer.Option(False, "--per-rank", help="per-rank dout instead of reduce-O"),
    no_d: bool = typer.Option(False, "--no-d", help="without the D skip"),
    stage: str = typer.Option("stage0", help="ladder stage to check"),
    backend: str = typer.Option("auto", help="auto | npu | cuda | cpu"),
    seed: int = typer.Option(0, help="input seed"),
):
    """Run STAGE on one case and compare its 12 gradients with the fp64 golden."""
    from mamba3_perf import backend as be

    bk = be.resolve(backend)
    from mamba3_perf.kernels.checking import check_stage

    c = case_options(shape, case, n, p, rank, chunk, dtype, per_rank, no_d)
    rows = check_stage(stage, c, device=bk.device, seed=seed)
    table = Table(title=f"{stage} vs fp64 golden - {c.id} ({c.shape_label}) on {bk.name}")
    for col in ("gradient", "error", "fp32 ref error", "bound", "verdict"):
        table.add_column(col, justify="right" if col != "gradient" else "left")
    for r in rows:
        table.add_row(r.gradient, f"{r.err:.3e}", f"{r.ref_err:.3e}", f"{r.bound:.3e}",
                      "[green]pass[/]" if r.passed else "[red]FAIL[/]")
    Console().print(table)
    if not all(r.passed for r in rows):
        raise typer.Exit(1)


@app.command()
def stages():
    """List the registered ladder stages and their kernels."""
    from mamba3_perf.kernels.registry import list_stages

    table = Table(title="bwd_bwd ladder")
    for col in ("stage", "parent", "kernels (tag)", "summary"):
        table.add_column(col)
    for s in list_stages():
        table.add_row(s.name, s.parent or "", ", ".join(f"{k.name} ({k.tag.value})" for k in s.kernels), s.summary)
    Console().print(table)
