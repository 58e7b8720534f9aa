"""Console, markdown, charts and timeline outputs from synthetic frames; HTML escaping."""
import json
from pathlib import Path

import pandas as pd

from mamba3_perf.analysis.ladder import (
    ladder_table, load_gpu_baseline, resolve_cases, summarize_ladder,
)
from mamba3_perf.analysis.limits import H200, with_limits
from mamba3_perf.reports import write_html
from mamba3_perf.reports.charts import speedup_ladder_chart, stage_breakdown_chart
from mamba3_perf.reports.console import breakdown_table, ladder_means, run_summary
from mamba3_perf.reports.markdown import INTERPRETER_WARNING, optimization_record
from mamba3_perf.reports.timeline import timeline_figure, write_timeline

from synthetic_run import EVIL, events, timings


def _table(kind="interpreter"):
    t = timings(kind)
    cases = resolve_cases(t["case_id"])
    return with_limits(ladder_table(t, cases=cases, baseline=load_gpu_baseline()), cases, H200)


def test_console_summary():
    table = _table()
    text = run_summary(table)
    assert "N64_P64_R4_C16" in text and "4.00x" in text and "(rec)" in text
    assert "not runnable" in text
    means = ladder_means(summarize_ladder(table))
    assert "N256_P64_R4_C8" in means and "stage0 cannot run" in means
    bd = pd.DataFrame({"stage_tag": ["scan", "[bold]aux[/bold]"], "total_us": [12.0, 3.0],
                       "share": [0.8, 0.2], "count": [1, 1], "tensor_pipe_pct": [2.0, float("nan")],
                       "aic_mac_ratio": [float("nan")] * 2})
    out = breakdown_table(bd)
    assert "80.0%" in out and "tensor_pipe_pct" in out and "aic_mac_ratio" not in out
    assert "[bold]aux[/bold]" in out  # markup in names is shown as text


def test_stall_table_and_breakdown_keep_warp_state_apart():
    from mamba3_perf.analysis.breakdown import kernel_stalls, stage_breakdown
    from mamba3_perf.reports.console import stall_table
    from mamba3_perf.traces import parse_ncu

    rec = Path(__file__).resolve().parents[2] / "records" / "ncu-N128_P64_R4_C16" / "stage16_regcap-stalls-raw.csv"
    events = parse_ncu(rec)
    text = stall_table(kernel_stalls(events), width=220)
    assert "bwd_bwd_state_terms_kernel" in text and "10.91" in text and "long_sb 46.7%" in text
    assert "cyc/issue" in text and "barrier" in text
    bd = breakdown_table(stage_breakdown(events), width=220)
    assert "cycles_per_issue" not in bd and "stall_" not in bd and "warps_active_pct" in bd
    assert stall_table(kernel_stalls(events.drop(columns=["cycles_per_issue"]))) == ""


def test_markdown_record():
    table = _table()
    md = optimization_record({"timing_kind": "interpreter", "device": "cpu", "git_commit": "abc"},
                             table, summarize_ladder(table))
    assert md.splitlines()[0] == INTERPRETER_WARNING
    assert "interpreter" in md.splitlines()[0].lower()
    for section in ("## What, when, where", "## Baseline and goal", "## Bottleneck found",
                    "## Per-step gains", "## Speedup per shape", "## Not runnable",
                    "## Gap to GPU TileLang and to the limits"):
        assert section in md
    assert EVIL not in md and "&lt;script&gt;" in md and "\\|" in md
    dev = optimization_record({"timing_kind": "device", "device": "NVIDIA H200"}, _table("device"),
                              summarize_ladder(_table("device")),
                              breakdown=pd.DataFrame({"stage_tag": ["scan", "aux"], "total_us": [9.0, 1.0],
                                                      "share": [0.9, 0.1], "count": [2, 1],
                                                      "tensor_pipe_pct": [6.8, 1.0]}))
    assert dev.startswith("# ") and "**scan** dominates with 90%" in dev and "tensor_pipe_pct 6.8" in dev
    stalled = optimization_record({"timing_kind": "device", "device": "NVIDIA H200"}, _table("device"),
                                  summarize_ladder(_table("device")),
                                  breakdown=pd.DataFrame({"stage_tag": ["scan"], "total_us": [9.0], "share": [1.0],
                                                          "count": [1], "cycles_per_issue": [10.0],
                                                          "stall_long_scoreboard": [4.0], "stall_barrier": [1.5]}))
    assert "stall most on long_scoreboard (4.00 of the 10.00 cycles" in stalled
    assert "cycles_per_issue 10" not in stalled


