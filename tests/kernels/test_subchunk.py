"""stage25_subchunk: the pre and post kernels on sub-chunks compute what the whole-chunk launches
do, for every post kernel stage21 chooses (halves with DANGLES from registers, halves, stage11's)
and steps down to one per program; the launchers refuse a step count that does not tile the
chunk."""
import pytest
import torch

from mamba3_perf.kernels import get_case, make_inputs
from mamba3_perf.kernels.bwd_bwd import prod, stage1_pre, stage21_halves, stage25_subchunk
from mamba3_perf.kernels.checking import check_stage


@pytest.mark.parametrize("case_id,steps", [
    ("small-N32_P64_R4_C16", 1),    # halves, DANGLES from registers (N <= 32)
    ("small-N128_P64_R4_C16", 4),   # halves, 16 warps (C*R*N >= 8192, C >= 16)
    ("small-N128_P64_R8_C8", 2),    # stage11's post kernel
    ("small-N128_P64_R1_C64", 8),   # R = 1
    ("tail-40", 2),                 # a padded tail, per-rank dout
])
def test_sub_chunk_pre_and_post_match_golden(monkeypatch, case_meta, case_id, steps):
    """Each sub-chunk program stores its steps' rows and scalars; the pre kernel's first of a
    chunk's programs its decay matrix and decay (a missed one: NaN from conftest's torch.empty)."""
    monkeypatch.setattr(stage25_subchunk, "POST_STEPS", steps)
    monkeypatch.setattr(stage25_subchunk, "PRE_STEPS", steps)
    c = get_case(case_id)
    assert stage25_subchunk.post_steps(case_meta(c)) == min(steps, c.C) < c.C
    assert stage25_subchunk.pre_steps(case_meta(c)) == min(steps, c.C) < c.C
    rows = check_stage("stage25_subchunk", c)
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]


def test_post_kernels_of_the_cases_above_differ(case_meta):
    kernels = {stage21_halves.post_kernel(case_meta(i)) for i in
               ("small-N32_P64_R4_C16", "small-N128_P64_R4_C16", "small-N128_P64_R8_C8")}
    assert len(kernels) == 3


@pytest.mark.parametrize("steps", [0, 3, 32])
def test_steps_must_tile_the_chunk(case_meta, steps):
    meta = case_meta("small-N32_P64_R4_C16")  # C = 16
    with pytest.raises(ValueError, match="power-of-two divisor"):
        prod.launch_post({}, {}, {}, meta, steps=steps)
    with pytest.raises(ValueError, match="power-of-two divisor"):
        stage1_pre.launch_pre({}, {}, meta, steps=steps)


def test_pre_steps_only_for_the_halves_kernel(monkeypatch, case_meta):
    """stage21 launches stage11's pre kernel at P = 128, which holds whole chunks only."""
    monkeypatch.setattr(stage25_subchunk, "PRE_STEPS", 2)
    assert stage25_subchunk.pre_steps(case_meta("small-N64_P128_R4_C16")) == 16


@pytest.mark.parametrize("case_id,pre,post", [
    ("N128_P64_R4_C16", 4, 4), ("N256_P64_R4_C8", 2, 2), ("N64_P64_R4_C16", 8, 8),
    ("N128_P64_R1_C64", 8, 8),   # post: the kernel with DANGLES from registers, half the tile
    ("N32_P64_R4_C16", 8, 8),    # likewise (N <= 32), at most MAX_STEPS
    ("N128_P64_R8_C8", 2, 8),    # post: whole chunks at R = 8
    ("N64_P128_R4_C16", 16, 8),  # pre: stage11's kernel at P = 128 holds whole chunks
])
def test_sub_chunk_rules(case_id, pre, post):
    """The measured rule (records/h200-sweep-subchunk-*.json): [steps, R, N] tiles of 2048
    elements on 4 warps, 1024 for the post kernel that forms DANGLES in registers, at most 8
    steps."""
    c = get_case(case_id)
    assert (stage25_subchunk.pre_steps(c), stage25_subchunk.post_steps(c)) == (pre, post)
    assert stage25_subchunk.post_launch(c) == (None if c.R >= 8 else dict(num_warps=4))
    assert stage25_subchunk.pre_launch(c) == (None if c.P > 64 else dict(num_warps=4))


