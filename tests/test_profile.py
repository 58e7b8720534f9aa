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
