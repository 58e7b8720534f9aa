"""kernels.graphs: CUDA-graph capture of a stage call; replays follow inputs refilled in place."""
import pytest
import torch

from mamba3_perf.errors import BackendError, ShapeError
from mamba3_perf.kernels import get_case, make_inputs
from mamba3_perf.kernels.api import mamba3_mimo_bwd_bwd
from mamba3_perf.kernels.graphs import GraphedBwdBwd, capture, refill

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-CUDA error")
def test_capture_without_cuda_is_a_backend_error():
    with pytest.raises(BackendError, match="needs a CUDA device"):
        capture(lambda: pytest.fail("called"))


def test_graphed_call_refuses_cpu_tensors():
    case = get_case("pw-1")
    with pytest.raises(ShapeError, match="q: a CUDA graph needs CUDA tensors, received cpu"):
        GraphedBwdBwd(make_inputs(case), chunk_size=case.C, stage="stage0")
    with pytest.raises(ShapeError, match="received NoneType"):
        GraphedBwdBwd({}, chunk_size=case.C)


@needs_cuda
@pytest.mark.parametrize("stage", ["prod", "stage25_subchunk"])
@pytest.mark.parametrize("case_id", ["N16_P64_R4_C8", "pw-1"])
def test_replay_equals_eager_calls_on_refilled_inputs(stage, case_id):
    case = get_case(case_id)
    kw = dict(chunk_size=case.C, rotary_dim_divisor=case.rotary_dim_divisor, stage=stage)
    x = make_inputs(case, device="cuda", states_dtype=torch.bfloat16)
    step = GraphedBwdBwd(x, **kw)
    for seed in (0, 1):
        fresh = make_inputs(case, seed=seed, device="cuda", states_dtype=torch.bfloat16)
        names = [n for n, t in x.items() if t is not None]
        for name in names[::2]:  # half refilled by hand, half through the call
            x[name].copy_(fresh[name])
        got = step(**{n: fresh[n] for n in names[1::2]})
        want = mamba3_mimo_bwd_bwd(**fresh, **kw)
        torch.cuda.synchronize()
        for name, w in want.items():
            if w is not None:
                torch.testing.assert_close(got[name], w, rtol=0, atol=0, msg=f"{name}, seed {seed}")


def test_refill_copies_in_place_or_refuses_before_copying():
    captured = dict(q=torch.zeros(2, 3), k=torch.zeros(2, 3), d=None)
    q = captured["q"]
    refill(captured, dict(q=torch.ones(2, 3)))
    assert captured["q"] is q and bool((q == 1).all())
    for bad, why in ((dict(k=torch.ones(2, 3), q=torch.ones(3, 2)), r"q: expected \[2, 3\] torch.float32"),
                     (dict(k=torch.ones(2, 3), q=torch.ones(2, 3, dtype=torch.float64)), "received \\[2, 3\\] torch.float64"),
                     (dict(k=torch.ones(2, 3), d=torch.ones(3)), "d: not a tensor of the capture"),
                     (dict(k=torch.ones(2, 3), v=torch.ones(3)), "v: not a tensor of the capture"),
                     (dict(k=torch.ones(2, 3), q=[1.0]), "q: expected a torch.Tensor")):
        with pytest.raises(ShapeError, match=why):
            refill(captured, bad)
        assert bool((captured["k"] == 0).all())  # nothing copied
