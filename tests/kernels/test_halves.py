"""stage21_halves: its kernel rules, and each half-tile kernel forced on every pairwise and tail
shape: the same outputs as stage11's kernels, bit for bit on the interpreter (same arithmetic,
term for term), so any index or mask slip in the halves shows."""
import pytest
import torch

from mamba3_perf.kernels import cases, make_inputs
from mamba3_perf.kernels.bwd_bwd import stage21_halves as s21
from mamba3_perf.kernels.checking import run_stage


@pytest.mark.parametrize("case_id,pre,post", [
    ("small-N16_P64_R4_C8", True, "regs"), ("small-N32_P64_R4_C16", True, "regs"),
    ("small-N128_P64_R1_C64", True, "regs"), ("small-N128_P64_R4_C16", True, "order"),
    ("small-N128_P64_R2_C32", True, "order"), ("small-N128_P32_R4_C16", True, "order"),
    ("small-N64_P64_R4_C16", True, None), ("small-N128_P64_R8_C8", True, None),
    ("small-N256_P64_R4_C8", True, None), ("small-N64_P128_R4_C16", False, None),
    ("small-N128_P128_R4_C8", False, None),
])
def test_kernels_follow_the_measured_rules(case_meta, case_id, pre, post):
    meta = case_meta(case_id)
    assert (s21.pre_kernel(meta) is s21.bwd_bwd_pre_halves_kernel) is pre
    assert s21.post_kernel(meta) is {"regs": s21.bwd_bwd_post_halves_regs_kernel,
                                     "order": s21.bwd_bwd_post_halves_kernel, None: None}[post]


SHAPES = [c for s in ("pairwise", "tail", "edge") for c in cases(s)]


@pytest.mark.parametrize("case", SHAPES, ids=lambda c: c.id)
def test_half_tile_kernels_equal_stage11s(monkeypatch, case):
    x = make_inputs(case)
    want = run_stage("stage20_auxinc", x, case)
    monkeypatch.setattr(s21, "pre_kernel", lambda meta: s21.bwd_bwd_pre_halves_kernel)
    for post in (s21.bwd_bwd_post_halves_kernel, s21.bwd_bwd_post_halves_regs_kernel):
        monkeypatch.setattr(s21, "post_kernel", lambda meta, post=post: post)
        got = run_stage("stage21_halves", x, case)
        for name, t in want.items():
            if t is not None:
                assert torch.equal(t, got[name]), (post.__name__, name)
