"""stage16_regcap's register caps: which official shapes get them, and that they reach the
launches (as Triton's maxnreg launch option) while every other launch option stays stage15's."""
import pytest

from mamba3_perf.kernels.bwd_bwd import common, stage7_streamaux, stage15_passwave, stage16_regcap


@pytest.mark.parametrize("case_id,pre,narrow", [
    ("small-N128_P64_R4_C16", 128, None), ("small-N128_P64_R1_C64", 128, None),
    ("small-N256_P64_R4_C8", 128, None), ("small-N64_P64_R4_C16", None, None),
    ("small-N128_P128_R4_C8", None, None), ("small-N16_P64_R4_C8", None, 168),
])
def test_caps_follow_the_measured_rule(case_meta, case_id, pre, narrow):
    assert stage16_regcap.caps(case_meta(case_id)) == dict(pre=pre, aux=narrow, terms=narrow)


def _launches(monkeypatch, stage_run, meta) -> dict:
    """The aux, pre and state_terms launch options a stage hands stage7's pipeline."""
    seen = {}
    monkeypatch.setattr(stage7_streamaux, "run_with", lambda x, out, meta, **kw: seen.update(kw))
    stage_run({}, {}, meta)
    return dict(aux=seen["aux_launch"], pre=seen["pre"].keywords["launch"] or common.CHUNK_LAUNCH,
                terms=seen["terms"]["launch"])


@pytest.mark.parametrize("case_id", ["small-N128_P64_R4_C16", "small-N16_P64_R4_C8", "small-N64_P64_R4_C16"])
def test_caps_reach_the_launches_and_nothing_else_changes(monkeypatch, case_meta, case_id):
    meta = case_meta(case_id)
    capped = _launches(monkeypatch, stage16_regcap.run, meta)
    base = _launches(monkeypatch, stage15_passwave.run, meta)
    for kernel, cap in stage16_regcap.caps(meta).items():
        assert capped[kernel].get("maxnreg") == cap, kernel
        assert {k: v for k, v in capped[kernel].items() if k != "maxnreg"} == base[kernel], kernel
        assert "maxnreg" not in base[kernel]
