"""stage34_poststeps: stage11's post kernel on one step per program where C*R = 32 and N >= 128,
on half chunks of 8 warps at R = 8, C = 8. Its rule over the official grid, and its post launches
the same as stage33's with the stage25 knobs the H100 sweep set (the sweep's numbers are this
stage's); the interpreter's golden rows: test_stages.py (small-N256_P64_R4_C8, small-N128_P128_R4_C8,
small-N128_P64_R8_C8 among them)."""
import pytest

from mamba3_perf.bench import prepare
from mamba3_perf.kernels import cases, get_case
from mamba3_perf.kernels.bwd_bwd import stage33_chunksum, stage34_poststeps
from mamba3_perf.kernels.bwd_bwd.common import CHUNK_LAUNCH

EIGHT_WARPS = dict(CHUNK_LAUNCH, num_warps=8)


@pytest.mark.parametrize("case", cases("official"), ids=lambda c: c.id)
def test_rule_over_the_official_grid(case_meta, case):
    want = {"N256_P64_R4_C8": dict(post_steps=1), "N128_P128_R4_C8": dict(post_steps=1),
            "N128_P64_R8_C8": dict(post_steps=4, post_launch=EIGHT_WARPS)}.get(case.id, {})
    assert stage34_poststeps.post_plan(case_meta(case)) == want


def test_plan_is_stage33s_with_the_post_steps(case_meta):
    case = get_case("small-N256_P64_R4_C8")
    x, meta = prepare(case, device="cpu"), case_meta(case)
    assert stage34_poststeps.plan(x, meta) == dict(stage33_chunksum.plan(x, meta), post_steps=1)


@pytest.mark.parametrize("shape,knobs", [
    ((256, 64, 4, 8), ("stage25_subchunk.POST_STEPS=1",)),
    ((128, 128, 4, 8), ("stage25_subchunk.POST_STEPS=1",)),
    ((128, 64, 8, 8), ("stage25_subchunk.POST_STEPS=4", "stage25_subchunk.POST_WARPS=8")),
])
def test_post_launch_is_the_swept_knobs(compile_stage, shape, knobs):
    """(That the knobs change the launch at all: the rule test above, and the sweep's times.)"""
    mine = compile_stage("stage34_poststeps", *shape, "post")
    assert mine and mine == compile_stage("stage33_chunksum", *shape, "post", knobs=knobs)
