"""Which machine the kernels run on: Ascend NPU (torch_npu + triton-ascend), CUDA, or the CPU
through the Triton interpreter.

The interpreter is chosen by ``TRITON_INTERPRET=1``, which Triton reads when a kernel module
is imported; :func:`resolve` therefore sets it before the stage modules load, and refuses
when they were already loaded for another backend.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass

from mamba3_perf.errors import BackendError

BACKENDS = ("auto", "npu", "cuda", "cpu")


@dataclass(frozen=True)
class Backend:
    name: str  # npu | cuda | cpu
    device: str  # torch device string
    timing_kind: str  # "device" or "interpreter"


def _npu_available() -> bool:
    if importlib.util.find_spec("torch_npu") is None:
        return False
    import torch
    import torch_npu  # noqa: F401  (registers torch.npu)

    return bool(torch.npu.is_available())


def resolve(name: str = "auto") -> Backend:
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")
    import torch

    if name == "auto":
        if os.environ.get("TRITON_INTERPRET") == "1":
            name = "cpu"
        elif _npu_available():
            name = "npu"
        elif torch.cuda.is_available():
            name = "cuda"
        else:
            name = "cpu"
    if name == "npu":
        if not _npu_available():
            raise BackendError("backend npu: torch_npu is not installed or sees no NPU "
                               "(install the 'npu' extra with triton-ascend for your CANN)")
        _require_mode(interpret=False)
        return Backend("npu", "npu", "device")
    if name == "cuda":
        if not torch.cuda.is_available():
            raise BackendError("backend cuda: torch sees no CUDA device")
        _require_mode(interpret=False)
        return Backend("cuda", "cuda", "device")
    _require_mode(interpret=True)
    return Backend("cpu", "cpu", "interpreter")


def _require_mode(*, interpret: bool) -> None:
    loaded = "mamba3_perf.kernels.bwd_bwd" in sys.modules
    current = os.environ.get("TRITON_INTERPRET") == "1"
    if loaded and current != interpret:
        raise BackendError("the Triton kernels were already loaded for another backend; "
                           "start a new process (TRITON_INTERPRET is read at import)")
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
