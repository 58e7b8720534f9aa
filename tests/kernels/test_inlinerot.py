"""stage19_inlinerot: its rule, that it leaves no rotated rows in scratch, and that the rows its
readers form are the pre kernel's (the same outputs as stage18, bit for bit on the interpreter)."""
import pytest
import torch

from mamba3_perf.kernels import cases, get_case, make_inputs
from mamba3_perf.kernels.bwd_bwd import stage7_streamaux, stage10_fewscratch, stage19_inlinerot
from mamba3_perf.kernels.checking import check, oracles, run_stage

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("case_id,forms", [
    ("small-N128_P64_R4_C16", True), ("small-N32_P64_R4_C16", True), ("small-N128_P32_R4_C16", True),
    ("small-N128_P64_R1_C64", True), ("small-N16_P64_R4_C8", False), ("small-N256_P64_R4_C8", False),
    ("small-N64_P128_R4_C16", False), ("small-N128_P128_R4_C8", False),
])
def test_forms_the_rows_where_the_readers_load_the_inputs(case_meta, case_id, forms):
    assert stage19_inlinerot.forms_rows(case_meta(case_id)) is forms


@pytest.mark.parametrize("case_id", [c.id for s in ("pairwise", "tail") for c in cases(s)]
                         + ["small-N128_P64_R4_C16", "small-N128_P64_R2_C32"])
def test_same_outputs_as_stage18_without_rotated_scratch(monkeypatch, case_id):
    """On every pairwise and tail shape (GQA, the three dtypes, per-rank dout, a padded tail:
    the rule is widened to them) the formed rows give stage18's outputs exactly, pass the golden
    criterion, and no QR / KR buffer is allocated."""
    monkeypatch.setattr(stage10_fewscratch, "reads_inputs", lambda meta: True)
    allocated = []
    alloc = stage7_streamaux.alloc_scratch
    monkeypatch.setattr(stage7_streamaux, "alloc_scratch",
                        lambda meta, dev, names: allocated.append(tuple(names)) or alloc(meta, dev, names))
    c = get_case(case_id)
    x = make_inputs(c, device=DEVICE)
    base = run_stage("stage18_widechunk", x, c)
    out = run_stage("stage19_inlinerot", x, c)
    assert "QR" in allocated[0] and "KR" in allocated[0]
    assert not {"QR", "KR"} & set(allocated[1]) and {"COS", "SIN"} <= set(allocated[1])
    for name, t in base.items():
        if t is not None:
            assert torch.equal(out[name], t), name
    rows = check(out, *oracles(x, c))
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]


def test_rows_from_the_inputs_need_the_input_readers():
    c = get_case("small-N128_P64_R4_C16")
    x = make_inputs(c)
    meta = type("Meta", (), dict(c.to_dict(), nchunks=c.nchunks, RD=c.rd))
    with pytest.raises(ValueError, match="rot_in"):
        stage7_streamaux.run_with(x, {}, meta, low_precision=True, inputs=False, rot_in=True)
    with pytest.raises(ValueError, match="load the inputs"):
        stage19_inlinerot.launch_pre_trig(x, {}, meta, inputs=False)
