"""stage25_subchunk: the pre and post kernels on sub-chunks compute what the whole-chunk launches
do, for every post kernel stage21 chooses (halves with DANGLES from registers, halves, stage11's)
and steps down to one per program; the launchers refuse a step count that does not tile the
chunk."""
import dataclasses

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


# the state pass each case below runs with QR_INLINE, and the rules forced for it
_PASSES = {
    "aux increments, scan": dict(splits_pass=True, forms_increments=True, uses_wave=False),
    "increment kernel, scan": dict(splits_pass=True, forms_increments=False, uses_wave=False),
    "wave pass": dict(splits_pass=False, forms_increments=False, uses_wave=True),
    "stage6 pass": dict(splits_pass=False, forms_increments=False, uses_wave=False),
}
_QR_READERS = {  # the module whose launch forms each pass's qr, beside the aux (stage7_streamaux)
    "aux increments, scan": None, "increment kernel, scan": "stage17_scanpass",
    "wave pass": "stage15_passwave", "stage6 pass": "stage6_statepass",
}


@pytest.mark.parametrize("case_id,pass_", [
    ("small-N256_P64_R4_C8", "wave pass"),
    ("small-N128_P64_R4_C16", "aux increments, scan"),
    ("edge-N24-rd12", "increment kernel, scan"),  # RD = N/2, G = 2, N not a power of two
    ("edge-N48", "stage6 pass"),                  # N/2 = 24: rotated columns across a block's end
    ("tail-40", "wave pass"),                     # a padded tail, per-rank dout, G = 2
    ("pw-3", "increment kernel, scan"),           # fp32, B = 2
    ("small-N64_P128_R4_C16", "wave pass"),       # P = 128: stage11's pre kernel stores the tables
    ("small-N128_P128_R4_C8", "stage6 pass"),
])
def test_qr_inline_matches_golden(monkeypatch, case_meta, case_id, pass_):
    """QR_INLINE: the pre kernel stores cos / sin tables and no QR (its view is empty, so a reader
    left on QR would read out of bounds or NaN), the aux and every state pass rotate q themselves,
    and the outputs meet the golden; the readers' launches took the inline keywords."""
    from mamba3_perf.kernels.bwd_bwd import common, stage6_statepass, stage7_streamaux, stage15_passwave, \
        stage17_scanpass, stage20_auxinc

    forced = _PASSES[pass_]
    monkeypatch.setattr(stage17_scanpass, "splits_pass", lambda meta: forced["splits_pass"])
    monkeypatch.setattr(stage20_auxinc, "forms_increments", lambda meta: forced["forms_increments"])
    monkeypatch.setattr(stage15_passwave, "uses_wave", lambda meta: forced["uses_wave"])
    monkeypatch.setattr(stage25_subchunk, "QR_INLINE", True)
    assert stage25_subchunk.inlines_qr(make_inputs(get_case(case_id)), case_meta(case_id))
    inline = []
    modules = dict(stage7_streamaux=stage7_streamaux, stage6_statepass=stage6_statepass,
                   stage15_passwave=stage15_passwave, stage17_scanpass=stage17_scanpass)
    for name, module in modules.items():
        def spy(s, meta, x=None, _name=name):
            assert s["QR"].numel() == 0 and "COS" in s
            kw = common.qr_inline_args(s, meta, x)
            inline.append((_name, kw["QR_INLINE"]))
            return kw
        monkeypatch.setattr(module, "qr_inline_args", spy)
    rows = check_stage("stage25_subchunk", get_case(case_id))
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]
    want = {"stage7_streamaux"} | ({_QR_READERS[pass_]} if _QR_READERS[pass_] else set())
    assert {n for n, on in inline if on} == want, inline


def test_qr_inline_applies_only_where_its_kernels_read_qr(monkeypatch, case_meta):
    """Off by default; where on, only with the streamed aux (C*R folds), not the Gluon aux."""
    x = make_inputs(get_case("small-N128_P64_R4_C16"))
    assert not stage25_subchunk.inlines_qr(x, case_meta("small-N128_P64_R4_C16"))
    monkeypatch.setattr(stage25_subchunk, "QR_INLINE", True)
    assert stage25_subchunk.inlines_qr(x, case_meta("small-N128_P64_R4_C16"))
    assert not stage25_subchunk.inlines_qr(x, dataclasses.replace(case_meta("small-N128_P64_R4_C16"), C=32))
    monkeypatch.setattr(stage25_subchunk.stage24_gluonaux, "uses_gluon_aux", lambda x, meta: True)
    assert not stage25_subchunk.inlines_qr(x, case_meta("small-N128_P64_R4_C16"))


def test_qr_inline_refuses_a_pre_kernel_or_aux_that_cannot(case_meta):
    """A pre kernel without ROT_TABLE (stage1's) would leave the readers' tables unwritten; another aux, or
    stage5's (C*R that do not fold), would read the QR that is not there."""
    from mamba3_perf.kernels.bwd_bwd import stage7_streamaux

    meta = case_meta("small-N128_P64_R4_C16")
    with pytest.raises(ValueError, match="rotary tables"):
        stage1_pre.launch_pre({}, {"COS": None}, meta)
    with pytest.raises(ValueError, match="another aux"):
        stage7_streamaux.run_with({}, {}, meta, low_precision=True, qr_inline=True, aux=object())
    with pytest.raises(ValueError, match="does not fold"):
        stage7_streamaux.run_with({}, {}, dataclasses.replace(meta, C=32), low_precision=True, qr_inline=True)
