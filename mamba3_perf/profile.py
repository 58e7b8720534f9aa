"""``perf profile``: measure one case, trace every stage that ran, store one run with its report.

Steps (:func:`profile_run`):

1. :func:`mamba3_perf.bench.measure` on the case (plus the live ``tilelang`` row on CUDA when
   available and wanted);
2. a trace of :data:`TRACE_ITERS` calls of every variant that has a time, with the backend's own
   profiler: CUDA ``torch.profiler`` (Kineto JSON), NPU ``torch_npu.profiler`` (PipeUtilization,
   Level1), CPU none (the interpreter has no device profiler: each kernel launch is timed on
   the host, where the interpreter runs it synchronously, plus one ``host`` event for the
   call's time outside kernels). Raw traces are kept under ``<run>/traces/``;
3. optionally (``hw_metrics``, CUDA, ``ncu`` on PATH) Nsight Compute metrics per variant, from a
   separate process (:mod:`mamba3_perf.profile_target`), merged into the events by kernel name
   (duration-weighted); and (``source_page``: a kernel name) ncu's source page of that kernel's
   first launch per variant, SASS instruction by instruction (:func:`collect_source_pages`,
   kept gzipped under ``<run>/traces/``, summed per loop body and opcode in the report); any
   failure there is a warning in run.json, never a crash;
4. the run (timings, accuracy, events) via :func:`mamba3_perf.runs.create_run`, then in it
   ``report.md`` + charts (:func:`mamba3_perf.reports.record.write_run_report`) and
   ``timeline.html``.

CPU guard: the interpreter needs about :data:`INTERPRETER_S_PER_CHUNK` seconds per (b, h,
chunk) per stage call, nearly independent of N, P, R. First calibrated with stage0 alone on a
2-core box (B1 S64 H2 N32 P32 R2 C16 0.41 s, B2 S128 H4 N64 P64 R4 C16 3.1 s: 0.05 s); the
later stages launch more kernels per call: a plain ``perf profile`` of all 20 stages at
202de59 timed 0.30 s (stage0) to 1.31 s (stage6) per call on that B1 S64 H2 shape (8 (b, h,
chunk) programs), 0.87 s in the mean, and took 112 s in all, so the constant is that mean
per (b, h, chunk). :func:`interpreter_estimate_s` multiplies it by B*H*nchunks and by the
calls a profile makes; shapes estimated above :data:`INTERPRETER_LIMIT_S` are refused without
force. The limit leaves room for the default shape on the whole ladder (28 stages: ~124 s
estimated; 27 took 2 min 2 s at 463d685), so a new stage does not turn the README's main job
into a refusal (tests/test_bench.py checks it).
"""
from __future__ import annotations

import contextlib
import functools
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from mamba3_perf import bench
from mamba3_perf.errors import BackendError, Mamba3PerfError
from mamba3_perf.kernels.cases import Case, case_from_shape

INTERPRETER_S_PER_CHUNK = 0.11
INTERPRETER_LIMIT_S = 240.0
TRACE_ITERS = {"cuda": 3, "npu": 3, "cpu": 1}
CPU_DEFAULT_SHAPE = dict(shape="1,64,2,1", N=32, P=32, R=2, C=16, dtype="fp16")
DEVICE_DEFAULT_SHAPE = dict(shape="8,512,16,8", N=64, P=64, R=4, C=16, dtype="fp16")


def default_case(backend_name: str) -> Case:
    """The case of a plain ``perf profile``: small on the CPU interpreter, regular on a device."""
    d = CPU_DEFAULT_SHAPE if backend_name == "cpu" else DEVICE_DEFAULT_SHAPE
    return case_from_shape(d["shape"], N=d["N"], P=d["P"], R=d["R"], C=d["C"], dtype=d["dtype"])


def interpreter_estimate_s(case: Case, n_stages: int) -> float:
    """Seconds a CPU profile of ``case`` is expected to take: per stage one checked run,
    :data:`bench.INTERPRETER_REPS` timed runs and the traced runs, plus the golden (~one run)."""
    calls = n_stages * (1 + bench.INTERPRETER_REPS + TRACE_ITERS["cpu"]) + 1
    return INTERPRETER_S_PER_CHUNK * case.B * case.H * case.nchunks * calls


