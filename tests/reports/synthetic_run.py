"""Synthetic frames for the report tests: a timings table and a KERNEL_EVENTS frame."""
import math

import pandas as pd

from mamba3_perf.traces.schema import conform

EVIL = "<script>alert(1)</script>"


def timings(kind="interpreter", scale=1.0):
    rows = [
        ("stage0", "N64_P64_R4_C16", "ok", "", 100.0), ("stage1_pre", "N64_P64_R4_C16", "ok", "", 50.0),
        ("prod", "N64_P64_R4_C16", "ok", "", 25.0), ("stage0", "N32_P64_R4_C16", "ok", "", 40.0),
        ("prod", "N32_P64_R4_C16", "wrong", "dq err 0.1 > bound 0.01", 5.0),
        ("stage0", "N256_P64_R4_C8", "not runnable", "smem 300 KiB > 227 KiB | " + EVIL, math.nan),
        ("prod", "N256_P64_R4_C8", "ok", "", 10.0),
    ]
    df = pd.DataFrame(rows, columns=["variant", "case_id", "status", "reason", "median_us"])
    df["median_us"] *= scale
    df["p10_us"], df["p90_us"] = 0.97 * df["median_us"], 1.03 * df["median_us"]
    df["n_reps"], df["timing_kind"] = 10, kind
    return df


def events():
    rows = [
        ("prod", "1", "bwd_bwd_aux_kernel", "aux", 0.0, 3.0, 10.0),
        ("prod", "1", "bwd_bwd_scan_kernel", "scan", 3.5, 12.0, 2.0),
        ("prod", "1", EVIL, "post", 16.0, 1.0, math.nan),
        ("stage0", "1", "bwd_bwd_fused_kernel", "fused", 100.0, 90.0, math.nan),
    ]
    df = pd.DataFrame(rows, columns=["variant", "stream", "kernel_name", "stage_tag", "start_us",
                                     "dur_us", "tensor_pipe_pct"])
    # warp state as ncu gives it, on prod's scan kernel only
    df["cycles_per_issue"] = [math.nan, 9.0, math.nan, math.nan]
    df["stall_long_scoreboard"] = [math.nan, 4.5, math.nan, math.nan]
    df["stall_barrier"] = [math.nan, 1.0, math.nan, math.nan]
    # DRAM bytes (ncu) on prod's aux and scan kernels: 1 and 10 µs at the H200's 4.3 TB/s
    df["dram_bytes"] = [4.3e6, 4.3e7, math.nan, math.nan]
    return conform(df.assign(source="kineto", device="0", case_id="N64_P64_R4_C16"))
