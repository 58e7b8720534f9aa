"""Every registered stage passes the golden criterion on the pairwise, tail and small official
sets (Triton interpreter on the CPU, real kernels on a GPU)."""
import functools
import os
import subprocess
import sys

import pytest
import torch

from mamba3_perf.kernels import cases, get_case, list_stages, make_inputs
from mamba3_perf.kernels.checking import check_stage, oracles, run_stage

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
STAGES = [s.name for s in list_stages()]
CASE_IDS = [c.id for s in ("pairwise", "tail", "official-small") for c in cases(s)]
# stages whose own kernels run on Hopper GPUs only (Gluon): elsewhere they run their parent's
# kernels, which the parent's rows here check (their GPU checks: test_gluonterms, test_gluonaux)
HOPPER_ONLY = {s.name for s in list_stages() if s.hopper_only}


@functools.lru_cache(maxsize=None)
def _prepared(case_id):
    c = get_case(case_id)
    x = make_inputs(c, device=DEVICE)
    return c, x, oracles(x, c)


@pytest.mark.parametrize("case_id", CASE_IDS)
@pytest.mark.parametrize("stage", STAGES)
def test_stage_matches_golden(stage, case_id):
    if DEVICE == "cpu" and stage in HOPPER_ONLY:
        pytest.skip(f"{stage} runs its parent's kernels on the CPU")
    c, x, gold = _prepared(case_id)
    rows = check_stage(stage, c, inputs=x, golden=gold)
    failed = [r for r in rows if not r.passed]
    assert not failed, "\n".join(f"{r.gradient}: err {r.err:.3e} > bound {r.bound:.3e} (ref {r.ref_err:.3e})" for r in failed)


@pytest.mark.parametrize("case_id", [c.id for s in ("pairwise", "tail") for c in cases(s)])
def test_input_operands_on_every_pairwise_shape(monkeypatch, case_id):
    """stage10 reads the inputs only where that measured faster (P <= 64, 32 <= N <= 128), which
    leaves out the pairwise set; here it reads them on every shape (G, reduce_o, has_d, dtypes),
    and a scratch it no longer writes would surface as NaN (conftest) or a golden miss."""
    from mamba3_perf.kernels.bwd_bwd import stage10_fewscratch

    monkeypatch.setattr(stage10_fewscratch, "reads_inputs", lambda meta: True)
    c, x, gold = _prepared(case_id)
    rows = check_stage("stage10_fewscratch", c, inputs=x, golden=gold)
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]


@pytest.mark.parametrize("stage", STAGES)
def test_scratch_is_written_before_read(stage):
    """conftest fills every torch.empty with NaN: scratch (and outputs) a stage reads or
    returns without writing would surface here as non-finite values."""
    c, x, _ = _prepared("pw-6")
    out = run_stage(stage, x, c)
    for name, t in out.items():
        if t is not None:
            assert torch.isfinite(t.float()).all(), f"{stage}: {name} has non-finite values"


def test_stage_outputs_have_api_dtypes():
    c, x, _ = _prepared("pw-1")
    out = run_stage("stage0", x, c)
    assert out["DQ"].dtype == out["DK"].dtype == out["DV"].dtype == torch.float16
    assert all(out[k].dtype == torch.float32 for k in ("DMIMO_V", "DANGLES", "DSSDA", "DD"))
    assert out["DQ"].shape == (c.B, c.S * c.R, c.H, c.N)


@pytest.mark.parametrize("N,P", [(96, 128), (192, 64), (80, 128)])
@pytest.mark.parametrize("stage", ["stage4_nblock", "prod", "stage6_statepass", "stage7_streamaux",
                                   "stage9_termsblock", "stage10_fewscratch", "stage11_steptrig",
                                   "stage15_passwave"])
def test_nblock_scan_any_n(stage, N, P):
    """N*P > 8192 with N not a power of two: the N-blocked scan masks the last block."""
    c = get_case("small-N128_P128_R4_C8").with_(N=N, P=P, id=f"odd-N{N}-P{P}")
    rows = check_stage(stage, c, device=DEVICE)
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]


@pytest.mark.parametrize("stage", ["stage7_streamaux", "stage8_mixprec", "stage10_fewscratch",
                                   "stage11_steptrig", "stage13_diagpost", "stage14_latesums",
                                   "stage15_passwave"])
@pytest.mark.parametrize("N,R,C", [(40, 4, 16), (24, 2, 8), (16, 4, 32)])
def test_streamed_aux_partial_blocks_and_large_folds(stage, N, R, C):
    """N not a multiple of the aux's 16-column block (a masked last block), and C*R = 128,
    beyond AUX_MAX_ROWS, where stage7/8 keep stage5's aux (and stage13 its diagonal terms)."""
    c = get_case("pw-1").with_(N=N, R=R, C=C, S=2 * C, id=f"aux-N{N}-R{R}-C{C}")
    rows = check_stage(stage, c, device=DEVICE)
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]


