"""stage33_chunksum: the chunks' DMIMO_V and D parts summed on a (B*H, R*P / BLOCK) grid. Its plan,
the kernel's sums against torch where neither the chunks nor the [R, P] elements fill whole loads,
the kernels it launches for the H200 (sm_90), and (on a Hopper GPU) the stage against the golden.
The interpreter's golden rows of every case set: test_stages.py."""
import dataclasses

import pytest
import torch

from mamba3_perf.bench import prepare
from mamba3_perf.kernels import get_case
from mamba3_perf.kernels.bwd_bwd import stage32_banks, stage33_chunksum
from mamba3_perf.kernels.bwd_bwd.common import alloc_scratch, is_hopper

HOPPER = torch.cuda.is_available() and is_hopper("cuda")


def test_plan_is_stage32s_with_the_wide_sum(case_meta):
    case = get_case("small-N128_P64_R4_C16")
    x, meta = prepare(case, device="cpu"), case_meta(case)
    assert stage33_chunksum.plan(x, meta) == dict(stage32_banks.plan(x, meta),
                                                  chunk_sum=stage33_chunksum.launch_chunk_sum_wide)


@pytest.mark.parametrize("R,P,nc,has_d", [
    (4, 16, 3, True),  # R*P = 64: one partial BLOCK; 3 chunks: under one load of CHUNKS
    (2, 24, 37, False),  # 48 elements, 37 chunks: three loads, the last partial
    (4, 128, 256, True),  # R*P = 512 over four programs, 256 chunks (N128_P128_R4_C8's)
    (8, 64, 16, True),  # one whole load
])
def test_wide_sum_is_the_chunks_sum(case_meta, R, P, nc, has_d):
    base = case_meta(get_case("pw-1"))
    meta = dataclasses.replace(base, B=2, H=3, R=R, P=P, S=nc * base.C, has_d=has_d)
    B, H = meta.B, meta.H
    gen = torch.Generator().manual_seed(1)
    s = alloc_scratch(meta, "cpu", ("DMVP", "DDP"))
    s["DMVP"].copy_(torch.randn(s["DMVP"].shape, generator=gen))
    s["DDP"].copy_(torch.randn(s["DDP"].shape, generator=gen))
    out = {"DMIMO_V": torch.full((B, H, R, P), float("nan")),
           "DD": torch.full((B, H), float("nan")) if has_d else None}
    stage33_chunksum.launch_chunk_sum_wide({}, s, out, meta)
    torch.testing.assert_close(out["DMIMO_V"], s["DMVP"].sum(2), rtol=1e-5, atol=1e-5)
    if has_d:
        torch.testing.assert_close(out["DD"], s["DDP"].sum(2), rtol=1e-5, atol=1e-5)


def test_launches_the_wide_sum_for_sm90(compile_stage):
    lines = compile_stage("stage33_chunksum", 128, 128, 4, 8, "chunk_sum")
    assert set(lines) == {"bwd_bwd_chunk_sum_wide_kernel"}
    assert set(compile_stage("stage32_banks", 128, 128, 4, 8, "chunk_sum")) == {"bwd_bwd_chunk_sum_kernel"}


@pytest.mark.skipif(not HOPPER, reason="stage32's Gluon kernels run on Hopper GPUs only")
@pytest.mark.parametrize("case_id", ["hop-N128", "hop-R8-C8", "hop-P128-C8", "hop-N16-C8-tail", "hop-fp16-noD"])
def test_chunksum_matches_golden_on_hopper(cuda_golden, case_id):
    cuda_golden("stage33_chunksum", case_id)
