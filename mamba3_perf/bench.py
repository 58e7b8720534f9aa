"""The measurement engine of ``perf bench`` and ``perf profile``: check every stage against the
fp64 golden, then time the ones that pass.

Per case: inputs once (:func:`make_inputs`), golden + fp32 reference once; per variant (a
ladder stage, a stage with every dot forced to one precision, ``STAGE@tf32``, or the live
upstream ``tilelang`` row):

1. run once inside try/except: an exception (Triton compile error, OutOfResources, CUDA
   error) gives status "not runnable" with the exception's first line as reason;
2. check the 12 gradients (:func:`mamba3_perf.kernels.accuracy.check`): any failure gives
   "wrong"; its accuracy rows are kept and it gets no time (a wrong kernel is not timed as if
   right), except ``tilelang`` and the ``@`` variants, which are timed for reference
   (:func:`timed_for_reference`);
3. once every variant of the case is checked, time those that passed, interleaved over
   ``rounds`` rounds (variant A, B, ..., then A, B, ... again; samples pooled): CUDA
   ``triton.testing.do_bench`` (of eager calls, or with ``graph`` of one CUDA-graph replay per
   call: :func:`mamba3_perf.kernels.graphs.capture`, the device time without the host's launch
   path); NPU ``torch.npu.synchronize`` + perf_counter; CPU (Triton interpreter) perf_counter
   over :data:`INTERPRETER_REPS` calls.

:func:`run_bench` is the whole ``perf bench``: measure, store the run, build the ladder and
optionally the JSON record (``records/``).
"""
from __future__ import annotations

import datetime as _dt
import gc
import json
import math
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd
import torch

from mamba3_perf.errors import BackendError, StageError, first_line
from mamba3_perf.kernels.cases import Case, case_sets, cases as cases_of_set, get_case

TILELANG = "tilelang"
INTERPRETER_REPS = 3  # interpreter calls take ~0.1 s per (b, h, chunk): a few reps suffice
HOST_TIMER_MIN_REPS = 5  # NPU host timing: at least this many timed calls
TILELANG_WRONG_REASON = "upstream bf16 arithmetic; timed for reference"
TIMING_COLUMNS = ("variant", "case_id", "status", "reason", "median_us", "p10_us", "p90_us",
                  "n_reps", "timing_kind")
ACCURACY_COLUMNS = ("variant", "case_id", "gradient", "err", "ref_err", "bound", "passed")

Progress = Callable[[str], None]


# ----------------------------------------------------------------------------- selection


def select_cases(spec: str) -> list[Case]:
    """``official`` / ``regular`` / ``all`` ... (set names) or comma-separated case ids, mixed."""
    sets = case_sets()
    out: list[Case] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        out.extend(cases_of_set(part) if part in sets or part == "all" else [get_case(part)])
    if not out:
        raise StageError(f"--cases selects no case: {spec!r}")
    return list({c.id: c for c in out}.values())


def select_stages(spec: str) -> tuple[list[str], bool]:
    """(stage names, tilelang requested) from ``all`` or a comma list that may name ``tilelang``.

    Unknown stage names raise :class:`StageError` before anything runs.
    """
    from mamba3_perf.kernels.registry import list_stages

    parts = [p.strip() for p in spec.split(",") if p.strip()]
    names: list[str] = []
    for p in parts:
        if p == "all":
            names.extend(s.name for s in list_stages())
        elif p != TILELANG:
            names.append(variant_name(p))
    return list(dict.fromkeys(names)), TILELANG in parts


def variant_name(spec: str) -> str:
    """The canonical name of a stage variant: ``STAGE`` or ``STAGE@PRECISION`` (every dot of the
    stage forced to one input precision; :func:`mamba3_perf.kernels.checking.split_variant`).
    Unknown stages raise :class:`StageError`, unknown precisions too."""
    from mamba3_perf.kernels.checking import split_variant
    from mamba3_perf.kernels.registry import get_stage

    try:
        stage, precision = split_variant(spec)
    except ValueError as e:
        raise StageError(str(e)) from None
    name = get_stage(stage).name
    return f"{name}@{precision}" if precision else name


def timed_for_reference(variant: str) -> bool:
    """Whether ``variant`` is timed even where it fails the golden check: the live TileLang row
    and the forced-precision variants, which are there to be compared, not to be used."""
    return variant == TILELANG or "@" in variant