def test_registry_lists_the_ladder_in_order_with_tags():
    from mamba3_perf.kernels.registry import Tag, kernel_tags
    from mamba3_perf.analysis.ladder import LADDER
    assert STAGES == ["stage0", "stage1_pre", "stage2_aux", "stage3_rankfold", "stage4_nblock",
                      "stage5_rankloop", "prod", "stage6_statepass", "stage7_streamaux",
                      "stage8_mixprec", "stage9_termsblock", "stage10_fewscratch",
                      "stage11_steptrig", "stage12_pipeaux", "stage13_diagpost", "stage14_latesums",
                      "stage15_passwave", "stage16_regcap", "stage17_scanpass",
                      "stage18_widechunk", "stage19_splitdot", "stage20_auxinc", "stage21_halves",
                      "stage22_lkqblock", "stage23_gluonterms", "stage24_gluonaux",
                      "stage25_subchunk", "stage26_widep", "stage27_rotinline",
                      "stage28_termsdk", "stage29_auxdq", "stage30_stepdesc",
                      "stage31_chunkpairs", "stage32_banks", "stage33_chunksum", "stage34_poststeps",
                      "stage37_bf16split", "stage38_bf16aux", "stage39_auxregs", "stage40_termsring",
                      "stage41_streamregs", "stage42_precap", "stage43_finish",
                      "stage45_diagfold"] == list(LADDER)
    tags = kernel_tags()
    assert tags["bwd_bwd_fused_kernel"] == (Tag.FUSED, "stage0")
    assert tags["bwd_bwd_pre_kernel"][0] == Tag.PRE
    assert tags["bwd_bwd_pre_steptrig_kernel"] == (Tag.PRE, "stage11_steptrig")
    assert tags["bwd_bwd_aux_rankfold_kernel"][0] == Tag.AUX
    assert tags["bwd_bwd_scan_nblock_kernel"][0] == Tag.SCAN
    assert tags["bwd_bwd_post_kernel"] == (Tag.POST, "prod")
    assert tags["bwd_bwd_state_pass_kernel"] == (Tag.SCAN, "stage6_statepass")
    assert tags["bwd_bwd_state_terms_kernel"] == (Tag.POST, "stage6_statepass")
    assert tags["bwd_bwd_aux_streamed_kernel"] == (Tag.AUX, "stage7_streamaux")


def test_pipelined_aux_launch_rule():
    """stage12: 3 pipeline stages for the streamed aux where P <= 64, 2 at P = 128 (measured:
    records/h200-sweep-launch-d788887.json), always one warpgroup (triton#10629)."""
    from mamba3_perf.kernels.bwd_bwd.stage12_pipeaux import aux_launch

    assert aux_launch(get_case("N64_P64_R4_C16")) == dict(num_warps=4, num_stages=3)
    assert aux_launch(get_case("N128_P32_R4_C16"))["num_stages"] == 3
    assert aux_launch(get_case("N64_P128_R4_C16")) == dict(num_warps=4, num_stages=2)


def test_diagonal_and_late_sum_rules():
    """stage13 moves the diagonal terms only where N >= 32 and stage14 sums late only where
    P <= 64 and N >= 64, where each measured faster (records/h200-diagpost-latesums-153be00.json)."""
    from mamba3_perf.kernels.bwd_bwd.stage13_diagpost import moves_diagonal
    from mamba3_perf.kernels.bwd_bwd.stage14_latesums import sums_late

    assert not moves_diagonal(get_case("N16_P64_R4_C8"))
    assert moves_diagonal(get_case("N32_P64_R4_C16")) and moves_diagonal(get_case("N128_P128_R4_C8"))
    assert [sums_late(get_case(c)) for c in ("N16_P64_R4_C8", "N32_P64_R4_C16", "N64_P64_R4_C16",
                                             "N64_P128_R4_C16", "N256_P64_R4_C8")] == [False, False, True,
                                                                                    False, True]


@pytest.mark.parametrize("N,P", [(64, 32), (40, 16)])
def test_diagonal_terms_and_late_sums_forced_on_small_shapes(monkeypatch, N, P):
    """The rules leave the small test shapes on stage12's path; forced on, the post kernel's
    diagonal terms (from the inputs and from QB / KB scratch) and the late sums pass too."""
    from mamba3_perf.kernels.bwd_bwd import stage13_diagpost, stage14_latesums

    monkeypatch.setattr(stage13_diagpost, "moves_diagonal", lambda meta: True)
    monkeypatch.setattr(stage14_latesums, "sums_late", lambda meta: True)
    for case_id in ("pw-1", "pw-6"):
        c = get_case(case_id).with_(N=N, P=P, id=f"{case_id}-N{N}-P{P}")
        rows = check_stage("stage14_latesums", c, device=DEVICE)
        assert all(r.passed for r in rows), [r for r in rows if not r.passed]


