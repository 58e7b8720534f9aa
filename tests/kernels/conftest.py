"""Shared by the kernel tests."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from triton._C.libtriton import ir
from triton.runtime import interpreter

from mamba3_perf.kernels import api, get_case, make_inputs
from mamba3_perf.kernels.bwd_bwd import common


@pytest.fixture
def case_meta():
    """The launch meta (api.validate) of a case's generated inputs, by case or case id: what
    the stages' shape rules read."""
    def meta(case):
        case = get_case(case) if isinstance(case, str) else case
        return api.validate(**make_inputs(case), chunk_size=case.C, rotary_dim_divisor=case.rotary_dim_divisor)
    return meta


def _tf32(h):
    return interpreter.TensorHandle(interpreter._round_f32_to_tf32(h.data), h.dtype.scalar)


@pytest.fixture
def cuda_precisions(monkeypatch):
    """CUDA's dot precisions on the interpreter (skips where CUDA itself runs): the operands of
    every "tf32" dot rounded to TF32 (10 mantissa bits, to nearest even, as the tensor cores
    take them; "tf32x3" and "ieee" dots stay fp32), and dot_precision answering what it answers
    on CUDA."""
    if torch.cuda.is_available():
        pytest.skip("emulates CUDA's TF32 on the interpreter")
    create_dot = interpreter.InterpreterBuilder.create_dot
    original = common.dot_precision

    def dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if input_precision == ir.INPUT_PRECISION.TF32 and a.data.dtype == np.float32:
            a, b = _tf32(a), _tf32(b)
        return create_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", dot)
    monkeypatch.setattr(common, "dot_precision", lambda device, **kw: original("cuda", **kw))


@pytest.fixture
def compile_stage():
    """Compile a stage's launches on a small case of (N, P, R, C) for the H200 (sm_90) with
    mamba3_perf.kernels.codegen in a subprocess (real JIT functions need TRITON_INTERPRET unset):
    {kernel name: its JSON line (launch options, shared memory, MMA shapes)} of the kernels whose
    name contains ``kernel`` (every kernel: ""); ``knobs``: MODULE.ATTR=v knobs (kernels.knobs) set
    for the compile."""
    def run(stage, N, P, R, C, kernel, knobs=()):
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        knob_args = [arg for k in knobs for arg in ("--knob", k)]
        res = subprocess.run([sys.executable, "-m", "mamba3_perf.kernels.codegen", "compile", stage, str(N), str(P),
                              str(R), str(C), "--kernel", kernel, *knob_args],
                             capture_output=True, text=True, env=env, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        return {k["kernel"]: k for k in map(json.loads, res.stdout.splitlines())}
    return run