def check_interpreter_budget(case: Case, n_stages: int, *, force: bool = False) -> float:
    """Raise :class:`BackendError` when the interpreter estimate exceeds the limit (unless force)."""
    est = interpreter_estimate_s(case, n_stages)
    if est > INTERPRETER_LIMIT_S and not force:
        raise BackendError(
            f"{case.id} on the CPU Triton interpreter would take about {est:.0f} s "
            f"(estimate {INTERPRETER_S_PER_CHUNK} s x B*H*nchunks={case.B * case.H * case.nchunks} "
            f"x calls for {n_stages} stage(s); limit {INTERPRETER_LIMIT_S:.0f} s): use a smaller "
            f"--shape, a device backend, or --force")
    return est


# --------------------------------------------------------------------------------- traces


def _kernel_label(variant: str) -> tuple[str, str]:
    """(kernel_name, stage_tag) for a stage timed whole on the host: its one kernel, else 'other'."""
    from mamba3_perf.kernels.checking import split_variant
    from mamba3_perf.kernels.registry import get_stage

    kernels = get_stage(split_variant(variant)[0]).kernels if variant != bench.TILELANG else ()
    if len(kernels) == 1:
        return kernels[0].name, kernels[0].tag.value
    return f"{variant} (whole stage, host-timed)", "other"


@contextlib.contextmanager
def interpreted_launches():
    """Record every Triton-interpreter kernel launch made inside the block as (name, t0, t1)
    (``time.perf_counter``). The interpreter runs a launch synchronously in
    ``InterpretedFunction.run``, so its wall time is the kernel's. Yields None where this
    Triton has no such method (the caller then times the stage whole)."""
    from triton.runtime import interpreter

    cls = getattr(interpreter, "InterpretedFunction", None)
    run = getattr(cls, "run", None)
    if run is None:
        yield None
        return
    launches: list[tuple[str, float, float]] = []

    @functools.wraps(run)
    def timed(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return run(self, *args, **kwargs)
        finally:
            if not kwargs.get("warmup"):
                launches.append((self.fn.__name__, t0, time.perf_counter()))

    cls.run = timed
    try:
        yield launches
    finally:
        cls.run = run


def _trace_interpreter(fn, variant: str, case: Case, origin: float) -> pd.DataFrame:
    """Events of one interpreter call of ``variant``: one row per kernel launch, tagged from the
    stage registry by kernel name, plus one ``host`` row (stream "host") for the call's time
    outside kernels (allocation, padding, torch ops); where launches cannot be recorded, one
    host-timed row for the whole stage."""
    from mamba3_perf.kernels.registry import Tag, kernel_tags
    from mamba3_perf.traces.attribution import classify

    base = {"source": "interpreter", "device": "cpu", "variant": variant, "case_id": case.id,
            "start_kind": "clock"}
    tags = kernel_tags()
    rows = []
    for _ in range(TRACE_ITERS["cpu"]):
        with interpreted_launches() as launches:
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
        if not launches:
            name, tag = _kernel_label(variant)
            rows.append({**base, "kernel_name": name, "stage_tag": tag,
                         "start_us": (t0 - origin) * 1e6, "dur_us": (t1 - t0) * 1e6})
            continue
        for name, a, b in launches:
            rows.append({**base, "kernel_name": name, "stage_tag": classify(name, tags)[0],
                         "start_us": (a - origin) * 1e6, "dur_us": (b - a) * 1e6})
        inside = sum(b - a for _, a, b in launches)
        rows.append({**base, "kernel_name": "host (outside kernels)", "stage_tag": Tag.HOST.value,
                     "stream": "host", "start_us": (t0 - origin) * 1e6,
                     "dur_us": max(t1 - t0 - inside, 0.0) * 1e6})
    return pd.DataFrame(rows)


def _trace_cuda(fn, variant: str, case: Case, trace_dir: Path) -> pd.DataFrame:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from mamba3_perf.traces import load

    path = trace_dir / f"kineto-{variant}.json"
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(TRACE_ITERS["cuda"]):
            fn()
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(path))
    return load(path, case_id=case.id, variant=variant)