def test_wave_pass_rule():
    """stage15's state pass only where stage6's takes more than one wave on the H200 and this
    one fills its SMs (records/h200-passwave-3465c15.json)."""
    from mamba3_perf.kernels.bwd_bwd.stage15_passwave import uses_wave

    on = {"N128_P64_R4_C16", "N128_P128_R4_C8", "N256_P64_R4_C8", "N128_P64_R8_C8", "N128_P64_R2_C32",
          "N128_P64_R1_C64", "regular-8x512x16x8"}
    off = {"N16_P64_R4_C8", "N32_P64_R4_C16", "N64_P64_R4_C16", "N64_P128_R4_C16", "N128_P32_R4_C16"}
    assert {c for c in on | off if uses_wave(get_case(c))} == on


@pytest.mark.parametrize("N,P", [(64, 32), (40, 16)])
def test_wave_pass_forced_on_small_shapes(monkeypatch, N, P):
    """The rule leaves the small test shapes on stage6's pass; forced on, stage15 passes."""
    from mamba3_perf.kernels.bwd_bwd import stage15_passwave

    monkeypatch.setattr(stage15_passwave, "uses_wave", lambda meta: True)
    for case_id in ("pw-1", "pw-6"):
        c = get_case(case_id).with_(N=N, P=P, id=f"{case_id}-N{N}-P{P}")
        rows = check_stage("stage15_passwave", c, device=DEVICE)
        assert all(r.passed for r in rows), [r for r in rows if not r.passed]


@pytest.mark.parametrize("case_id", ["small-N128_P128_R4_C8", "small-N256_P64_R4_C8", "small-N128_P32_R4_C16"])
def test_wave_pass_forced_on_official_small(monkeypatch, case_id):
    """The wave pass on the official shapes it is meant for (64-column blocks at N = 256, the
    scratch operands at P = 128), forced on at the small batch the interpreter runs."""
    from mamba3_perf.kernels.bwd_bwd import stage15_passwave

    monkeypatch.setattr(stage15_passwave, "uses_wave", lambda meta: True)
    c, x, gold = _prepared(case_id)
    rows = check_stage("stage15_passwave", c, inputs=x, golden=gold)
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]


def test_wave_pass_on_32_column_blocks_at_n256(monkeypatch):
    """stage15_passwave.WAVE_BNB=32 (the knob queued for the H200): twice the programs at N = 256,
    each on half the columns; the same golden criterion."""
    from mamba3_perf.kernels.bwd_bwd import stage15_passwave

    monkeypatch.setattr(stage15_passwave, "uses_wave", lambda meta: True)
    monkeypatch.setattr(stage15_passwave, "WAVE_BNB", 32)
    c, x, gold = _prepared("small-N256_P64_R4_C8")
    assert stage15_passwave.wave_block(c) == 32
    rows = check_stage("stage15_passwave", c, inputs=x, golden=gold)
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]


def test_the_ladder_imports_and_runs_its_rules_without_gluon():
    """A Triton without Gluon's Hopper modules (triton-ascend, older Tritons): every stage still
    registers, the Gluon stages fall back to their parents, and the rules of the stages past them
    (stage39's to stage45's) need no Gluon import. Checked in a subprocess where importing
    triton.experimental.gluon fails."""
    code = (
        "import sys, torch\n"
        "for m in ('triton.experimental.gluon', 'triton.experimental.gluon.language',\n"
        "          'triton.experimental.gluon.language.nvidia.hopper', 'triton.experimental.gluon.nvidia.hopper'):\n"
        "    sys.modules[m] = None\n"
        "from mamba3_perf.kernels import get_case, list_stages\n"
        "from mamba3_perf.kernels.bwd_bwd import (stage23_gluonterms, stage24_gluonaux, stage39_auxregs,\n"
        "                                         stage40_termsring, stage41_streamregs, stage42_precap,\n"
        "                                         stage43_finish, stage45_diagfold)\n"
        "from mamba3_perf.kernels.inputs import make_inputs\n"
        "c = get_case('small-N128_P128_R4_C8')\n"
        "print(list_stages()[-1].name, stage23_gluonterms.terms_gluon, stage24_gluonaux.aux_gluon,\n"
        "      stage40_termsring.changes(c), stage42_precap.changes(c))\n"
        "c = get_case('small-N256_P64_R4_C8')\n"
        "print(stage41_streamregs.changes(make_inputs(c, states_dtype=torch.bfloat16), c))\n"
        "c = get_case('small-N128_P64_R4_C16')\n"
        "x = make_inputs(c, states_dtype=torch.bfloat16)\n"
        "print(stage43_finish.changes(x, c), stage45_diagfold.changes(x, c))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["stage45_diagfold", "None", "None", "True", "True", "True", "False", "False"]
