"""kernels.knobs: MODULE.ATTR=v,... parsed against the kernel modules, set and restored."""
import pytest

from mamba3_perf.kernels.bwd_bwd import stage16_regcap, stage25_subchunk
from mamba3_perf.kernels.knobs import knobs_set, parse_knobs, single_knobs


def test_knobs_parse_set_and_restore_even_where_a_combination_fails():
    knobs = parse_knobs(["stage25_subchunk.POST_STEPS=8,none", "stage16_regcap.PRE_CAP=128"])
    assert [(m, a, v) for m, a, v in knobs] == [(stage25_subchunk, "POST_STEPS", [8, None]),
                                               (stage16_regcap, "PRE_CAP", [128])]
    cap = stage16_regcap.PRE_CAP
    with pytest.raises(RuntimeError):
        with knobs_set(knobs, (4, None)):
            assert stage25_subchunk.POST_STEPS == 4 and stage16_regcap.PRE_CAP is None
            raise RuntimeError("does not launch")
    assert stage25_subchunk.POST_STEPS is None and stage16_regcap.PRE_CAP == cap


@pytest.mark.parametrize("bad", ["stage25_subchunk.NOPE=1", "nomodule.X=1", "stage25_subchunk.POST_STEPS=eight",
                                 "STEPS=1", "stage25_subchunk.POST_STEPS="])
def test_bad_knobs_say_which_and_why(bad):
    with pytest.raises(ValueError, match=f"knob '{bad}'"):
        parse_knobs([bad])


def test_single_knobs_take_one_value_each_and_restore():
    """A compile's knobs (codegen compile, ptxas_stage.py): one value each, set inside, restored."""
    with single_knobs(["stage25_subchunk.PRE_HEADS_INNER=1", "stage25_subchunk.POST_STEPS=none"]):
        assert stage25_subchunk.PRE_HEADS_INNER == 1 and stage25_subchunk.POST_STEPS is None
    assert stage25_subchunk.PRE_HEADS_INNER is False
    with pytest.raises(ValueError, match="one value"):
        single_knobs(["stage25_subchunk.PRE_HEADS_INNER=0,1"])
