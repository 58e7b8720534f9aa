"""stage35_pdl: stage34's kernels as programmatic dependent launches on Hopper. Compiled for
sm_90, every kernel it launches takes PDL and launch_pdl and carries the two griddepcontrol
instructions, and is otherwise stage34's launch; kernels.launching adds them only to kernels with a
PDL constexpr, only inside dependent_launches; off Hopper the stage is stage34; on a Hopper GPU,
the golden."""
import pytest
import torch
import triton
import triton.language as tl

from mamba3_perf.bench import prepare
from mamba3_perf.kernels import get_case, launching
from mamba3_perf.kernels.bwd_bwd import stage35_pdl
from mamba3_perf.kernels.bwd_bwd.common import grid_dependency, is_hopper

HOPPER = torch.cuda.is_available() and is_hopper("cuda")


@pytest.mark.parametrize("shape", [(128, 64, 4, 16), (256, 64, 4, 8), (128, 128, 4, 8), (16, 64, 4, 8)])
def test_every_launch_is_dependent_and_otherwise_stage34s(compile_stage, shape):
    def strip(lines):
        return {k: {f: v for f, v in line.items() if f != "seconds"} for k, line in lines.items()}

    mine, base = strip(compile_stage("stage35_pdl", *shape, "")), strip(compile_stage("stage34_poststeps", *shape, ""))
    assert mine.keys() == base.keys() and len(mine) >= 5
    for name, line in mine.items():
        kw = dict(line["keywords"])
        assert kw.pop("PDL") is True and kw.pop("launch_pdl") is True, name
        assert "PDL" not in base[name]["keywords"], name
        assert {**line, "keywords": kw} == base[name], name


@triton.jit
def _with_param(X, PDL: tl.constexpr = False):
    grid_dependency(PDL)
    tl.store(X, 1.0)


@triton.jit
def _without_param(X):
    tl.store(X, 1.0)


def _recorded(kernel):
    seen = []
    return seen, launching._with_pdl(lambda *a, **kw: seen.append(kw), kernel)


def test_dependent_launches_reach_only_kernels_with_the_parameter():
    seen, run = _recorded(_with_param)
    run(0, num_warps=4)
    assert seen == [dict(num_warps=4, PDL=True, launch_pdl=True)]
    seen, run = _recorded(_without_param)
    run(0)
    assert seen == [{}]
    assert not launching._PDL.get()
    with launching.dependent_launches():
        assert launching._PDL.get()
        with launching.dependent_launches(False):
            assert not launching._PDL.get()
    assert not launching._PDL.get()


def test_a_kernel_with_the_parameter_runs_off_hopper():
    """PDL False (every launch outside dependent_launches): the call compiles to nothing, so the
    kernel runs wherever the others do (here the interpreter or the CPU test's GPU)."""
    x = torch.zeros(1, device="cuda" if torch.cuda.is_available() else "cpu")
    launching.launch(_with_param, (1,))(x)
    assert x.item() == 1.0


def test_off_hopper_the_stage_is_stage34():
    case = get_case("small-N128_P64_R4_C16")
    assert not stage35_pdl.applies(prepare(case, device="cpu"))


@pytest.mark.skipif(not HOPPER, reason="programmatic dependent launch: compute capability 9 and later")
@pytest.mark.parametrize("case_id", ["hop-N128", "hop-R8-C8", "hop-P128-C8", "hop-N16-C8-tail", "hop-fp16-noD"])
def test_pdl_matches_golden_on_hopper(cuda_golden, case_id):
    cuda_golden("stage35_pdl", case_id)
