"""Run stage7/8 once with the streamed aux's block and launch options overridden, check it
against the golden on the device and print one JSON line (a config that faults is a result):

    python3 benchmarks/check_aux_launch.py 16 8 1 stage7_streamaux N64_P64_R4_C16   # NB warps stages

On the H200 (Triton 3.6) 16 columns on 8 warps faults (TF32 wgmma with N = 8, triton#10629);
records/h200-aux-launch-check.jsonl. Run each config in its own process: a fault poisons the
CUDA context.
"""
from __future__ import annotations

import argparse
import json
import time


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("nb", type=int)
    ap.add_argument("warps", type=int)
    ap.add_argument("stages", type=int)
    ap.add_argument("stage")
    ap.add_argument("case")
    a = ap.parse_args(argv)

    from mamba3_perf import backend as be

    bk = be.resolve("auto")
    from mamba3_perf.bench import prepare
    from mamba3_perf.kernels import get_case
    from mamba3_perf.kernels.bwd_bwd import stage7_streamaux as s7
    from mamba3_perf.kernels.checking import check_stage

    s7.AUX_NBLOCK = a.nb
    s7.STREAM_LAUNCH.clear()
    s7.STREAM_LAUNCH.update(num_warps=a.warps, num_stages=a.stages)
    case = get_case(a.case)
    t0 = time.time()
    try:
        rows = check_stage(a.stage, case, inputs=prepare(case, device=bk.device))
        failed = [r.gradient for r in rows if not r.passed]
        status = "wrong: " + ", ".join(failed) if failed else "ok"
    except Exception as e:  # a fault or compile failure is the answer
        status = "error: " + str(e).splitlines()[0][:160]
    print(json.dumps(dict(case=a.case, stage=a.stage, nb=a.nb, warps=a.warps, stages=a.stages,
                          status=status, seconds=round(time.time() - t0))), flush=True)


if __name__ == "__main__":
    main()
