"""stage8_mixprec's precision split, checked on the CPU: the Triton interpreter is made to round
the operands of every "tf32" dot to TF32 (10 mantissa bits, round to nearest even, as the
tensor cores take them), and split_precisions is made to choose what it chooses on CUDA.
"tf32x3" and "ieee" dots stay fp32 (tf32x3's error is fp32-level)."""
import pytest
import torch

from mamba3_perf.kernels import get_case, make_inputs
from mamba3_perf.kernels.bwd_bwd import common
from mamba3_perf.kernels.checking import check_stage


def _failed(case_id, states_dtype, stage="stage8_mixprec"):
    c = get_case(case_id)
    rows = check_stage(stage, c, inputs=make_inputs(c, states_dtype=states_dtype))
    return {r.gradient: f"{r.err:.2e} > {r.bound:.2e}" for r in rows if not r.passed}


@pytest.mark.parametrize("states_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("case_id", ["pw-1", "pw-2", "pw-5", "small-N64_P64_R4_C16", "small-N128_P64_R8_C8"])
def test_split_passes_the_golden_with_tf32_emulated(cuda_precisions, case_id, states_dtype):
    assert _failed(case_id, states_dtype) == {}


@pytest.mark.parametrize("case_id", ["pw-2", "small-N64_P64_R4_C16"])
def test_input_operands_keep_the_split(cuda_precisions, case_id):
    """stage10 feeds the same split dots from the 16-bit inputs instead of fp32 scratch."""
    assert _failed(case_id, torch.bfloat16, stage="stage10_fewscratch") == {}


def test_split_is_what_passes(cuda_precisions):
    """The emulation bites: with every dot of every kernel forced to one TF32 pass (the
    ``STAGE@tf32`` variant), the fp32-level outputs fail."""
    failed = _failed("small-N64_P64_R4_C16", torch.float32, stage="stage8_mixprec@tf32")
    assert {"DSSDA", "DFACTOR", "DDA_CS", "DANGLES"} <= set(failed), failed


@pytest.mark.parametrize("module, launcher", [("stage6_statepass", "launch_state_pass"),
                                              ("stage6_statepass", "launch_state_terms"),
                                              ("stage7_streamaux", "launch_aux")])
def test_each_kernels_fp32_level_dots_are_needed(cuda_precisions, monkeypatch, module, launcher):
    """Why the split keeps tf32x3 where it does: one TF32 pass for the dots of the state pass
    alone, of state_terms alone or of the streamed aux alone already fails DFACTOR (with
    DDA_CS_REV or DSSDA) on bf16 states, 20-40x over the bound (DFACTOR's fp32 reference error
    is ~2e-6)."""
    import importlib

    mod = importlib.import_module(f"mamba3_perf.kernels.bwd_bwd.{module}")
    launch = getattr(mod, launcher)

    def one_tf32_pass(*args, **kwargs):
        with common.forced_dot_precision("tf32"):
            return launch(*args, **kwargs)

    monkeypatch.setattr(mod, launcher, one_tf32_pass)
    failed = _failed("pw-1", torch.bfloat16, stage="stage12_pipeaux")
    assert "DFACTOR" in failed and len(failed) == 2, failed


def test_forced_precision_variant_is_timed_for_reference(cuda_precisions):
    """bench checks a ``@tf32`` variant like any stage, records it wrong, and still times it
    (it is there to show what the fp32-level dots cost), unlike a wrong ladder stage."""
    from mamba3_perf import bench

    t, a = bench.measure([get_case("pw-2")], ["stage10_fewscratch", "stage10_fewscratch@tf32"],
                         device="cpu", timing_kind="interpreter")
    t = t.set_index("variant")
    assert t.loc["stage10_fewscratch", "status"] == "ok"
    forced = t.loc["stage10_fewscratch@tf32"]
    assert forced["status"] == "wrong" and forced["reason"].endswith("timed for reference")
    assert forced["median_us"] > 0
    bad = a[(a["variant"] == "stage10_fewscratch@tf32") & ~a["passed"]]["gradient"]
    assert "DSSDA" in set(bad)


def test_forced_precision_is_scoped():
    assert common.dot_precision("cpu") == "ieee"
    with common.forced_dot_precision("tf32"):
        assert common.dot_precision("cpu") == "tf32"
        assert common.split_precisions({"q": torch.zeros(1), "states": torch.zeros(1)}, low=False) == \
            dict(PREC="tf32", PLO="tf32", PQ="tf32")
    assert common.dot_precision("cpu") == "ieee"
    with pytest.raises(ValueError, match="expected one of"):
        with common.forced_dot_precision("bf16"):
            pass


def test_split_choices():
    x = {"q": torch.zeros(1, dtype=torch.bfloat16), "states": torch.zeros(1, dtype=torch.bfloat16)}
    if not torch.cuda.is_available():
        assert common.split_precisions(x, low=True) == dict(PREC="ieee", PLO="ieee", PQ="ieee")
    x32 = dict(x, states=torch.zeros(1))
    with pytest.MonkeyPatch.context() as m:  # as on a CUDA device
        m.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda")))
        assert common.split_precisions(x, low=True) == dict(PREC="tf32x3", PLO="tf32", PQ="tf32")
        assert common.split_precisions(x32, low=True) == dict(PREC="tf32x3", PLO="tf32", PQ="tf32x3")
        assert common.split_precisions(x, low=False) == dict(PREC="tf32x3", PLO="tf32x3", PQ="tf32x3")
        fp32 = {"q": torch.zeros(1), "states": torch.zeros(1)}
        assert common.split_precisions(fp32, low=True) == dict(PREC="tf32x3", PLO="tf32x3", PQ="tf32x3")