def test_scratch_views_are_aligned_disjoint_and_shaped(case_meta):
    """alloc_scratch carves every buffer out of one allocation: each view starts 256 bytes times k
    past its base (CUDA's allocator aligns the base to 512; TMA descriptors need 16-byte aligned
    bases), is contiguous in its own shape and overlaps no other."""
    from mamba3_perf.kernels.bwd_bwd.common import AUX_SCRATCH, PRE_SCRATCH, alloc_scratch

    names = PRE_SCRATCH + AUX_SCRATCH + ("DKR", "DST", "DMVP", "GDB")
    meta = case_meta("small-N128_P64_R4_C16")
    s = alloc_scratch(meta, "cpu", names)
    spans = []
    base = min(t.data_ptr() for t in s.values())
    for n in names:
        t = s[n]
        assert t.dtype == torch.float32 and t.is_contiguous(), n
        assert (t.data_ptr() - base) % 256 == 0 and t.data_ptr() % 16 == 0, n
        spans.append((t.data_ptr(), t.data_ptr() + t.numel() * 4, n))
    assert s["DST"].shape == (meta.B, meta.H, meta.nchunks, meta.N, meta.P)
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
    # one allocation; the views' layout is worked out once per sizes and names
    from mamba3_perf.kernels.bwd_bwd.common import _scratch_layout
    assert len({t.untyped_storage().data_ptr() for t in s.values()}) == 1
    hits = _scratch_layout.cache_info().hits
    alloc_scratch(meta, "cpu", list(names))
    assert _scratch_layout.cache_info().hits == hits + 1


@pytest.mark.parametrize("knob", ["PRE_HEADS_INNER", "POST_HEADS_INNER"])
@pytest.mark.parametrize("case_id,steps", [
    ("small-N128_P64_R4_C16", 4),  # post: stage21's halves kernel
    ("pw-2", 2), ("tail-40", 16),  # post: stage21's kernel with DANGLES from registers
    ("small-N128_P64_R8_C8", None),  # post: stage11's kernel, whole chunks (R = 8)
])
def test_programs_heads_inner_match_golden(monkeypatch, knob, case_id, steps):
    """The pre or post kernel with its programs in (b, chunk, head) order (PRE_ / POST_HEADS_INNER),
    on whole chunks and on sub-chunks: every program still finds its own (b, h, chunk) and the
    first sub-chunk of each chunk stores the chunk's decay (a missed store: NaN from conftest's
    torch.empty)."""
    monkeypatch.setattr(stage25_subchunk, knob, True)
    monkeypatch.setattr(stage25_subchunk, knob.split("_")[0] + "_STEPS", steps)
    c = get_case(case_id)
    assert c.H > 1 and c.S // c.C > 1
    rows = check_stage("stage25_subchunk", c)
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]
@pytest.mark.parametrize("case_id", ["small-N256_P64_R4_C8", "small-N64_P128_R4_C16", "small-N128_P128_R4_C8",
                                     "small-N16_P64_R4_C8", "tail-40"])
@pytest.mark.parametrize("mode,gone", [(1, {"QB_S", "KB_S", "PSIV_S", "DPHIO_S"}), (2, {"QB_S", "KB_S"})])
def test_read_inputs_everywhere_matches_golden_and_stores_no_input_copies(monkeypatch, case_meta, case_id, mode,
                                                                          gone):
    """READ_INPUTS: where stage10's rule keeps QB, KB, PsiV and dPhiO in scratch (N > 128, N < 32,
    P = 128), every reader loads the inputs instead (1), or the post kernel q / k alone (2); the
    pre kernel stores none of those copies (counted by analysis.traffic: its counts change with
    the knob), keeps the others, and the outputs meet the golden. 2 applies only where the aux
    stores the diagonal weight blocks (not at N = 16): elsewhere it changes nothing."""
    from mamba3_perf.analysis import traffic
    from mamba3_perf.kernels.bwd_bwd import stage10_fewscratch, stage13_diagpost

    c = get_case(case_id)
    assert not stage10_fewscratch.reads_inputs(case_meta(c))
    if mode == 2 and not stage13_diagpost.moves_diagonal(case_meta(c)):
        gone = set()
    copies = {"QB_S", "KB_S", "PSIV_S", "DPHIO_S"}
    assert copies <= set(traffic.kernel_traffic("stage25_subchunk", c, samples=2).tensor)
    monkeypatch.setattr(stage25_subchunk, "READ_INPUTS", mode)
    rows = check_stage("stage25_subchunk", c)
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]
    assert set(traffic.kernel_traffic("stage25_subchunk", c, samples=2).tensor) & copies == copies - gone


def test_qk_inputs_only_where_the_aux_reads_no_qb_kb(case_meta):
    """Without the diagonal weight blocks the aux reads QB / KB itself: q / k alone from the inputs
    would leave it reading scratch that is not written."""
    from mamba3_perf.kernels.bwd_bwd import stage7_streamaux

    with pytest.raises(ValueError, match="diag_blocks"):
        stage7_streamaux.run_with({}, {}, case_meta("small-N256_P64_R4_C8"), low_precision=True, qk_inputs=True)

