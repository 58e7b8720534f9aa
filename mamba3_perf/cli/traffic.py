"""``perf traffic``: the bytes each kernel of a stage reads and writes, counted on the interpreter."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from mamba3_perf.cli import app
from mamba3_perf.cli.check import CaseOpt, ChunkOpt, DtypeOpt, NOpt, POpt, RankOpt, ShapeOpt, case_options
from mamba3_perf.runs import collect_environment

NOTE = ("counted on the Triton interpreter from a sample of each launch's programs: bytes the kernels "
        "address, not timings; the plan where the Gluon kernels do not run (mamba3_perf.analysis.traffic)")


@app.command()
def traffic(
    case: CaseOpt = None,
    shape: ShapeOpt = None,
    n: NOpt = 64,
    p: POpt = 64,
    rank: RankOpt = 4,
    chunk: ChunkOpt = 16,
    dtype: DtypeOpt = "fp16",
    stage: Optional[str] = typer.Option(None, help="ladder stage (default: the last)"),
    samples: int = typer.Option(8, min=1, help="programs run per launch"),
    knob: List[str] = typer.Option([], "--knob", metavar="MODULE.ATTR=v",
                                   help="set a kernels knob (mamba3_perf.kernels.knobs); repeatable"),
    device: str = typer.Option("h200", help="whose HBM bandwidth times the bytes: h200 | 910b"),
    tensors: bool = typer.Option(False, "--tensors", help="also list every (kernel, tensor) row"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="write the per-tensor rows as JSON"),
    measured: Optional[Path] = typer.Option(None, help="a profiler trace of this stage on this case "
                                            "(any perf import format): its kernel times (and ncu's "
                                            "DRAM bytes) beside the counts"),
):
    """Bytes read and written per kernel (compulsory, and with no reuse across programs); a
    full-size case takes about a minute."""
    from mamba3_perf import backend as be

    be.resolve("cpu")  # the interpreter, before the kernels load
    from mamba3_perf.analysis.limits import device_for
    from mamba3_perf.analysis.traffic import kernel_traffic, per_kernel
    from mamba3_perf.errors import CaseError
    from mamba3_perf.kernels.knobs import single_knobs
    from mamba3_perf.kernels.registry import list_stages
    from mamba3_perf.runs import write_text_atomic

    c = case_options(shape, case, n, p, rank, chunk, dtype)
    spec = device_for(device, default=None)
    if spec is None:
        raise CaseError(f"--device {device!r}: expected h200 or 910b")
    try:
        knobs = single_knobs(knob)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--knob") from None
    name = stage or list_stages()[-1].name
    events = None
    if measured is not None:
        from mamba3_perf.traces import load

        events = load(measured)  # a bad trace fails here, before the count
    typer.echo(NOTE)
    with knobs:
        rows = kernel_traffic(name, c, samples=samples)
    kernels = per_kernel(rows, spec, measured=events)
    console = Console(width=140)
    unit, scale = ("GB", 1e9) if kernels.no_reuse.sum() >= 1e9 else ("MB", 1e6)
    t = Table(title=f"{name} on {c.id} ({c.shape_label}){' ' + ' '.join(knob) if knob else ''}: {unit}, "
                    f"us at {spec.name}'s {spec.hbm_bytes_per_s / 1e12:.1f} TB/s")
    extra = []
    if events is not None:
        extra = [("measured us", "measured_us", 1, ".1f"), ("TB/s", "tbps", 1, ".2f")]
        if kernels["dram_bytes"].notna().any():
            extra.append((f"DRAM {unit}", "dram_bytes", scale, ".3f"))
    for col in ("#", "kernel", "tag", "read", "write", "total", "no reuse", "us", *(e[0] for e in extra)):
        t.add_column(col, justify="left" if col in ("kernel", "tag") else "right")
    total = kernels.sum(numeric_only=True)
    total["tbps"] = total["bytes"] / total["measured_us"] / 1e6 if events is not None else None
    for launch, kernel, tag, r in [*((str(r.launch), r.kernel, str(r.tag), r) for _, r in kernels.iterrows()),
                                   ("", "all", "", total)]:
        t.add_row(launch, kernel, tag,
                  *(f"{r[k] / scale:.3f}" for k in ("read_bytes", "write_bytes", "bytes", "no_reuse")),
                  f"{r['hbm_us']:.1f}",
                  *("" if pd.isna(r[k]) else f"{r[k] / div:{fmt}}" for _, k, div, fmt in extra))
    console.print(t)
    if tensors:
        d = Table(title="per tensor, MB (compulsory read / write; no reuse read / write)")
        for col in ("#", "kernel", "tensor", "size", "read", "write", "read, no reuse", "write, no reuse"):
            d.add_column(col, justify="left" if col in ("kernel", "tensor") else "right")
        for r in rows.itertuples():
            d.add_row(str(r.launch), r.kernel, r.tensor, *(f"{v / 1e6:.1f}" for v in (
                r.tensor_bytes, r.read_bytes, r.write_bytes, r.read_no_reuse, r.write_no_reuse)))
        console.print(d)
    if json_out is not None:
        # versions and the git tree beside the command, so that a committed record names the code it counted
        meta = dict(collect_environment(), command=" ".join(sys.argv))  # as perf profile's run.json
        record = dict(meta=meta, case=c.to_dict(), stage=name, samples=samples, knobs=list(knob), note=NOTE,
                      rows=rows.to_dict(orient="records"))
        typer.echo(f"wrote {write_text_atomic(json_out, json.dumps(record, indent=1))}")