def test_charts_escape_and_write(tmp_path):
    table = _table()
    fig = speedup_ladder_chart(table)
    assert {tr.name for tr in fig.data} == {"N64_P64_R4_C16", "N32_P64_R4_C16", "N256_P64_R4_C8"}
    bd = pd.DataFrame({"variant": ["prod", "prod", EVIL], "stage_tag": ["scan", "aux", "fused"],
                       "total_us": [3.0, 1.0, 5.0]})
    p = write_html(stage_breakdown_chart(bd), tmp_path / "bd.html")
    html = p.read_text()
    assert EVIL not in html and "plotly" in html
    assert [f.name for f in tmp_path.iterdir()] == ["bd.html"]  # no temp file left


def test_timeline_escapes_names(tmp_path):
    ev = events()
    fig = timeline_figure(ev)
    assert {tr.name for tr in fig.data} == {"aux", "scan", "post", "fused"}
    post = next(tr for tr in fig.data if tr.name == "post")
    assert post.customdata[0][0] == "&lt;script&gt;alert(1)&lt;/script&gt;"
    scan = next(tr for tr in fig.data if tr.name == "scan")
    assert "tensor_pipe_pct: 2" in scan.customdata[0][3]
    assert list(next(tr for tr in fig.data if tr.name == "fused").base) == [0.0]  # aligned per variant
    html = write_timeline(ev.assign(variant=EVIL), tmp_path / "t.html", title=EVIL).read_text()
    assert EVIL not in html and "alert(1)" in html


def test_markdown_record_per_kernel_section_from_a_recorded_h200_run(tmp_path):
    """`perf report` on the recorded stage16 --hw-metrics run (Kineto + ncu): the per-kernel
    section gives each kernel's occupancy and limiter (2 programs per SM of the 255-register
    aux), its ncu figures and the leading stall; a kernel without ncu rows gets '-' there."""
    import shutil

    from mamba3_perf import runs
    from mamba3_perf.reports.record import write_run_report

    src = Path(__file__).resolve().parents[2] / "records" / "profile-8x512-stage16-hw-8f8057d"
    shutil.copytree(src, tmp_path / "run")
    rep = write_run_report(runs.read_run(tmp_path / "run"), tmp_path / "report.md")
    md = (tmp_path / "report.md").read_text()
    section = md.split("## Per kernel (`stage16_regcap`, NVIDIA H200)")[1].split("\n## ")[0]
    aux = next(line for line in section.splitlines() if line.startswith("| bwd_bwd_aux_streamed_kernel"))
    assert "| 255 | 44 | 2 (registers) | 168 / 75.0 | 12.5 % | 12.3 % |" in aux and "long_scoreboard" in aux
    assert "| - | - | - | - | - |" in section  # torch's copy kernel: Kineto only
    assert "&lt;" in section and "&amp;lt;" not in section  # escaped once
    assert rep.occupancy is not None and not rep.occupancy.empty


def test_markdown_record_has_no_per_kernel_section_without_registers():
    table = _table("device")
    md = optimization_record({"timing_kind": "device", "device": "NVIDIA H200"}, table, summarize_ladder(table),
                             kernels=pd.DataFrame({"kernel_name": ["k"], "dur_us": [1.0], "variant": ["prod"]}))
    assert "## Per kernel" not in md


def test_markdown_record_of_the_recorded_h100_run(tmp_path):
    """`perf report` on the H100 --hw-metrics run (each kernel traced over three calls): the
    per-kernel µs is per launch, the device is the H100 with its own bandwidth, and no recorded
    H200 TileLang time stands in for the H100's."""
    import shutil

    from mamba3_perf import runs
    from mamba3_perf.reports.record import write_run_report

    src = Path(__file__).resolve().parents[2] / "records" / "profile-N128_P64_R4_C16-auxdq-h100-d57951a"
    shutil.copytree(src, tmp_path / "run")
    write_run_report(runs.read_run(tmp_path / "run"), tmp_path / "report.md")
    md = (tmp_path / "report.md").read_text()
    section = md.split("## Per kernel (`stage29_auxdq`, NVIDIA H100)")[1].split("\n## ")[0]
    aux = next(line for line in section.splitlines() if line.startswith("| bwd_bwd_aux_gluon_kernel"))
    assert aux.startswith("| bwd_bwd_aux_gluon_kernel | 1635 | 3 | 255 | 100 | 2 (registers) | 168 / 75.0 |")
    assert "4904 µs over 3 launches" in md and "at NVIDIA H100's 3.4 TB/s" in md
    gap = md.split("## Gap to GPU TileLang")[1]
    assert "No TileLang time" in gap and "| N128_P64_R4_C16 | 2793 | - | - | - |" in gap


