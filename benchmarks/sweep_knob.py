"""Sweep module-level knobs of the kernels (a stage's rule overrides, register caps) over their
values, per case: golden check, do_bench time and per-kernel device times of one stage
(sweep_launch.measure), every combination in one process. Launch dicts (num_warps / num_stages)
are sweep_launch.py's; this is for the plain module attributes a rule reads.

    python benchmarks/sweep_knob.py --cases N128_P64_R4_C16 --stage stage25_subchunk \\
        --knob stage25_subchunk.POST_STEPS=16,8,4 --knob stage25_subchunk.POST_WARPS=none,8,4 --json rec.json
    python benchmarks/sweep_knob.py --cases N256_P64_R4_C8 --stage stage24_gluonaux \\
        --knob stage16_regcap.PRE_CAP=128,none,128 --json rec.json

A knob is MODULE.ATTR with MODULE under mamba3_perf.kernels.bwd_bwd; values are integers or
``none``. ``--warm`` compiles every combination into TRITON_CACHE_DIR for the H200 on a machine
without a GPU, so the device run starts from binaries. ``--traffic`` counts instead of timing:
per combination and kernel, the bytes mamba3_perf.analysis.traffic counts on the Triton
interpreter (sampled programs; CPU, no golden check: the interpreter tests check the knobs):

    python benchmarks/sweep_knob.py --traffic --cases official --stage stage25_subchunk \
        --knob stage25_subchunk.READ_INPUTS=0,1,2 --json rec.json
"""
from __future__ import annotations

import argparse
import itertools
import json

from mamba3_perf.kernels import knobs as knobs_lib
from mamba3_perf.kernels.knobs import knobs_set


def parse_knobs(specs: list[str]):
    """kernels.knobs.parse_knobs, a bad spec exiting with its reason."""
    try:
        return knobs_lib.parse_knobs(specs)
    except ValueError as e:
        raise SystemExit(f"--{e}") from None


def count_traffic(cases, stage: str, knobs, names: list[str], combos: list, samples: int) -> list[dict]:
    """One row per (case, combination, kernel launch): analysis.traffic's per-kernel bytes."""
    from mamba3_perf import bench
    from mamba3_perf.analysis.traffic import kernel_traffic, per_kernel

    rows = []
    for case in cases:
        x = bench.prepare(case, device="cpu")
        for values in combos:
            with knobs_set(knobs, values):
                kernels = per_kernel(kernel_traffic(stage, case, samples=samples, inputs=x))
            for r in kernels.to_dict(orient="records"):
                rows.append({"case_id": case.id, "stage": stage, "knobs": dict(zip(names, values)), **r})
            total = kernels[["bytes", "no_reuse", "hbm_us"]].sum()
            print(json.dumps({"case_id": case.id, "knobs": dict(zip(names, values)),
                              "GB": round(total["bytes"] / 1e9, 3), "hbm_us": round(total["hbm_us"], 1)}),
                  flush=True)
        del x
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--stage", required=True)
    ap.add_argument("--knob", action="append", required=True, metavar="MODULE.ATTR=v,...")
    ap.add_argument("--json", default=None, help="the record (required unless --warm)")
    ap.add_argument("--warm", action="store_true", help="compile every combination into TRITON_CACHE_DIR here")
    ap.add_argument("--traffic", action="store_true",
                    help="count each kernel's bytes on the interpreter instead of timing (analysis.traffic)")
    ap.add_argument("--samples", type=int, default=6, help="with --traffic: programs run per launch")
    a = ap.parse_args(argv)
    if a.samples < 1:
        ap.error(f"--samples: expected at least 1 program per launch, got {a.samples}")
    if a.traffic:
        from mamba3_perf import backend as be

        be.resolve("cpu")  # the interpreter, before the knobs' modules load the kernels
    knobs = parse_knobs(a.knob)
    if not a.warm and not a.json:
        ap.error("--json is required unless --warm")
    names = [f"{mod.__name__.rsplit('.', 1)[1]}.{attr}" for mod, attr, _ in knobs]
    combos = list(itertools.product(*[vals for _, _, vals in knobs]))

    from mamba3_perf import bench

    cases = bench.select_cases(a.cases)
    if a.warm:
        from mamba3_perf.kernels.codegen import warm_cache

        for case in cases:
            for values in dict.fromkeys(combos):
                with knobs_set(knobs, values):
                    warm_cache(a.stage, case, log=lambda s: print(values, s, flush=True))
        return

    from mamba3_perf import backend as be
    from mamba3_perf.kernels.checking import oracles
    from mamba3_perf.runs import cases_recorded, write_rows_record

    if a.traffic:
        write_rows_record(a.json, "sweep_knob.py", argv, count_traffic(cases, a.stage, knobs, names, combos, a.samples),
                          samples=a.samples, counted="bytes on the Triton interpreter (analysis.traffic)")
        return
    bk = be.resolve("auto")
    from sweep_launch import measure  # loads the kernels: after the backend is chosen

    rows = []
    for case in cases_recorded(cases, a.json, "sweep_knob.py", argv, rows):
        x = bench.prepare(case, device=bk.device)
        golden, ref = oracles(x, case)
        fn = bench.variant_runner(a.stage, case, x)
        for values in combos:
            row = {"case_id": case.id, "stage": a.stage, "knobs": dict(zip(names, values))}
            try:
                with knobs_set(knobs, values):
                    row.update(measure(fn, case, a.stage, x, golden, ref, bk.device, bk))
            except ImportError:  # a module the machine lacks (the device ran one without ijson): stop
                raise
            except Exception as e:  # a combination that does not compile or launch is a result
                row.update(status="not runnable", reason=bench.first_line(e))
            print(json.dumps(row), flush=True)
            rows.append(row)
        del x, golden, ref
        bench._free(bk.device)


if __name__ == "__main__":
    main()