def _trace_npu(fn, variant: str, case: Case, trace_dir: Path) -> pd.DataFrame:
    import torch
    import torch_npu

    from mamba3_perf.traces import load

    out = trace_dir / f"npu-{variant}"
    cfg = torch_npu.profiler._ExperimentalConfig(
        aic_metrics=torch_npu.profiler.AiCMetrics.PipeUtilization,
        profiler_level=torch_npu.profiler.ProfilerLevel.Level1)
    acts = [torch_npu.profiler.ProfilerActivity.CPU, torch_npu.profiler.ProfilerActivity.NPU]
    with torch_npu.profiler.profile(activities=acts, experimental_config=cfg,
                                    on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(str(out))):
        for _ in range(TRACE_ITERS["npu"]):
            fn()
        torch.npu.synchronize()
    return load(out, case_id=case.id, variant=variant)


def trace_variants(case: Case, variants: Sequence[str], backend, trace_dir: Path,
                   progress: bench.Progress | None = None) -> pd.DataFrame:
    """KERNEL_EVENTS of ``variants`` on ``case`` traced with the backend's profiler."""
    from mamba3_perf.traces.schema import conform, empty

    if backend.name != "cpu":  # raw profiler outputs are kept in the run
        trace_dir.mkdir(parents=True, exist_ok=True)
    x = bench.prepare(case, device=backend.device)
    origin = time.perf_counter()
    frames = []
    for v in variants:
        fn = bench.variant_runner(v, case, x)
        fn()  # warm: compile outside the trace
        bench.synchronize(backend.device)
        if backend.name == "cuda":
            frames.append(_trace_cuda(fn, v, case, trace_dir))
        elif backend.name == "npu":
            frames.append(_trace_npu(fn, v, case, trace_dir))
        else:
            frames.append(_trace_interpreter(fn, v, case, origin))
        if progress:
            progress(f"trace {v}")
    frames = [conform(f, origin=f"trace of {v}") for f, v in zip(frames, variants)]
    return pd.concat(frames, ignore_index=True) if frames else empty()


# ----------------------------------------------------------------------- Nsight Compute


def ncu_metrics() -> tuple[str, ...]:
    """The raw ncu metrics the ncu parser maps to schema columns (FORMATS.md analogues)."""
    from mamba3_perf.traces import ncu

    names = [m for m in ncu.METRICS if "__" in m]
    names += [m for ms in ncu.SUMMED.values() for m in ms if "__" in m]
    return tuple(dict.fromkeys(names))


def ncu_command(case: Case, variant: str) -> list[str]:
    """ncu over one run of ``variant`` on ``case`` in a fresh process (CSV on stdout)."""
    from mamba3_perf.kernels.registry import kernel_tags

    names = sorted(kernel_tags()) + ["mamba_mimo_bwd_bwd_kernel_kernel"]
    return ["ncu", "--csv", "--page", "raw", "--clock-control", "none",
            "--kernel-name", "regex:" + "|".join(names), "--metrics", ",".join(ncu_metrics()),
            sys.executable, "-m", "mamba3_perf.profile_target",
            "--case-json", json.dumps(case.to_dict()), "--variant", variant]


SOURCE_SECTIONS = ("SourceCounters", "WarpStateStats", "LaunchStats", "Occupancy")


def source_page_commands(case: Case, variant: str, kernel: str, report: str | Path) -> tuple[list[str], list[str]]:
    """(profile, export): ncu over the first launch of ``kernel`` (a name, or ``regex:...``) in
    one run of ``variant`` on ``case``, with the sections of the source page, to ``report``; then
    that report's source page, SASS, as CSV on stdout."""
    sections = [a for sec in SOURCE_SECTIONS for a in ("--section", sec)]
    profile = ["ncu", *sections, "--clock-control", "none", "--kernel-name", kernel, "--launch-count", "1",
               "--force-overwrite", "--export", str(report),
               sys.executable, "-m", "mamba3_perf.profile_target", "--case-json", json.dumps(case.to_dict()),
               "--variant", variant]
    return profile, ["ncu", "--import", str(report), "--page", "source", "--csv", "--print-source", "sass"]


