"""Test set-up: run Triton kernels through the interpreter where no GPU is present, and
NaN-poison ``torch.empty`` so a kernel that leaves part of an output unwritten fails."""
import os

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
