"""terms_gluon.STATES_GLOBAL and terms_gluon.MAXNREG: state_terms with its states blocks loaded
from global memory (no states slots in the TMA ring) and its registers capped, so that three
programs of one warpgroup fit an SM at P = 64 (four at P = 32) where two (three) do. Compiled for
the H200 (sm_90) on this machine: shared memory, the cap reaching the launch, the programs per SM;
where it is refused; on a Hopper GPU only, against the golden through the walk's paths."""
import pytest
import torch

from mamba3_perf.analysis.occupancy import occupancy
from mamba3_perf.kernels.bwd_bwd import terms_gluon
from mamba3_perf.kernels.bwd_bwd.common import is_hopper

HOPPER = torch.cuda.is_available() and is_hopper("cuda")
NAME = "bwd_bwd_state_terms_gluon_kernel"


def test_off_by_default():
    assert terms_gluon.STATES_GLOBAL is False and terms_gluon.MAXNREG is None


@pytest.mark.parametrize("shape,cap,per_sm,shared_before", [
    ((128, 64, 4, 16), 168, 3, 2),  # 77.8 -> 73.7 KB; 3 x 128 threads x 168 registers fill the register file
    ((128, 64, 2, 32), 168, 3, 2),
    ((128, 32, 4, 16), 128, 4, 4),  # four fit by shared memory already: 141 registers held it to three
])
def test_a_program_more_per_sm(compile_stage, shape, cap, per_sm, shared_before):
    before = compile_stage("stage32_banks", *shape, "state_terms")[NAME]
    after = compile_stage("stage32_banks", *shape, "state_terms",
                          knobs=("terms_gluon.STATES_GLOBAL=1", f"terms_gluon.MAXNREG={cap}"))[NAME]
    assert after["keywords"]["STG"] and not before["keywords"]["STG"]
    assert after["maxnreg"] == cap and not before.get("maxnreg")
    assert after["shared"] < before["shared"]  # the ring's states slots
    assert before["programs_per_sm_by_shared"] == shared_before
    assert after["programs_per_sm_by_shared"] >= per_sm
    # by the CUDA rules at the cap and the compiled shared memory (analysis.occupancy)
    assert occupancy(cap, 128, after["shared"]).blocks_per_sm >= per_sm
    assert after["ring"]["barriers"] == before["ring"]["barriers"]
    assert after["mma"] == before["mma"]


def test_refused_with_two_chunks_a_program_or_the_pipelined_walk(case_meta, compile_stage):
    """Where a program holds two chunks (their states taken in the staging) or the walk is
    pipelined, STG has no path: asked for, an error; the knob's default there leaves the walk as
    it is (so a sweep of the knob runs over every shape)."""
    with pytest.raises(ValueError, match="states_global"):
        terms_gluon.launch_state_terms({}, {}, {}, case_meta("small-N256_P64_R4_C8"), chunk_pairs=True,
                                       states_global=True)
    with pytest.raises(ValueError, match="pipeline=True"):
        terms_gluon.launch_state_terms({}, {}, {}, case_meta("small-N128_P64_R4_C16"), pipeline=True,
                                       states_global=True)
    paired = compile_stage("stage32_banks", 256, 64, 4, 8, "state_terms", knobs=("terms_gluon.STATES_GLOBAL=1",))[NAME]
    assert paired["keywords"]["CP"] == 2 and not paired["keywords"]["STG"]


@pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")
@pytest.mark.parametrize("stage,case_id", [
    ("stage32_banks", "hop-N128"),  # rotation, dK finished
    ("stage32_banks", "hop-P128"),
    ("stage32_banks", "hop-N32-rankdout"),
    ("stage32_banks", "hop-tail"),
    ("stage26_widep", "hop-N128"),  # the pre kernel's fp32 k rows
    ("stage26_widep", "hop-fp16-noD"),
])
def test_states_from_global_memory_match_golden_on_hopper(cuda_golden, stage, case_id, monkeypatch):
    monkeypatch.setattr(terms_gluon, "STATES_GLOBAL", True)
    monkeypatch.setattr(terms_gluon, "MAXNREG", 168)
    cuda_golden(stage, case_id)
