"""mamba3_perf.profile on the CPU interpreter: each launch of a traced stage is its own event."""
import time

import pytest
import torch

from mamba3_perf import bench
from mamba3_perf.kernels.cases import case_from_shape
from mamba3_perf.kernels.registry import get_stage
from mamba3_perf.profile import _trace_interpreter, interpreted_launches

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter tracing: CPU only")

CASE = case_from_shape("1,32,1,1", N=16, P=16, R=2, C=16, dtype="fp32")


def test_each_launch_is_an_event_tagged_from_the_registry_plus_the_host_remainder():
    x = bench.prepare(CASE, device="cpu")
    fn = bench.variant_runner("stage6_statepass", CASE, x)
    fn()
    t0 = time.perf_counter()
    ev = _trace_interpreter(fn, "stage6_statepass", CASE, origin=t0)
    kernels = ev[ev["stage_tag"] != "host"]
    spec = {k.name: k.tag.value for k in get_stage("stage6_statepass").kernels}
    # every launch is one of the stage's registered kernels, carrying its registered tag
    assert set(kernels["kernel_name"]) <= set(spec) and len(kernels) >= 3
    assert all(spec[n] == t for n, t in zip(kernels["kernel_name"], kernels["stage_tag"]))
    assert {"pre", "aux", "scan", "post"} <= set(kernels["stage_tag"])
    # launches run one after another, inside the call, in launch order
    start = kernels["start_us"].to_numpy()
    end = start + kernels["dur_us"].to_numpy()
    assert (start[1:] >= end[:-1]).all() and (kernels["dur_us"] > 0).all() and start[0] >= 0
    host = ev[ev["stage_tag"] == "host"]
    assert len(host) == 1 and host["stream"].iloc[0] == "host" and host["dur_us"].iloc[0] >= 0
    assert (ev["variant"] == "stage6_statepass").all() and (ev["source"] == "interpreter").all()


def test_launch_recording_is_undone_after_the_block_even_when_the_call_fails():
    from triton.runtime.interpreter import InterpretedFunction

    run = InterpretedFunction.run
    with pytest.raises(RuntimeError):
        with interpreted_launches() as launches:
            assert InterpretedFunction.run is not run and launches == []
            raise RuntimeError("stage failed")
    assert InterpretedFunction.run is run


def test_a_stage_with_no_recorded_launch_is_timed_whole(monkeypatch):
    import contextlib

    import mamba3_perf.profile as prof

    monkeypatch.setattr(prof, "interpreted_launches", lambda: contextlib.nullcontext(None))
    ev = prof._trace_interpreter(lambda: None, "stage6_statepass", CASE, origin=time.perf_counter())
    assert ev["kernel_name"].tolist() == ["stage6_statepass (whole stage, host-timed)"]
    assert ev["stage_tag"].tolist() == ["other"]


def test_source_pages_are_collected_per_variant_through_ncu(tmp_path, monkeypatch):
    """collect_source_pages with ncu stood in for: the page of a variant that launched the kernel
    is kept gzipped (and the ncu report removed); one that did not is a warning."""
    import gzip
    import subprocess
    from pathlib import Path

    from mamba3_perf import profile as prof
    from mamba3_perf.analysis.sass import read_source_page

    page = (Path(__file__).parents[1] / "records" / "ncu-source-stage26-h100-68ccb02"
            / "N128_P64_R4_C16-bwd_bwd_aux_gluon_kernel-sass.csv.gz")
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        if "--export" in cmd:  # the profile: a report only where the variant launches the kernel
            if cmd[-1] == "stage26_widep":
                Path(cmd[cmd.index("--export") + 1]).write_bytes(b"report")
                return subprocess.CompletedProcess(cmd, 0, "", "")
            return subprocess.CompletedProcess(cmd, 0, "", "==WARNING== No kernels were profiled.")
        return subprocess.CompletedProcess(cmd, 0, gzip.decompress(page.read_bytes()).decode(), "")

    monkeypatch.setattr(prof.shutil, "which", lambda name: "/usr/bin/ncu")
    monkeypatch.setattr(prof.subprocess, "run", fake_run)
    pages, warnings = prof.collect_source_pages(CASE, ["stage26_widep", "stage0"], "regex:aux_gluon", tmp_path)
    assert pages == [tmp_path / "sass-stage26_widep.csv.gz"] and len(read_source_page(pages[0])) == 4192
    assert not list(tmp_path.glob("*.ncu-rep")) and not list(tmp_path.glob(".*"))
    assert len(warnings) == 1 and "on stage0: no launch profiled" in warnings[0] and "No kernels" in warnings[0]
    profile_cmd = calls[0]
    assert profile_cmd[:1] == ["ncu"] and "SourceCounters" in profile_cmd and "WarpStateStats" in profile_cmd
    assert profile_cmd[profile_cmd.index("--kernel-name") + 1] == "regex:aux_gluon"
    assert calls[1] == ["ncu", "--import", str(tmp_path / "sass-stage26_widep.ncu-rep"), "--page", "source", "--csv",
                        "--print-source", "sass"]


def test_source_pages_without_ncu_are_a_warning(tmp_path, monkeypatch):
    from mamba3_perf import profile as prof

    monkeypatch.setattr(prof.shutil, "which", lambda name: None)
    assert prof.collect_source_pages(CASE, ["stage0"], "k", tmp_path) == (
        [], ["--source-page: ncu is not on PATH; no source page"])
