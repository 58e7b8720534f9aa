"""stage23_gluonterms: which shapes its Gluon state_terms takes, and that the kernel compiles
for the H200 (sm_90) on this machine within two programs' shared memory per SM (the stage
against the golden on a Hopper GPU: test_gluonaux.py, with stage24)."""
import pytest

from mamba3_perf.kernels import get_case, make_inputs
from mamba3_perf.kernels.bwd_bwd import stage23_gluonterms, terms_gluon

H200_SMEM = 228 * 1024  # shared memory per SM


@pytest.mark.parametrize("case_id,runs", [
    ("small-N32_P64_R4_C16", True), ("small-N128_P64_R4_C16", True), ("small-N128_P32_R4_C16", True),
    ("small-N128_P64_R8_C8", True), ("small-N128_P64_R1_C64", True),
    ("small-N16_P64_R4_C8", True), ("small-N256_P64_R4_C8", True),  # C*R = 32, run on 64 rows
    ("small-N64_P128_R4_C16", False), ("small-N128_P128_R4_C8", False),  # P = 128
])
def test_gluon_terms_shapes(case_meta, case_id, runs):
    assert terms_gluon.supported(case_meta(case_id)) is runs


def test_gluon_terms_only_on_hopper(case_meta):
    x = make_inputs(get_case("small-N64_P64_R4_C16"))
    assert not stage23_gluonterms.uses_gluon(x, case_meta("small-N64_P64_R4_C16"))  # CPU tensors


@pytest.mark.parametrize("shape", [(128, 64, 4, 16), (32, 64, 4, 16), (128, 32, 4, 16), (256, 64, 4, 8)])
def test_gluon_terms_compile_for_sm90(compile_stage, shape):
    k = compile_stage("stage23_gluonterms", *shape, "state_terms")["bwd_bwd_state_terms_gluon_kernel"]
    assert k["num_warps"] == 4
    assert 2 * k["shared"] <= H200_SMEM, k["shared"]
    wgmma = sorted({tuple(m["instr"]) for m in k["mma"] if m["version"] == 3})
    assert wgmma == sorted({(16, 16, 8), (16, shape[1], 8)}), wgmma  # dK_raw's 16 columns, dPsiV's P