def default_states_dtype(case: Case) -> torch.dtype:
    """Upstream's contract: bf16 chunk states for fp16/bf16 cases, fp32 for fp32 cases."""
    return torch.float32 if case.torch_dtype == torch.float32 else torch.bfloat16


# -------------------------------------------------------------------------------- timing


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elif device.startswith("npu"):
        torch.npu.synchronize()  # registered by torch_npu (backend.resolve imported it)


def _stats(times_us: Sequence[float]) -> dict:
    a = np.asarray(times_us, dtype=float)
    return {"median_us": float(np.median(a)), "p10_us": float(np.quantile(a, 0.1)),
            "p90_us": float(np.quantile(a, 0.9)), "n_reps": int(a.size)}


def _host_times_us(fn: Callable[[], object], device: str, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def time_samples_us(fn: Callable[[], object], *, device: str, warmup_ms: float = 25,
                    rep_ms: float = 100, graph: bool = False) -> list[float]:
    """Per-call times (µs) of ``fn`` on ``device``: CUDA do_bench (with ``graph``, of a CUDA
    graph of one ``fn`` call, replayed), NPU/CPU host timing."""
    if device.startswith("cuda"):
        import triton.testing

        if graph:
            from mamba3_perf.kernels.graphs import capture

            fn = capture(fn)[0].replay
        ms = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all")
        return [t * 1e3 for t in ms]
    if graph:
        raise BackendError(f"CUDA-graph timing needs a CUDA device, not {device!r}")
    if device.startswith("npu"):
        probe = _host_times_us(fn, device, 1)[0]
        _host_times_us(fn, device, max(1, int(warmup_ms * 1e3 / max(probe, 1.0))))
        reps = max(HOST_TIMER_MIN_REPS, int(rep_ms * 1e3 / max(probe, 1.0)))
        return _host_times_us(fn, device, reps)
    return _host_times_us(fn, device, INTERPRETER_REPS)


def time_fn(fn: Callable[[], object], *, device: str, warmup_ms: float = 25,
            rep_ms: float = 100, graph: bool = False) -> dict:
    """median_us / p10_us / p90_us / n_reps of ``fn`` on ``device``."""
    return _stats(time_samples_us(fn, device=device, warmup_ms=warmup_ms, rep_ms=rep_ms,
                                  graph=graph))


# ------------------------------------------------------------------------------ variants


def prepare(case: Case, *, device: str, states_dtype: torch.dtype | None = None) -> dict:
    """The case's inputs on ``device`` (states in ``states_dtype``, default per upstream)."""
    from mamba3_perf.kernels.inputs import make_inputs

    return make_inputs(case, device=device, states_dtype=states_dtype or default_states_dtype(case))


def variant_runner(variant: str, case: Case, x: dict) -> Callable[[], dict]:
    """A zero-argument function running ``variant`` on inputs ``x`` and returning its 12 outputs."""
    if variant == TILELANG:
        from mamba3_perf import tilelang_row

        runner = tilelang_row.make_runner(case, x)

        def run_tilelang() -> dict:
            runner()
            return runner.outputs_as_dict()

        return run_tilelang
    from mamba3_perf.kernels.checking import run_stage

    return lambda: run_stage(variant, x, case)


def _free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    elif device.startswith("npu"):
        torch.npu.empty_cache()


def _timing_row(variant, case_id, status, reason, timing_kind, stats=None) -> dict:
    stats = stats or {"median_us": math.nan, "p10_us": math.nan, "p90_us": math.nan, "n_reps": 0}
    return {"variant": variant, "case_id": case_id, "status": status, "reason": reason,
            **stats, "timing_kind": timing_kind}


def _check_variant(variant: str, case: Case, x: dict, oracle, *, device, timing_kind, check):
    """Run ``variant`` once and check it: (row, accuracy rows, todo). ``row`` is the final
    timing row of a variant that is not to be timed (not runnable, wrong) and todo is None;
    else row is None and todo is (runner, status, reason) to time it with."""
    from mamba3_perf.kernels.accuracy import check as check_grads

    try:
        fn = variant_runner(variant, case, x)
        out = fn()
        synchronize(device)
    except Exception as e:  # any failure to compile or launch is a result, not a crash
        return _timing_row(variant, case.id, "not runnable", first_line(e), timing_kind), [], None
    acc: list[dict] = []
    status, reason = "ok", ""
    if check:
        golden, ref = oracle
        rows = check_grads(out, golden, ref)
        acc = [{"variant": variant, "case_id": case.id, "gradient": r.gradient, "err": r.err,
                "ref_err": r.ref_err, "bound": r.bound, "passed": r.passed} for r in rows]
        failed = [r.gradient for r in rows if not r.passed]
        if failed:
            status = "wrong"
            reason = (TILELANG_WRONG_REASON if variant == TILELANG
                      else f"fails the golden check on {', '.join(failed)}"
                      + ("; timed for reference" if timed_for_reference(variant) else ""))
    else:
        reason = "accuracy not checked"
    del out
    if status == "wrong" and not timed_for_reference(variant):
        return _timing_row(variant, case.id, status, reason, timing_kind), acc, None
    return None, acc, (fn, status, reason)


def _time_interleaved(todo: dict, case: Case, *, device, timing_kind, warmup_ms, rep_ms,
                      rounds: int, graph: bool = False) -> dict[str, dict]:
    """Timing rows of the checked variants ``todo`` (variant -> (fn, status, reason)), timed
    in ``rounds`` rounds that visit every variant in turn (so a drift of clocks or
    temperature during the case touches all of them alike); the samples of all rounds are
    pooled into one median and spread."""
    samples: dict[str, list[float]] = {v: [] for v in todo}
    failed: dict[str, dict] = {}
    for _ in range(max(1, rounds)):
        for v, (fn, _status, _reason) in todo.items():
            if v in failed:
                continue
            try:
                samples[v] += time_samples_us(fn, device=device, warmup_ms=warmup_ms,
                                              rep_ms=rep_ms, graph=graph)
            except Exception as e:
                failed[v] = _timing_row(v, case.id, "not runnable",
                                        f"while timing: {first_line(e)}", timing_kind)
    return {v: failed.get(v) or _timing_row(v, case.id, status, reason, timing_kind,
                                            _stats(samples[v]))
            for v, (_fn, status, reason) in todo.items()}


def measure(cases: Iterable[Case], stages: Sequence[str], *, device: str, timing_kind: str,
            warmup_ms: float = 25, rep_ms: float = 100, check: bool = True,
            states_dtype: torch.dtype | None = None, progress: Progress | None = None,
            tilelang: bool = False, rounds: int = 1, skip: dict[str, str] | None = None,
            graph: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Check and time ``stages`` (plus the live ``tilelang`` row when asked) on every case.

    ``skip`` (variant -> reason) records those variants "not runnable" with that reason
    without running them: what a caller found out beforehand, e.g. a compile that did not end
    within a deadline in another process (benchmarks/h200_warm.sh).

    Per case, every variant is first run once and checked; those that pass (and ``tilelang``)
    are then timed in ``rounds`` interleaved rounds (:func:`_time_interleaved`). Returns the
    ``timings`` and ``accuracy`` tables of the run store (see :mod:`mamba3_perf.runs`).
    ``progress(description)`` is called once per finished (case, variant). A requested
    tilelang row that cannot run here is recorded "not runnable". ``graph``: time CUDA-graph
    replays (:func:`time_samples_us`; CUDA only, BackendError elsewhere, before anything runs);
    a variant whose capture fails is "not runnable" with the reason.
    """
    if graph and not device.startswith("cuda"):
        raise BackendError(f"CUDA-graph timing needs the cuda backend, not {device!r}")
    from mamba3_perf import tilelang_row
    from mamba3_perf.kernels.checking import oracles
    variants = [variant_name(s) for s in stages if s != TILELANG]
    tilelang = tilelang or TILELANG in stages
    tl_ok = tilelang and tilelang_row.available()
    if tilelang:
        variants.append(TILELANG)
    timings: list[dict] = []
    accuracy: list[dict] = []
    for case in cases:
        try:
            x = prepare(case, device=device, states_dtype=states_dtype)
            oracle = oracles(x, case) if check else None
        except Exception as e:  # nothing of this case can run; say so for every variant
            reason = f"inputs/golden failed: {first_line(e)}"
            for v in variants:
                timings.append(_timing_row(v, case.id, "not runnable", reason, timing_kind))
                if progress:
                    progress(f"{case.id} {v}")
            _free(device)
            continue
        rows: dict[str, dict | None] = {}
        todo: dict = {}
        for v in variants:
            if skip and v in skip:
                rows[v] = _timing_row(v, case.id, "not runnable", skip[v], timing_kind)
            elif v == TILELANG and not tl_ok:
                rows[v] = _timing_row(v, case.id, "not runnable", tilelang_row.UNAVAILABLE,
                                      timing_kind)
            else:
                rows[v], acc, fn = _check_variant(v, case, x, oracle, device=device,
                                                  timing_kind=timing_kind, check=check)
                accuracy.extend(acc)
                if fn is not None:
                    todo[v] = fn
            _free(device)
            if progress and rows[v] is not None:
                progress(f"{case.id} {v}")
        del oracle
        _free(device)
        timed = _time_interleaved(todo, case, device=device, timing_kind=timing_kind,
                                  warmup_ms=warmup_ms, rep_ms=rep_ms, rounds=rounds, graph=graph)
        if progress:
            for v in todo:
                progress(f"{case.id} {v}")
        timings.extend(timed.get(v) or rows[v] for v in variants)
        del x, todo
        _free(device)
    return (pd.DataFrame(timings, columns=list(TIMING_COLUMNS)),
            pd.DataFrame(accuracy, columns=list(ACCURACY_COLUMNS)))


# ------------------------------------------------------------------------ run + record


def run_meta(backend, cases: Sequence[Case], stages: Sequence[str], **extra) -> dict:
    """run.json metadata shared by bench and profile: environment, cases, stages, backend."""
    from mamba3_perf.runs import collect_environment

    env = collect_environment()
    if backend.name == "npu":  # collect_environment knows CUDA devices only
        try:
            env["device"] = torch.npu.get_device_name(0)
        except Exception as e:
            env["device_error"] = first_line(e)
    return {**env, "backend": backend.name, "timing_kind": backend.timing_kind,
            "cases": [c.to_dict() for c in cases], "stages": list(stages), **extra}


def default_run_name(prefix: str) -> str:
    """``prefix-YYYYmmdd-HHMMSS-xxxx``: the random tail keeps runs started in the same second
    (parallel processes on one run root) from colliding when they are moved into place."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{prefix}-{stamp}-{secrets.token_hex(2)}"


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return None if not math.isfinite(float(v)) else float(v)
    if v is None or v is pd.NA or (not isinstance(v, (str, bool, int)) and pd.isna(v)):
        return None
    return v


def _records(df: pd.DataFrame) -> list[dict]:
    return [_jsonable(r) for r in df.astype(object).to_dict("records")]


def limits_record(table: pd.DataFrame, cases: dict[str, Case], device_spec) -> list[dict]:
    """Per case: its lower bounds on ``device_spec`` and each variant's fraction of them."""
    from mamba3_perf.analysis.limits import case_limits, fraction_of_limits

    out = []
    for cid, case in cases.items():
        lim = case_limits(case, device_spec)
        rows = table[(table["case_id"] == cid) & table["median_us"].notna()]
        fractions = {r["variant"]: fraction_of_limits(float(r["median_us"]), lim)
                     for r in rows.to_dict("records")}
        out.append({**lim, "fractions": fractions})
    return _jsonable(out)


def bench_record(meta: dict, timings: pd.DataFrame, accuracy: pd.DataFrame, table: pd.DataFrame,
                 summary, cases: dict[str, Case], device_spec) -> dict:
    """The single JSON record of a bench run (what is committed under ``records/``)."""
    return {
        "meta": _jsonable(meta),
        "timings": _records(timings),
        "accuracy": _records(accuracy),
        "ladder": {"table": _records(table), "per_variant": _records(summary.per_variant),
                   "stage0_not_runnable": [list(x) for x in summary.stage0_not_runnable]},
        "limits": limits_record(table, cases, device_spec),
    }


@dataclass(frozen=True)
class BenchResult:
    run_path: Path
    table: pd.DataFrame  # ladder_table with limits
    summary: object  # LadderSummary
    json_path: Path | None


def run_bench(cases: Sequence[Case], stages: Sequence[str], *, backend, out_root: str | Path,
              name: str | None = None, warmup_ms: float = 25, rep_ms: float = 100,
              tilelang: bool = False, json_path: str | Path | None = None,
              progress: Progress | None = None, rounds: int = 1,
              skip: dict[str, str] | None = None, check: bool = True,
              graph: bool = False) -> BenchResult:
    """``perf bench``: measure, store the run (timings + accuracy), build the ladder and the
    optional JSON record (written atomically). ``check=False`` skips the golden (and its fp64
    memory): rows say "accuracy not checked". ``graph``: time CUDA-graph replays (the meta's
    ``cuda_graph``; :func:`measure`)."""
    from mamba3_perf.reports.record import ladder_with_limits
    from mamba3_perf.runs import create_run, read_run, write_text_atomic

    timings, accuracy = measure(cases, stages, device=backend.device,
                                timing_kind=backend.timing_kind, warmup_ms=warmup_ms,
                                rep_ms=rep_ms, progress=progress, tilelang=tilelang,
                                rounds=rounds, skip=skip, check=check, graph=graph)
    stage_list = list(stages) + ([TILELANG] if tilelang and TILELANG not in stages else [])
    meta = run_meta(backend, cases, stage_list, warmup_ms=warmup_ms, rep_ms=rep_ms,
                    rounds=rounds, cuda_graph=graph)
    name = name or default_run_name("bench")
    with create_run(out_root, name, meta) as w:
        w.write_table("timings", timings)
        w.write_table("accuracy", accuracy)
    run = read_run(Path(out_root) / name)
    table, summary, by_id, spec = ladder_with_limits(run.table("timings"), run.meta)
    jp = None
    if json_path is not None:
        rec = bench_record(run.meta, timings, accuracy, table, summary, by_id, spec)
        jp = write_text_atomic(json_path, json.dumps(rec, indent=1, sort_keys=True,
                                                     allow_nan=False) + "\n")
    return BenchResult(run.path, table, summary, jp)


def merge_records(records: Sequence[dict], *, command: str,
                  unfinished: dict[str, str] | None = None) -> dict:
    """One bench record from several of the same device and stages (e.g. one process per
    case, run one after another): timings and accuracy concatenated, the ladder and limits
    rebuilt over all cases, ``command`` (what made the parts) and each part's command, commit
    and time in the meta. ``unfinished`` (case id -> why) names cases whose process never
    wrote a part; they are listed in the meta, not given invented rows. A record that is itself
    a merge may be one of ``records`` (a case added later): its parts are kept, and its
    unfinished cases that a new part now has are dropped."""
    from mamba3_perf.reports.record import ladder_with_limits

    if not records:
        raise ValueError("merge_records: no records given")
    meta = dict(records[0]["meta"])
    for key in ("device", "backend", "timing_kind", "cuda_graph", "stages"):
        # records from before CUDA-graph timing have no cuda_graph: they timed eager calls
        vals = {json.dumps(r["meta"].get(key, False if key == "cuda_graph" else None)) for r in records}
        if len(vals) > 1:
            raise ValueError(f"merge_records: the records differ in {key}: {sorted(vals)}")
    cases, seen = [], set()
    for r in records:
        for c in r["meta"].get("cases", []):
            if c["id"] in seen:
                raise ValueError(f"merge_records: case {c['id']} is in more than one record")
            seen.add(c["id"])
            cases.append(c)
    parts, left = [], {}
    for r in records:  # a merged record brings its own parts and unfinished cases
        parts += r["meta"].get("parts") or [
            {k: r["meta"].get(k) for k in ("command", "git_commit", "created", "clocks")}
            | {"cases": [c["id"] for c in r["meta"].get("cases", [])]}]
        left.update(r["meta"].get("unfinished_cases") or {})
    left = {c: why for c, why in left.items() if c not in seen}
    if records[0]["meta"].get("parts"):
        command = f"{records[0]['meta']['command']} ; then {command}"
    meta.update(cases=cases, command=command, parts=parts, unfinished_cases=left | dict(unfinished or {}))
    timings = pd.DataFrame([t for r in records for t in r["timings"]], columns=list(TIMING_COLUMNS))
    accuracy = pd.DataFrame([a for r in records for a in r["accuracy"]], columns=list(ACCURACY_COLUMNS))
    table, summary, by_id, spec = ladder_with_limits(timings, meta)
    return bench_record(meta, timings, accuracy, table, summary, by_id, spec)
