"""terms_gluon.PIPELINE: state_terms' N walk software-pipelined (the next step's operands staged
while this step's wgmma run). Compiled for the H200 (sm_90) on this machine: what it costs in shared
memory and registers per program, and that without it the kernel is what it was (its own tests and
test_transpose_layouts' cover that path); on a Hopper GPU only, against the golden through every
path of the kernel (rotation and finishing dK, chunk pairs, the plain fp32 k rows, one, two and
more steps)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mamba3_perf.kernels.bwd_bwd import terms_gluon
from mamba3_perf.kernels.bwd_bwd.common import is_hopper

HOPPER = torch.cuda.is_available() and is_hopper("cuda")
PIPE = ("terms_gluon.PIPELINE=1",)


def test_off_by_default():
    assert terms_gluon.PIPELINE is False


@pytest.mark.parametrize("shape,per_sm", [
    ((128, 64, 4, 16), 2),  # P = 64: a third TMA slot and a second operand set, still two programs per SM
    ((128, 32, 4, 16), 3),
    ((64, 128, 4, 16), 1),  # P = 128: one program per SM with or without
])
def test_pipelined_walk_fits_beside_its_occupancy(compile_stage, shape, per_sm):
    name = "bwd_bwd_state_terms_gluon_kernel"
    before = compile_stage("stage32_banks", *shape, "state_terms")[name]
    after = compile_stage("stage32_banks", *shape, "state_terms", knobs=PIPE)[name]
    assert after["keywords"]["PIPE"] and not before["keywords"]["PIPE"]
    assert after["shared"] > before["shared"]  # the third slot and the second operand set
    assert after["programs_per_sm_by_shared"] == per_sm
    assert after["mma"] == before["mma"]  # the same products
    # the pipelined walk issues step j + 3's copies into step j's slot: all three slots filled
    # before it (two were, and its wait for step 2 never ended on an H100); the default walk
    # issues step j + 1's at step j, one block ahead
    assert after["ring"] == {"barriers": 3, "filled": 3, "in_loop": 1}
    assert before["ring"] == {"barriers": 2, "filled": 1, "in_loop": 1}


@pytest.mark.parametrize("shape", [(128, 64, 4, 16), (64, 128, 4, 16)])
def test_pipelined_walk_writes_no_wgmma_operand_before_its_wait(shape):
    """The walk stages step j + 1 while step j's wgmma run, but forms their register A operands
    only after the wait (terms_gluon._step_a): compiled for sm_90 and disassembled, no write to a
    register-A wgmma's operand lies before its wait (mamba3_perf.analysis.sass.mma_register_hazards,
    which finds them in the walk as it was: tests/analysis/test_sass.py)."""
    root = Path(__file__).parents[2]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, str(root / "benchmarks" / "ptxas_stage.py"), "stage32_banks",
                          *map(str, shape), "--kernel", "state_terms", "--sass", "--knob", PIPE[0]],
                         capture_output=True, text=True, env=env, cwd=root, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "wgmma register operands: none written before their wait" in res.stdout, res.stdout[-3000:]


@pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")
@pytest.mark.parametrize("stage,case_id", [
    ("stage32_banks", "hop-N128"),  # rotation, dK finished, 8 steps
    ("stage32_banks", "hop-P128"),
    ("stage32_banks", "hop-N32-rankdout"),  # two steps: no copy issued in the loop
    ("stage32_banks", "hop-tail"),
    ("stage32_banks", "hop-C8"),  # chunk pairs
    ("stage32_banks", "hop-N16-C8-tail"),  # one step: prologue and last step only
    ("stage26_widep", "hop-N128"),  # the pre kernel's fp32 k rows, DKR stored
    ("stage26_widep", "hop-fp16-noD"),
])
def test_pipelined_walk_matches_golden_on_hopper(cuda_golden, stage, case_id, monkeypatch):
    monkeypatch.setattr(terms_gluon, "PIPELINE", True)
    cuda_golden(stage, case_id)


def test_stage23_passes_pipeline_to_the_gluon_state_terms(monkeypatch):
    """stage23_gluonterms.run_with's ``pipeline``: the launch keyword a stage's plan gives the
    Gluon state_terms (beside chunk_pairs and transpose_layouts), absent unless asked for."""
    from mamba3_perf.kernels.bwd_bwd import stage22_lkqblock, stage23_gluonterms

    seen = []
    monkeypatch.setattr(stage23_gluonterms, "uses_gluon", lambda x, meta: True)
    monkeypatch.setattr(stage22_lkqblock, "run_with", lambda x, out, meta, state_terms, **kw: seen.append(state_terms))
    stage23_gluonterms.run_with({}, {}, None, pipeline=True, transpose_layouts=True)
    stage23_gluonterms.run_with({}, {}, None)
    assert seen[0].keywords == {"transpose_layouts": True, "pipeline": True}
    assert seen[1] is terms_gluon.launch_state_terms
