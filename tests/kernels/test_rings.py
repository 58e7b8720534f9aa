"""aux_gluon.AUX_RING1 and terms_gluon.TERMS_RING: the Gluon aux's first N walk (k.q^T) and
state_terms' N walk with deeper TMA rings, their blocks issued two steps ahead instead of one.
Compiled for the H200 (sm_90) on this machine: the rings they build and what they cost in shared
memory; on a Hopper GPU only, against the golden through the walks' paths (rotation from the
16-bit inputs, the fp32 rows, chunk pairs, one step only)."""
import pytest
import torch

from mamba3_perf.kernels.bwd_bwd import aux_gluon, terms_gluon
from mamba3_perf.kernels.bwd_bwd.common import is_hopper

HOPPER = torch.cuda.is_available() and is_hopper("cuda")
RING3 = ("aux_gluon.AUX_RING1=3",)
NAME = "bwd_bwd_aux_gluon_kernel"
TERMS3 = ("terms_gluon.TERMS_RING=3",)
TERMS = "bwd_bwd_state_terms_gluon_kernel"


def test_two_slots_by_default():
    assert aux_gluon.AUX_RING1 == 2 and terms_gluon.TERMS_RING == 2


@pytest.mark.parametrize("shape,per_sm,grows", [
    ((128, 64, 4, 16), 2, True),  # one more slot of q / k blocks and their partners: still two programs per SM
    ((64, 128, 4, 16), 1, False),  # the first walk's buffers share memory the peak (later) does not use
])
def test_three_slots_fill_two_before_the_walk(compile_stage, shape, per_sm, grows):
    before = compile_stage("stage32_banks", *shape, "aux")[NAME]
    after = compile_stage("stage32_banks", *shape, "aux", knobs=RING3)[NAME]
    assert after["keywords"]["SL1"] == 3 and before["keywords"]["SL1"] == 2
    # the first walk's ring one barrier larger and two of its blocks issued before it (the second
    # walk's ring as it was: two barriers, one block ahead)
    assert after["ring"]["barriers"] == before["ring"]["barriers"] + 1
    assert after["ring"]["filled"] == before["ring"]["filled"] + 1
    assert after["ring"]["in_loop"] == before["ring"]["in_loop"]
    assert after["shared"] > before["shared"] if grows else after["shared"] == before["shared"]
    assert after["programs_per_sm_by_shared"] == before["programs_per_sm_by_shared"] == per_sm
    assert after["mma"] == before["mma"]



@pytest.mark.parametrize("shape,slots", [
    ((128, 64, 4, 16), 2),  # still two programs per SM (by shared memory)
    ((128, 32, 4, 16), 3),
    ((256, 64, 4, 8), 1),  # chunk pairs: 104 -> 124 KB, one program per SM where two fit
])
def test_terms_ring_of_three(compile_stage, shape, slots):
    before = compile_stage("stage32_banks", *shape, "state_terms")[TERMS]
    after = compile_stage("stage32_banks", *shape, "state_terms", knobs=TERMS3)[TERMS]
    assert after["keywords"]["RING"] == 3 and before["keywords"]["RING"] == 2
    assert before["ring"] == {"barriers": 2, "filled": 1, "in_loop": 1}
    assert after["ring"] == {"barriers": 3, "filled": 2, "in_loop": 1}
    assert after["programs_per_sm_by_shared"] == slots
    assert after["mma"] == before["mma"]


@pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")
@pytest.mark.parametrize("stage,case_id", [
    ("stage32_banks", "hop-N128"),  # rotation, dQ finished: four steps
    ("stage32_banks", "hop-P128"),
    ("stage32_banks", "hop-N32-rankdout"),  # one step: the prologue's block only
    ("stage32_banks", "hop-tail"),
    ("stage32_banks", "hop-P128-C8"),  # chunk pairs
    ("stage32_banks", "hop-N16-C8-tail"),  # state_terms' one step
    ("stage26_widep", "hop-N128"),  # the pre kernel's fp32 rows
    ("stage26_widep", "hop-fp16-noD"),
])
@pytest.mark.parametrize("ring", ["aux", "terms"])
def test_deeper_ring_matches_golden_on_hopper(cuda_golden, stage, case_id, ring, monkeypatch):
    if ring == "aux":
        monkeypatch.setattr(aux_gluon, "AUX_RING1", 3)
    else:
        monkeypatch.setattr(terms_gluon, "TERMS_RING", 3)
    cuda_golden(stage, case_id)