def collect_source_pages(case: Case, variants: Sequence[str], kernel: str, trace_dir: Path,
                         progress: bench.Progress | None = None) -> tuple[list[Path], list[str]]:
    """(pages written, warnings): ncu's source page of ``kernel`` for each variant
    (:func:`source_page_commands`), gzipped to reports.record.source_page_path atomically; a variant
    that does not launch ``kernel``, or any ncu failure, is a warning."""
    import gzip

    from mamba3_perf.analysis.sass import read_source_page
    from mamba3_perf.reports.record import SOURCE_PAGE_SUFFIX, source_page_path
    from mamba3_perf.runs import write_bytes_atomic

    if shutil.which("ncu") is None:
        return [], ["--source-page: ncu is not on PATH; no source page"]
    trace_dir.mkdir(parents=True, exist_ok=True)
    pages, warnings = [], []
    for v in variants:
        page_path = source_page_path(trace_dir, v)
        report = page_path.with_name(page_path.name.replace(SOURCE_PAGE_SUFFIX, ".ncu-rep"))
        prof, export = source_page_commands(case, v, kernel, report)
        try:
            res = subprocess.run(prof, capture_output=True, text=True, timeout=540)
            if not report.exists():
                tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
                warnings.append(f"source page of {kernel} on {v}: no launch profiled (exit {res.returncode}: "
                                f"{tail[0][:200]})")
            else:
                page = subprocess.run(export, capture_output=True, text=True, timeout=300, check=True).stdout
                read_source_page(page)  # a page, or a ParseError now rather than in the report
                pages.append(write_bytes_atomic(page_path, gzip.compress(page.encode())))
        except (OSError, subprocess.SubprocessError, Mamba3PerfError) as e:
            warnings.append(f"source page of {kernel} on {v}: {bench.first_line(e)}")
        finally:
            report.unlink(missing_ok=True)  # the CSV holds what the report says; it is megabytes
        if progress:
            progress(f"source page {v}")
    return pages, warnings


def collect_ncu(case: Case, variants: Sequence[str], trace_dir: Path,
                progress: bench.Progress | None = None) -> tuple[pd.DataFrame, list[str]]:
    """(ncu KERNEL_EVENTS of every variant, warnings); failures become warnings."""
    from mamba3_perf.traces import load

    warnings: list[str] = []
    frames = []
    if shutil.which("ncu") is None:
        return pd.DataFrame(), ["--hw-metrics: ncu is not on PATH; no hardware metrics"]
    trace_dir.mkdir(parents=True, exist_ok=True)
    for v in variants:
        path = trace_dir / f"ncu-{v}.csv"
        try:
            res = subprocess.run(ncu_command(case, v), capture_output=True, text=True, timeout=540)
            path.write_text(res.stdout)
            if res.returncode != 0:
                tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
                warnings.append(f"ncu on {v}: exit {res.returncode}: {tail[0][:300]}")
            else:
                frames.append(load(path, case_id=case.id, variant=v))
        except (OSError, subprocess.SubprocessError, Mamba3PerfError) as e:
            warnings.append(f"ncu on {v}: {bench.first_line(e)}")
        if progress:
            progress(f"ncu {v}")
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), warnings


def merge_metrics(events: pd.DataFrame, hw: pd.DataFrame) -> pd.DataFrame:
    """Fill the events' metric columns from ``hw`` rows of the same variant and kernel_name
    (duration-weighted mean over hw's launches); existing values are kept."""
    from mamba3_perf.traces.schema import COUNT_COLUMNS, METRIC_COLUMNS

    if hw.empty or events.empty:
        return events
    cols = [c for c in (*METRIC_COLUMNS, *COUNT_COLUMNS) if c in hw.columns and hw[c].notna().any()]
    out = events.copy()
    for c in cols:
        if c not in out.columns:
            out[c] = np.nan
    for (variant, kname), g in hw.groupby(["variant", "kernel_name"], dropna=False):
        w = g["dur_us"].to_numpy(float)
        hit = (out["variant"] == variant) & (out["kernel_name"] == kname)
        for c in cols:
            ok = g[c].notna().to_numpy() & (w > 0)
            if not ok.any():
                continue
            val = float(np.dot(g[c].to_numpy(float)[ok], w[ok]) / w[ok].sum())
            out.loc[hit & out[c].isna(), c] = val
    return out


# ------------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class ProfileResult:
    run_path: Path
    report: object  # reports.record.RunReport
    timeline: Path | None
    warnings: tuple[str, ...]


def variants_of(stages: Sequence[str], backend, *, tilelang: bool) -> tuple[list[str], bool]:
    """(variants to profile, live tilelang row included): tilelang only on CUDA when available."""
    from mamba3_perf import tilelang_row

    tl = tilelang and backend.name == "cuda" and tilelang_row.available()
    return list(stages) + ([bench.TILELANG] if tl else []), tl


