"""stage33_statewalk: the scan and state_terms as one Gluon walk over the chunks. Its plan (stage32's
off Hopper); the group rule; the finish kernel's sums on the interpreter against torch; the walk
compiled for the H200 (sm_90) here; and on a Hopper GPU the stage against the golden and against
stage32's outputs."""
import pytest
import torch

from mamba3_perf.bench import prepare
from mamba3_perf.kernels import get_case
from mamba3_perf.kernels.bwd_bwd import stage32_banks, stage33_statewalk, walk_gluon
from mamba3_perf.kernels.bwd_bwd.common import alloc_scratch, is_hopper
from mamba3_perf.kernels.checking import check_stage, run_stage

HOPPER = torch.cuda.is_available() and is_hopper("cuda")


@pytest.mark.parametrize("case_id", ["small-N128_P64_R4_C16", "small-N256_P64_R4_C8"])
def test_plan_is_stage32s_off_hopper(case_meta, case_id):
    case = get_case(case_id)
    x, meta = prepare(case, device="cpu"), case_meta(case)
    assert not stage33_statewalk.walks(x, meta, stage32_banks.plan(x, meta))
    assert stage33_statewalk.plan(x, meta) == stage32_banks.plan(x, meta)


@pytest.mark.parametrize("case_id,groups,supported", [
    ("N128_P64_R4_C16", 4, True),  # 8 blocks of 16 rows: 2 a program, B*H*4 = 256 programs
    ("N32_P64_R4_C16", 2, True),  # 2 blocks: one a program
    ("N64_P128_R4_C16", 4, True),
    ("N128_P64_R8_C8", 4, True),  # C*R = 64
    ("N256_P64_R4_C8", 4, False),  # C*R = 32: state_terms runs chunk pairs there
    ("N16_P64_R4_C8", 1, False),
])
def test_groups_and_shapes(case_meta, case_id, groups, supported):
    meta = case_meta(get_case(case_id))
    assert walk_gluon.groups(meta) == groups
    assert walk_gluon.supported(meta) == supported
    assert meta.N % (walk_gluon.BNB * walk_gluon.groups(meta)) == 0


@pytest.mark.parametrize("case_id", ["small-N128_P64_R4_C16", "small-N64_P128_R4_C16", "tail-50"])
def test_finish_sums_the_group_parts(case_meta, case_id):
    """The finish kernel (interpreter): DV rows, each chunk's DMIMO_V part, DDA_CS_REV, DFACTOR and
    DDA from the aux's dPsiV and random group parts, against the same sums in torch."""
    case = get_case(case_id)
    meta = case_meta(case)
    x = prepare(case, device="cpu")
    B, H, S, C, R, P, nc = meta.B, meta.H, meta.S, meta.C, meta.R, meta.P, meta.nchunks
    gen = torch.Generator().manual_seed(0)
    s = alloc_scratch(meta, "cpu", ("DPSIV", "DMVP"))
    s["DPSIV"].copy_(torch.randn(s["DPSIV"].shape, generator=gen))
    ng = 3
    parts = walk_gluon.alloc_parts(meta, ng, "cpu")
    for t in parts.values():
        t.copy_(torch.randn(t.shape, generator=gen))
    out = {"DV": torch.empty(B, S, H, P, dtype=torch.float32), "DDA": torch.empty(B, H, S),
           "DDA_CS_REV": torch.empty(B, H, S), "DFACTOR": torch.empty(B, H, S)}
    v = torch.cat([x["v"], torch.zeros(B, S - x["v"].shape[1], H, P, dtype=x["v"].dtype)], 1)  # padded as the stages run
    stage33_statewalk.launch_walk_finish(dict(x, v=v), s, out, meta, parts)
    v = v.float()

    dpsiv = s["DPSIV"].reshape(B, H, nc, C, R, P)
    mv = x["mimo_v"].float()  # [H, R, P]
    vh = v.permute(0, 2, 1, 3).reshape(B, H, nc, C, 1, P)
    dv = (dpsiv * mv[None, :, None, None]).sum(-2) + parts["DVP"].sum(0).reshape(B, H, nc, C, P)
    torch.testing.assert_close(out["DV"], dv.reshape(B, H, S, P).permute(0, 2, 1, 3), rtol=1e-5, atol=1e-5)
    dmv = (dpsiv * vh).sum(3) + parts["DMVW"].sum(0).reshape(B, H, nc, R, P)
    torch.testing.assert_close(s["DMVP"], dmv, rtol=1e-5, atol=1e-5)
    for name, part in (("DDA_CS_REV", "DREVP"), ("DFACTOR", "DFACP")):
        torch.testing.assert_close(out[name], parts[part].sum(0).reshape(B, H, S), rtol=1e-5, atol=1e-5)
    dda = parts["DDAP"].sum(0).reshape(B, H, nc, 1).expand(B, H, nc, C).reshape(B, H, S)
    torch.testing.assert_close(out["DDA"], dda, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(128, 64, 4, 16), (64, 128, 4, 16), (128, 32, 4, 16), (128, 64, 1, 64)])
def test_walk_compiles_for_sm90_without_scan_or_state_terms(compile_stage, shape):
    lines = compile_stage("stage33_statewalk", *shape, "")
    assert "bwd_bwd_state_walk_gluon_kernel" in lines and "bwd_bwd_walk_finish_kernel" in lines
    assert "bwd_bwd_pass_scan_kernel" not in lines and "bwd_bwd_state_terms_gluon_kernel" not in lines
    walk = lines["bwd_bwd_state_walk_gluon_kernel"]
    assert walk["programs_per_sm_by_shared"] >= (1 if shape[1] == 128 else 2)
    assert walk["keywords"]["TL"] and walk["keywords"]["NG"] == 4  # N / 16 blocks, 4 groups at N = 64, 128


@pytest.mark.parametrize("shape", [(256, 64, 4, 8), (16, 64, 4, 8)])
def test_stage32s_kernels_where_the_walk_does_not_apply(compile_stage, shape):
    lines = compile_stage("stage33_statewalk", *shape, "")
    assert "bwd_bwd_state_walk_gluon_kernel" not in lines
    assert set(lines) == set(compile_stage("stage32_banks", *shape, ""))


@pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")
@pytest.mark.parametrize("case_id", ["hop-N64", "hop-N128", "hop-N32-rankdout", "hop-fp16-noD", "hop-R2-C32",
                                     "hop-R8-C8", "hop-R1-C64", "hop-P32", "hop-tail", "hop-P128"])
def test_statewalk_matches_golden_and_stage32_on_hopper(case_meta, case_id):
    case = get_case(case_id)
    x = prepare(case, device="cuda")
    meta = case_meta(case)
    assert stage33_statewalk.walks(x, meta, stage32_banks.plan(x, meta))
    rows = check_stage("stage33_statewalk", case, device="cuda", inputs=x)
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]
    got, want = run_stage("stage33_statewalk", x, case), run_stage("stage32_banks", x, case)
    for name, w in want.items():
        if w is not None:
            torch.testing.assert_close(got[name].float(), w.float(), rtol=2e-3, atol=2e-3 * w.float().abs().max().item())
