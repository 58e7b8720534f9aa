"""Host time per call of a stage against its GPU time: where the host's launches (Python, the
Triton / Gluon launchers, TMA descriptors, allocations) take longer than the kernels run, the GPU
waits and do_bench's per-call time is the host's. Per case and stage: the host time of N calls
issued back to back without synchronizing (the launch queue absorbs them), the wall time of the
same N calls through the final synchronize, do_bench's median of eager calls and, with
``--cuda-graph``, of CUDA-graph replays of one call (``graph_*`` columns: the device time without
the host's launch path; kernels.graphs).

    python benchmarks/host_overhead.py --cases N128_P64_R1_C64,N32_P64_R4_C16 \\
        --stages stage24_gluonaux,stage25_subchunk --json rec.json

``--profile FILE``: also a cProfile of the N back-to-back calls per case and stage (a second
run of them; profiling inflates each call), its top functions by own and by cumulative time,
to FILE: where the host's time goes.

``--launches``: also, per launch of one call, the host time of launching it again through the
JIT (``kernel[grid](...)``: argument binding, specialization key, cache look-up, then the
launcher) and through the compiled kernel's launcher alone (``CompiledKernel.run`` with the same
bound arguments), ``calls`` times each without synchronizing: what the JIT's per-call path costs
on this host (rows with ``launch`` set).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--stages", required=True)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--cuda-graph", action="store_true", help="also time CUDA-graph replays")
    ap.add_argument("--json", required=True)
    ap.add_argument("--profile", metavar="FILE", help="also write a cProfile of the calls (top functions) to FILE")
    ap.add_argument("--profile-rows", type=int, default=40)
    ap.add_argument("--launches", action="store_true",
                    help="also time each launch through the JIT and through the compiled kernel's launcher")
    a = ap.parse_args(argv)

    import torch

    from mamba3_perf import backend as be
    from mamba3_perf import bench
    from mamba3_perf.runs import cases_recorded, write_text_atomic

    bk = be.resolve("auto")
    if not bk.device.startswith("cuda"):
        raise SystemExit("host_overhead.py compares host and GPU time: it needs a CUDA device")
    rows, profiles = [], []
    for case in cases_recorded(bench.select_cases(a.cases), a.json, "host_overhead.py", argv, rows):
        x = bench.prepare(case, device=bk.device)
        for stage in a.stages.split(","):
            fn = bench.variant_runner(stage, case, x)
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(a.calls):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            row = dict(case_id=case.id, stage=stage, calls=a.calls,
                       host_us_per_call=(t1 - t0) / a.calls * 1e6, wall_us_per_call=(t2 - t0) / a.calls * 1e6,
                       **bench.time_fn(fn, device=bk.device, warmup_ms=10, rep_ms=40))
            if a.cuda_graph:
                graphed = bench.time_fn(fn, device=bk.device, warmup_ms=10, rep_ms=40, graph=True)
                row.update({f"graph_{k}": v for k, v in graphed.items()})
            if a.profile:
                profiles.append(host_profile(fn, a.calls, f"{stage} on {case.id}", a.profile_rows))
            print(json.dumps(row), flush=True)
            rows.append(row)
            if a.launches:
                for lrow in launch_paths(fn, a.calls):
                    lrow = dict(case_id=case.id, stage=stage, calls=a.calls, **lrow)
                    print(json.dumps(lrow), flush=True)
                    rows.append(lrow)
        del x
        bench._free(bk.device)
    if a.profile:
        write_text_atomic(a.profile, "\n\n".join(profiles) + "\n")


def launch_paths(fn, calls: int) -> list[dict]:
    """Per launch of one call of ``fn`` (captured by wrapping JITFunction.run for that call; the
    call itself runs as usual): µs per launch through the JIT and through the compiled kernel's
    launcher, ``calls`` launches each, then one synchronize outside the timing."""
    import torch
    from triton import knobs
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    captured = []
    original = JITFunction.run

    def capture(self, *args, grid, warmup, **kw):
        kernel = original(self, *args, grid=grid, warmup=warmup, **kw)
        captured.append((self, args, kw, grid, kernel))
        return kernel

    JITFunction.run = capture
    try:
        fn()
    finally:
        JITFunction.run = original
    torch.cuda.synchronize()
    out = []
    for jit, args, kw, grid, kernel in captured:
        device = driver.active.get_current_device()
        stream = driver.active.get_current_stream(device)
        bound = list(jit.device_caches[device][4](*args, **kw)[0].values())
        g = tuple(grid) + (1,) * (3 - len(grid))
        launch = jit[grid]
        t0 = time.perf_counter()
        for _ in range(calls):
            launch(*args, **kw)
        t1 = time.perf_counter()
        for _ in range(calls):
            kernel.run(*g, stream, kernel.function, kernel.packed_metadata, None,
                       knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *bound)
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        out.append(dict(launch=jit.__name__, args=len(bound), jit_us_per_launch=(t1 - t0) / calls * 1e6,
                        launcher_us_per_launch=(t2 - t1) / calls * 1e6))
    return out


def host_profile(fn, calls: int, title: str, rows: int) -> str:
    """cProfile of ``calls`` back-to-back calls of ``fn`` (no synchronize between; one at the
    end, outside the profile's calls), its ``rows`` top functions by own and by cumulative time."""
    import torch

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    parts = [f"# {title}: cProfile of {calls} back-to-back calls"]
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(rows)
        parts.append(f"## by {key}\n{buf.getvalue().strip()}")
    return "\n\n".join(parts)


if __name__ == "__main__":
    main()