def hopper_only_warning(variants: Sequence[str], device: str) -> str | None:
    """A line for the stages among ``variants`` whose own kernels run on Hopper GPUs only, where
    ``device`` is not one: there they launch their parent's kernels, so their rows measure the
    parent again."""
    from mamba3_perf.kernels.bwd_bwd.common import is_hopper
    from mamba3_perf.kernels.checking import split_variant
    from mamba3_perf.kernels.registry import get_stage

    if is_hopper(device):
        return None
    names = [v for v in variants if v != bench.TILELANG and get_stage(split_variant(v)[0]).hopper_only]
    if not names:
        return None
    return (f"{', '.join(names)}: Gluon kernels, which run on Hopper GPUs only; on {device} each stage here "
            "launches its parent stage's kernels")


def n_steps(n_variants: int, *, hw_metrics: bool, source_page: bool = False) -> int:
    """Progress steps of :func:`profile_run`: measure, trace (ncu, the source page) per variant."""
    return n_variants * (2 + hw_metrics + source_page)


def profile_run(case: Case, stages: Sequence[str], backend, *, out_root: str | Path,
                name: str | None = None, tilelang: bool = True, hw_metrics: bool = False,
                source_page: str | None = None, baseline: pd.DataFrame | None = None,
                progress: bench.Progress | None = None) -> ProfileResult:
    """Measure, trace and store ``case`` x ``stages``; write report.md, charts and timeline.
    ``source_page``: also ncu's source page of that kernel per variant (CUDA)."""
    from mamba3_perf.reports.record import write_run_report
    from mamba3_perf.runs import create_run, read_run

    variants, tl = variants_of(stages, backend, tilelang=tilelang)
    timings, accuracy = bench.measure([case], stages, device=backend.device,
                                      timing_kind=backend.timing_kind, progress=progress,
                                      tilelang=tl)
    timed = set(timings.loc[timings["median_us"].notna(), "variant"])
    traced = [v for v in variants if v in timed]
    warnings: list[str] = []
    if hw_metrics and backend.name != "cuda":
        warnings.append(f"--hw-metrics: Nsight Compute needs CUDA; backend is {backend.name}")
    if source_page and backend.name != "cuda":
        warnings.append(f"--source-page: Nsight Compute needs CUDA; backend is {backend.name}")
    if (hopper := hopper_only_warning(variants, backend.device)):
        warnings.append(hopper)
    name = name or bench.default_run_name(f"profile-{case.id}")
    meta = bench.run_meta(backend, [case], variants, case=case.to_dict(), trace_iters=TRACE_ITERS[backend.name])
    with create_run(out_root, name, meta) as w:
        trace_dir = Path(w.path) / "traces"
        events = trace_variants(case, traced, backend, trace_dir, progress)
        ncu = hw_metrics and backend.name == "cuda"
        page = bool(source_page) and backend.name == "cuda"
        for v in variants:
            if progress and v not in timed:  # keep the step count of n_steps()
                for _ in range(1 + ncu + page):
                    progress(f"{v}: not traced")
        if ncu:
            hw, warn = collect_ncu(case, traced, trace_dir, progress)
            warnings += warn
            try:
                events = merge_metrics(events, hw)
            except Exception as e:  # best effort by contract
                warnings.append(f"merging ncu metrics: {bench.first_line(e)}")
        if page:
            _, warn = collect_source_pages(case, traced, source_page, trace_dir, progress)
            warnings += warn
            w.meta["source_page_kernel"] = source_page
        w.meta["warnings"] = list(warnings)
        w.write_table("timings", timings)
        w.write_table("accuracy", accuracy)
        w.write_table("events", events)
    run = read_run(Path(out_root) / name)
    rep = write_run_report(run, baseline=baseline)
    warnings += rep.notes
    tl_path = None
    if not run.table("events").empty:
        try:
            from mamba3_perf.reports.timeline import write_timeline
        except ImportError as e:  # plotly missing: the run and report.md stand without it
            warnings.append(f"no timeline.html: {e}")
        else:
            tl_path = write_timeline(run.table("events"), run.path / "timeline.html",
                                     title=f"bwd_bwd kernel timeline: run {run.name}")
    return ProfileResult(run.path, rep, tl_path, tuple(warnings))
