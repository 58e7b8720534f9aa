"""stage32_banks: the Gluon kernels' transposed copies in layouts that take their ideal
shared-memory wavefronts. Its plan; both kernels compiled for the H200 (sm_90) on this machine,
every register -> shared store of theirs at its ideal wavefronts where stage31's (stage30's at C*R
= 64) are not, within the same shared memory; and (on a Hopper GPU only) the layouts through the other Gluon paths
(rotation, finishing dQ / dK, chunk pairs, two warpgroups) against the golden (stage32 itself:
test_gluonaux.py's Hopper test of every Gluon stage)."""
import pytest
import torch

from mamba3_perf.bench import prepare
from mamba3_perf.kernels import get_case
from mamba3_perf.kernels.bwd_bwd import aux_gluon, stage31_chunkpairs, stage32_banks, terms_gluon
from mamba3_perf.kernels.bwd_bwd.common import is_hopper

HOPPER = torch.cuda.is_available() and is_hopper("cuda")


@pytest.mark.parametrize("case_id", ["small-N128_P64_R4_C16", "small-N256_P64_R4_C8"])
def test_plan_is_stage31s_with_the_layouts(case_meta, case_id):
    case = get_case(case_id)
    x, meta = prepare(case, device="cpu"), case_meta(case)
    assert stage32_banks.plan(x, meta) == dict(stage31_chunkpairs.plan(x, meta), transpose_layouts=True)
    assert not aux_gluon.TRANSPOSE_LAYOUTS and not terms_gluon.TRANSPOSE_LAYOUTS  # the stages below keep theirs


def _stores(line):
    return [r for r in line["banks"] if r["kind"] in ("store", "alloc")]


@pytest.mark.parametrize("shape,kernels", [
    ((128, 64, 4, 16), ("aux_gluon", "state_terms_gluon")),
    ((64, 128, 4, 16), ("aux_gluon", "state_terms_gluon")),  # P = 128: the aux on the inputs (WIDE_P)
    ((128, 32, 4, 16), ("aux_gluon", "state_terms_gluon")),  # P = 32: the increments' rows padded to 64
    ((256, 64, 4, 8), ("state_terms_gluon",)),  # C*R = 32: the Triton aux there
])
def test_every_store_at_its_ideal_wavefronts(compile_stage, shape, kernels):
    for kernel in kernels:
        name = f"bwd_bwd_{kernel}_kernel"
        before = compile_stage("stage31_chunkpairs", *shape, kernel, banks=True)[name]
        after = compile_stage("stage32_banks", *shape, kernel, banks=True)[name]
        assert after["keywords"]["TL"] and not before["keywords"]["TL"]
        assert any(r["excess"] > 0 for r in _stores(before)), kernel  # what stage32 is for
        assert all(r["excess"] == 0 for r in _stores(after)), [r for r in _stores(after) if r["excess"]]
        assert len(_stores(after)) == len(_stores(before))  # the same copies, in other layouts
        assert after["shared"] == before["shared"] and after["mma"] == before["mma"]


@pytest.mark.parametrize("stage,knobs", [
    ("stage29_auxdq", ()),  # rotation and finishing dQ / dK in the kernels: the walk's tiles rotated in TW
    ("stage31_chunkpairs", ("aux_gluon.CHUNK_PAIRS=1",)),  # two chunks of 32 rows a program
    ("stage30_stepdesc", ("aux_gluon.AUX_WARPGROUPS=2",)),  # 8 warps
])
def test_layouts_compile_through_the_other_gluon_paths(compile_stage, stage, knobs):
    shape = (128, 64, 4, 8) if stage == "stage31_chunkpairs" else (128, 64, 4, 16)
    on = ("aux_gluon.TRANSPOSE_LAYOUTS=1", "terms_gluon.TRANSPOSE_LAYOUTS=1", *knobs)
    lines = compile_stage(stage, *shape, "gluon", knobs=on, banks=True)
    assert {"bwd_bwd_aux_gluon_kernel", "bwd_bwd_state_terms_gluon_kernel"} <= set(lines)
    for line in lines.values():
        assert line["keywords"]["TL"]
        assert all(r["excess"] == 0 for r in _stores(line)), [r for r in _stores(line) if r["excess"]]


@pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")
@pytest.mark.parametrize("stage,case_id,knob", [
    ("stage29_auxdq", "hop-N128", None), ("stage29_auxdq", "hop-P128", None),
    ("stage31_chunkpairs", "hop-C8", None), ("stage31_chunkpairs", "hop-P128-C8", None),
    ("stage30_stepdesc", "hop-P128", ("AUX_WARPGROUPS", 2)), ("stage30_stepdesc", "hop-fp16-noD", ("AUX_WARPGROUPS", 2)),
])
def test_layouts_through_the_other_gluon_paths_match_golden_on_hopper(cuda_golden, stage, case_id, knob, monkeypatch):
    monkeypatch.setattr(aux_gluon, "TRANSPOSE_LAYOUTS", True)
    monkeypatch.setattr(terms_gluon, "TRANSPOSE_LAYOUTS", True)
    if stage == "stage31_chunkpairs":
        monkeypatch.setattr(aux_gluon, "CHUNK_PAIRS", True)
    if knob:
        monkeypatch.setattr(aux_gluon, *knob)
    cuda_golden(stage, case_id)


NARROW = ("aux_gluon.NARROW_BOXES=1", "terms_gluon.NARROW_BOXES=1")


@pytest.mark.parametrize("shape", [(128, 64, 4, 16), (64, 128, 4, 16)])
def test_narrow_boxes_leave_no_copy_above_its_ideal(compile_stage, shape):
    """The NARROW_BOXES knobs (TMA boxes in narrower swizzles, copied as column slices): every
    register <-> shared copy of both kernels, loads too, at its ideal wavefronts, in the same
    shared memory; without them stage32 still has loads at 2x (what the knobs are for)."""
    before = compile_stage("stage32_banks", *shape, "gluon", banks=True)
    after = compile_stage("stage32_banks", *shape, "gluon", knobs=NARROW, banks=True)
    assert any(r["excess"] > 0 for line in before.values() for r in line["banks"])
    for name, line in after.items():
        assert all(r["excess"] == 0 for r in line["banks"]), [r for r in line["banks"] if r["excess"]]
        assert line["shared"] == before[name]["shared"]


@pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")
@pytest.mark.parametrize("case_id", ["hop-N128", "hop-P128", "hop-C8", "hop-fp16-noD"])
def test_narrow_boxes_match_golden_on_hopper(cuda_golden, case_id, monkeypatch):
    monkeypatch.setattr(aux_gluon, "NARROW_BOXES", True)
    monkeypatch.setattr(terms_gluon, "NARROW_BOXES", True)
    cuda_golden("stage32_banks", case_id)
