"""Sweep the launch options (num_warps, num_stages) of a stage's kernels and report, per case,
target and option pair, the stage's golden check, its do_bench time and each kernel's device
time from a torch.profiler trace. What the launch defaults in ``kernels/bwd_bwd`` rest on.

A target is one launch-options dict the kernels read at launch (:data:`TARGETS`): ``chunk``
(common.CHUNK_LAUNCH: the pre and post kernels), ``stream`` (the streamed aux), ``terms``
(stage9's narrow state_terms), ``pass`` (the state pass). Each ``--sweep`` varies one target
while the others keep their defaults; the default pair, if listed, is measured in the same
process as the others. Sweep ``stream`` on stage7-stage11: stage12 sets the streamed aux's
num_stages itself (stage12_pipeaux.aux_launch), so there only num_warps would vary.

    python benchmarks/sweep_launch.py --cases N64_P64_R4_C16 --stage stage10_fewscratch \
        --sweep stream=4:1,4:2,4:3 --sweep pass=4:3,4:1,8:3 --json sweep.json
    python benchmarks/sweep_launch.py --cases N128_P64_R4_C16 --stage stage15_passwave \
        --sweep terms=4:1,4:1:168 --json sweep.json     # W:S:R caps registers (maxnreg) at R

``--warm`` compiles every (case, target, options) of the sweep into TRITON_CACHE_DIR for the
H200 on a machine without a GPU (python -m mamba3_perf.kernels.codegen warm's path), so the
device run starts from binaries. Avoid num_warps 8 for ``stream`` and ``terms``: their [*, 16]
dot tiles split into N = 8 per warpgroup there, which Triton 3.6 miscompiles for TF32 wgmma
(illegal address, triton#10629; records/h200-aux-launch-check.jsonl).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import tempfile
from pathlib import Path

TARGETS = {
    "chunk": ("mamba3_perf.kernels.bwd_bwd.common", "CHUNK_LAUNCH"),
    "stream": ("mamba3_perf.kernels.bwd_bwd.stage7_streamaux", "STREAM_LAUNCH"),
    "terms": ("mamba3_perf.kernels.bwd_bwd.stage9_termsblock", "LAUNCH"),
    "pass": ("mamba3_perf.kernels.bwd_bwd.stage6_statepass", "PASS_LAUNCH"),
    "gluon_terms": ("mamba3_perf.kernels.bwd_bwd.terms_gluon", "LAUNCH"),
}


def parse_sweeps(specs: list[str]) -> list[tuple[str, list[tuple[int, int, int | None]]]]:
    """``TARGET=W:S[:R],...`` strings -> [(target, [(num_warps, num_stages, maxnreg), ...])];
    R caps the registers per thread (Triton's ``maxnreg`` launch option; None: no cap)."""
    out = []
    for spec in specs:
        target, _, configs = spec.partition("=")
        try:
            parsed = [tuple(int(v) for v in c.split(":")) for c in configs.split(",")]
        except ValueError:
            parsed = []
        if target not in TARGETS or not parsed or any(len(c) not in (2, 3) for c in parsed):
            raise SystemExit(f"--sweep {spec!r}: expected TARGET=W:S[:R],... with TARGET in {', '.join(TARGETS)}")
        out.append((target, [c if len(c) == 3 else (*c, None) for c in parsed]))
    return out


def launch_dict(target: str) -> dict:
    module, name = TARGETS[target]
    return getattr(importlib.import_module(module), name)


@contextlib.contextmanager
def launch_options(target: str, warps: int, stages: int, maxnreg: int | None = None):
    """``target``'s launch dict set to (warps, stages, maxnreg) inside, restored on the way out."""
    d = launch_dict(target)
    saved = dict(d)
    d.update(num_warps=warps, num_stages=stages)
    d.pop("maxnreg", None)
    if maxnreg:
        d["maxnreg"] = maxnreg
    try:
        yield
    finally:
        d.clear()
        d.update(saved)


def measure(fn, case, stage, x, golden, ref, device, bk) -> dict:
    """Golden check, do_bench time and per-kernel trace times of one configuration."""
    from mamba3_perf import bench, profile
    from mamba3_perf.kernels.accuracy import check

    out = fn()
    bench.synchronize(device)
    failed = [r.gradient for r in check(out, golden, ref) if not r.passed]
    del out
    row = dict(status="wrong" if failed else "ok", failed=failed,
               **bench.time_fn(fn, device=device, warmup_ms=10, rep_ms=40))
    with tempfile.TemporaryDirectory() as d:
        ev = profile.trace_variants(case, [stage], bk, Path(d))
    per = ev.groupby("kernel_name")["dur_us"].sum() / profile.TRACE_ITERS[bk.name]
    row["kernel_us"] = {k: float(v) for k, v in per.items()}
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--stage", default="stage10_fewscratch")
    ap.add_argument("--sweep", action="append", required=True, metavar="TARGET=W:S,...")
    ap.add_argument("--json", default=None, help="the record (required unless --warm)")
    ap.add_argument("--warm", action="store_true",
                    help="compile every configuration into TRITON_CACHE_DIR for the H200 here, "
                         "without a GPU; nothing runs")
    a = ap.parse_args(argv)
    sweeps = parse_sweeps(a.sweep)
    if not a.warm and not a.json:
        ap.error("--json is required unless --warm")

    from mamba3_perf import bench

    cases = bench.select_cases(a.cases)
    if a.warm:
        from mamba3_perf.kernels.codegen import warm_cache

        for case in cases:
            for target, configs in sweeps:
                for warps, stages, cap in configs:
                    with launch_options(target, warps, stages, cap):
                        warm_cache(a.stage, case, log=lambda s: print(f"{target} {warps}:{stages}:{cap} {s}", flush=True))
        return

    from mamba3_perf import backend as be

    bk = be.resolve("auto")
    from mamba3_perf.kernels.checking import oracles
    from mamba3_perf.runs import cases_recorded

    defaults = {t: dict(launch_dict(t)) for t, _ in sweeps}
    rows = []
    for case in cases_recorded(cases, a.json, "sweep_launch.py", argv, rows, defaults=defaults):
        x = bench.prepare(case, device=bk.device)
        golden, ref = oracles(x, case)
        fn = bench.variant_runner(a.stage, case, x)
        for target, configs in sweeps:
            for warps, stages, cap in configs:
                row = {"case_id": case.id, "stage": a.stage, "target": target, "num_warps": warps,
                       "num_stages": stages, "maxnreg": cap}
                try:
                    with launch_options(target, warps, stages, cap):
                        row.update(measure(fn, case, a.stage, x, golden, ref, bk.device, bk))
                except ImportError:  # a module the machine lacks (the device ran one without ijson): stop
                    raise
                except Exception as e:  # a config that does not compile or launch is a result
                    row.update(status="not runnable", reason=bench.first_line(e))
                print(json.dumps(row), flush=True)
                rows.append(row)
                bench._free(bk.device)
        del x, golden, ref
        bench._free(bk.device)


if __name__ == "__main__":
    main()
