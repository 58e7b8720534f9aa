"""Test set-up: run Triton kernels through the interpreter where no GPU is present, and
NaN-poison ``torch.empty`` so a kernel that leaves part of an output unwritten fails; and
``compile_stage``, compiling a stage's kernels for sm_90 on this machine."""
import json
import os
import subprocess
import sys

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

_empty = torch.empty


def _nan_empty(*args, **kwargs):
    t = _empty(*args, **kwargs)
    if t.is_floating_point():
        t.fill_(float("nan"))
    return t


@pytest.fixture(autouse=True)
def nan_poisoned_empty(monkeypatch):
    monkeypatch.setattr(torch, "empty", _nan_empty)
    yield


@pytest.fixture
def compile_stage():
    """Compile a stage's launches on a small case of (N, P, R, C) for the H200 (sm_90) with
    mamba3_perf.kernels.codegen in a subprocess (real JIT functions need TRITON_INTERPRET unset):
    {kernel name: its JSON line (launch options, shared memory and the programs per SM it allows,
    MMA shapes)} of the kernels whose
    name contains ``kernel`` (every kernel: ""); ``knobs``: MODULE.ATTR=v knobs (kernels.knobs) set
    for the compile; ``banks``: each line with its Gluon kernel's register <-> shared copies
    (mamba3_perf.analysis.banks.summary's rows, under "banks"). The line's compile time
    ("seconds") is left out: it differs between compiles of the same launch."""
    def run(stage, N, P, R, C, kernel, knobs=(), banks=False):
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        knob_args = [arg for k in knobs for arg in ("--knob", k)]
        res = subprocess.run([sys.executable, "-m", "mamba3_perf.kernels.codegen", "compile", stage, str(N), str(P),
                              str(R), str(C), "--kernel", kernel, *knob_args, *(["--banks"] if banks else [])],
                             capture_output=True, text=True, env=env, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        lines = (json.loads(line) for line in res.stdout.splitlines())
        return {k["kernel"]: {f: v for f, v in k.items() if f != "seconds"} for k in lines}
    return run
