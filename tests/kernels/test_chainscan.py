"""stage36_chainscan: the Gluon aux carries the dstates scan across its programs. Compiled for
sm_90, where the Gluon aux runs the stage launches stage34's kernels but the scan, the aux with
CHAIN and the chain's three synchronizing instructions (the ticket, the flag's acquiring poll, its
releasing set), each once in the PTX; elsewhere its launches are stage34's; on a Hopper GPU, the
golden (CP = 1 and 2, P = 32 / 64 / 128, a tail, fp16 without D)."""
import pytest
import torch

from mamba3_perf.kernels.bwd_bwd import stage36_chainscan
from mamba3_perf.kernels.bwd_bwd.common import is_hopper

HOPPER = torch.cuda.is_available() and is_hopper("cuda")
CHAIN_SYNC = {"atom.global.gpu.relaxed.add.u32": 1, "ld.global.gpu.acquire.b32": 1,
              "atom.global.gpu.release.exch.b32": 1}


def _strip(lines):
    return {k: {f: v for f, v in line.items() if f != "seconds"} for k, line in lines.items()}


@pytest.mark.parametrize("shape", [(128, 64, 4, 16), (128, 128, 4, 8), (128, 32, 4, 16)])
def test_the_aux_chains_the_scan_and_the_scan_is_not_launched(compile_stage, shape):
    mine = _strip(compile_stage("stage36_chainscan", *shape, ""))
    base = _strip(compile_stage("stage34_poststeps", *shape, ""))
    assert "bwd_bwd_pass_scan_kernel" in base
    assert mine.keys() == base.keys() - {"bwd_bwd_pass_scan_kernel"}
    for name, line in mine.items():
        if name != "bwd_bwd_aux_gluon_kernel":
            assert line == base[name], name
            continue
        assert line["keywords"].pop("CHAIN") == stage36_chainscan.STEPS_PER_FLAG > 0
        assert base[name]["keywords"].pop("CHAIN") == 0
        assert line["sync"] == CHAIN_SYNC and base[name]["sync"] == {}
        assert {**line, "sync": {}, "shared": 0} == {**base[name], "shared": 0}


def test_without_the_gluon_aux_the_stage_is_stage34s(compile_stage):
    """N256_P64_R4_C8 runs the streamed Triton aux and the state pass: nothing to chain."""
    assert _strip(compile_stage("stage36_chainscan", 256, 64, 4, 8, "")) == _strip(
        compile_stage("stage34_poststeps", 256, 64, 4, 8, ""))


@pytest.mark.skipif(not HOPPER, reason="the Gluon aux: Hopper (sm_90) only")
@pytest.mark.parametrize("case_id", ["hop-N128", "hop-P128-C8", "hop-P32", "hop-R8-C8", "hop-R1-C64", "hop-tail",
                                     "hop-fp16-noD", "hop-P128"])
def test_chainscan_matches_golden_on_hopper(cuda_golden, case_id):
    cuda_golden("stage36_chainscan", case_id)