def test_markdown_record_sets_tilelangs_kernel_beside_the_steps(tmp_path):
    """`perf report` on the H100 --hw-metrics run of stage32 with the live TileLang row: the
    per-kernel section lists TileLang's one kernel after the step's, with the waves its grid
    makes over the H100's 132 SMs (64 programs, one per SM: 0.48) and the DRAM bytes and
    instructions ncu counted per launch."""
    import shutil

    from mamba3_perf import runs
    from mamba3_perf.reports.record import write_run_report

    src = Path(__file__).resolve().parents[2] / "records" / "profile-N128_P64_R4_C16-stage32-e8437fb"
    shutil.copytree(src, tmp_path / "run")
    write_run_report(runs.read_run(tmp_path / "run"), tmp_path / "report.md")
    md = (tmp_path / "report.md").read_text()
    section = md.split("## Per kernel (`stage32_banks`, NVIDIA H100)")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows[-1].startswith("| mamba_mimo_bwd_bwd_kernel_kernel (TileLang) |")
    assert rows[-1].endswith("| 0.48 | 0.51 | 349 |") and "| 1 (registers) |" in rows[-1]
    aux = next(line for line in rows if line.startswith("| bwd_bwd_aux_gluon_kernel |"))
    assert aux.endswith("| 31.03 | 1.86 | 248 |")
    assert len(rows) == 7  # six stage32 kernels, then TileLang's
    per_call = next(line for line in section.splitlines() if line.startswith("Per call"))
    # SM time per (b, h, chunk): stage32's grids keep all 132 SMs busy (its chunk sums 64), TileLang's 64
    assert "`stage32_banks` 2422 µs, 5.25 GB, 681 M instructions, 38.9 SM·µs per (b, h, chunk);" in per_call
    assert ("`tilelang` 1961 µs, 0.51 GB, 349 M instructions, its grid on 64 of the 132 SMs (0.48 waves), "
            "15.3 SM·µs per (b, h, chunk).") in per_call


def test_per_call_counts_one_sm_per_program_under_one_wave(tmp_path):
    """N16_P64_R4_C8: TileLang's 64 programs of 128 threads would fit two an SM (0.24 waves), but
    the scheduler spreads them one per SM: 64 SMs busy, and its SM time counts 64 of them."""
    import shutil

    from mamba3_perf import runs
    from mamba3_perf.reports.record import write_run_report

    src = Path(__file__).resolve().parents[2] / "records" / "profile-N16_P64_R4_C8-stage32-10d944a"
    shutil.copytree(src, tmp_path / "run")
    write_run_report(runs.read_run(tmp_path / "run"), tmp_path / "report.md")
    per_call = next(line for line in (tmp_path / "report.md").read_text().splitlines() if line.startswith("Per call"))
    assert "`stage32_banks` 1300 µs, 2.09 GB, 367 M instructions, 10.3 SM·µs per (b, h, chunk);" in per_call
    assert "its grid on 64 of the 132 SMs (0.24 waves), 5.4 SM·µs per (b, h, chunk)." in per_call


def test_markdown_record_with_a_source_page(tmp_path):
    """A run with an ncu source page in traces/ (`perf profile --source-page`): the record sums it
    per loop body and opcode; a page that does not read is a note, not a failure."""
    import shutil

    from mamba3_perf import runs
    from mamba3_perf.reports.record import write_run_report

    rec = Path(__file__).resolve().parents[2] / "records"
    shutil.copytree(rec / "profile-N128_P64_R4_C16-auxdq-h100-d57951a", tmp_path / "run")
    shutil.copy(rec / "ncu-source-stage26-h100-68ccb02" / "N128_P64_R4_C16-bwd_bwd_aux_gluon_kernel-sass.csv.gz",
                tmp_path / "run" / "traces" / "sass-stage26_widep.csv.gz")
    (tmp_path / "run" / "traces" / "sass-stage29_auxdq.csv.gz").write_bytes(b"not gzip")
    run_json = tmp_path / "run" / "run.json"
    meta = json.loads(run_json.read_text())
    meta["source_page_kernel"] = "bwd_bwd_aux_gluon_kernel"
    run_json.write_text(json.dumps(meta))
    rep = write_run_report(runs.read_run(tmp_path / "run"), tmp_path / "report.md")
    md = (tmp_path / "report.md").read_text()
    section = md.split("## Where bwd_bwd_aux_gluon_kernel's instructions go (Nsight Compute source page)")[1]
    section = section.split("\n## ")[0]
    assert "### stage26_widep" in section and "### stage29_auxdq" not in section
    walk = next(line for line in section.splitlines() if line.startswith("| loop 0xda50-0x101a0"))
    assert walk.startswith("| loop 0xda50-0x101a0 | 630 | 53.9 % | 45.5 % | 55.6 % |")
    assert "| R2UR | move | 231 | 13.6 % |" in section
    assert any("sass-stage29_auxdq.csv.gz left out" in n for n in rep.notes)
