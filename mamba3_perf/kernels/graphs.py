"""CUDA-graph capture of bwd_bwd calls: one graph launch in place of a stage's launches.

A stage launches five to eight kernels per call (plus a few allocations and, on Hopper, TMA
descriptors), and on small shapes the host takes longer than the GPU: ~1.0 ms of host time per
stage25_subchunk call against ~0.7 ms of kernels on N128_P64_R1_C64 on the H200
(records/h200-host-overhead-3eb6a64.json, records/profile-gluonaux-e0b9914/). Captured once,
a call is one graph launch; the kernels and their arguments are the captured ones.

The contract is CUDA graphs' own: a replay reads the tensors the capture was made with and
writes the same output buffers every time. Refill the inputs in place (``x["q"].copy_(new)``, or
pass them to the call: :func:`refill`), replay, and read (or copy) the outputs before the next
replay overwrites them; shapes, dtypes and strides stay those of the capture.
"""
from __future__ import annotations

from typing import Callable, TypeVar

import torch

from mamba3_perf.errors import BackendError, ShapeError

T = TypeVar("T")
WARMUP_CALLS = 2  # eager calls before the capture: compiles, allocator pools, cached layouts


def capture(fn: Callable[[], T], *, warmup: int = WARMUP_CALLS) -> tuple[torch.cuda.CUDAGraph, T]:
    """``fn`` (a call that launches its work on the current CUDA stream, with no host
    synchronization) captured into a CUDA graph, after ``warmup`` eager calls on a side stream
    (torch's recipe: what compiles or allocates on a first call must not do so under capture).

    Returns (graph, the captured call's result): ``graph.replay()`` reruns the call and writes
    into the buffers of that result. Raises BackendError without a CUDA device; an operation
    that cannot be captured raises torch's error, naming it.
    """
    if not torch.cuda.is_available():
        raise BackendError("CUDA-graph capture needs a CUDA device; torch sees none")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = fn()
    return graph, result


class GraphedBwdBwd:
    """``mamba3_mimo_bwd_bwd`` captured on fixed input tensors; calling it replays the capture
    and returns the output dict (the same tensors on every call: the module docstring's
    contract).

        x = make_inputs(case, device="cuda")
        step = GraphedBwdBwd(x, chunk_size=case.C, stage="stage25_subchunk")
        grads = step(q=q2, k=k2)  # copies q2, k2 into x's q, k, then replays
    """

    def __init__(self, inputs: dict, *, chunk_size: int = 16, rotary_dim_divisor: int = 4,
                 output_dtype=None, stage: str = "stage0"):
        from mamba3_perf.kernels.api import mamba3_mimo_bwd_bwd

        q = inputs.get("q")
        if not isinstance(q, torch.Tensor) or not q.is_cuda:
            where = q.device if isinstance(q, torch.Tensor) else type(q).__name__
            raise ShapeError(f"q: a CUDA graph needs CUDA tensors, received {where}")
        kw = dict(chunk_size=chunk_size, rotary_dim_divisor=rotary_dim_divisor,
                  output_dtype=output_dtype, stage=stage)
        self.inputs = inputs
        with torch.cuda.device(q.device):  # the capture stream and the launches on q's GPU
            self.graph, self.outputs = capture(lambda: mamba3_mimo_bwd_bwd(**inputs, **kw))

    def __call__(self, **inputs) -> dict:
        """Replay; ``inputs`` (any of the captured ones, by name) are first copied into the
        captured tensors (:func:`refill`)."""
        refill(self.inputs, inputs)
        self.graph.replay()
        return self.outputs


def refill(captured: dict, new: dict) -> None:
    """Copy ``new``'s tensors into the ``captured`` ones of the same names, in place. Raises
    ShapeError, before copying anything, for a name not captured (or captured as None) and for a
    shape, dtype or device other than the captured tensor's: a replay reads those buffers as
    they were laid out at capture."""
    for name, t in new.items():
        dst = captured.get(name)
        if not isinstance(dst, torch.Tensor):
            raise ShapeError(f"{name}: not a tensor of the capture (captured: "
                             f"{', '.join(k for k, v in captured.items() if isinstance(v, torch.Tensor))})")
        if not isinstance(t, torch.Tensor):
            raise ShapeError(f"{name}: expected a torch.Tensor, received {type(t).__name__}")
        if (t.shape, t.dtype, t.device) != (dst.shape, dst.dtype, dst.device):
            raise ShapeError(f"{name}: expected {list(dst.shape)} {dst.dtype} on {dst.device} as captured, "
                             f"received {list(t.shape)} {t.dtype} on {t.device}")
    for name, t in new.items():
        captured[name].copy_(t)
