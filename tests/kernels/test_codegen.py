"""What the kernels compile to for the H200 (sm_90), checked without a GPU: the stages are
captured and compiled by mamba3_perf.kernels.codegen in a subprocess (real triton.jit
functions need TRITON_INTERPRET unset)."""
import json
import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("stage", ["stage7_streamaux", "stage8_mixprec", "stage12_pipeaux"])
@pytest.mark.parametrize("shape", [(64, 64, 4, 16), (128, 64, 1, 64), (64, 128, 4, 16)])
def test_streamed_aux_has_no_n8_tf32_wgmma(compile_stage, stage, shape):
    """Triton 3.6+ reads past the shared operand of a TF32 wgmma with N = 8 (triton#10629):
    on the H200 the 8-warp streamed aux, whose [64, 16] results split into two warpgroups of
    8 columns, hit an illegal address at every C*R = 64 case. (The layouts are those of the
    Triton installed here; the H200 ran 3.6, whose layouts for this kernel are the same.)"""
    aux = compile_stage(stage, *shape, "aux_streamed")["bwd_bwd_aux_streamed_kernel"]
    wgmma = [m["instr"] for m in aux["mma"] if m["version"] == 3]
    assert wgmma, "expected Hopper wgmma dots in the aux"
    assert all(n >= 16 for _, n, _ in wgmma), wgmma
    assert aux["shared"] <= 227 * 1024


def test_pipelined_aux_buffers_its_loads(compile_stage):
    """stage12 launches the same aux kernel with 3 pipeline stages at P = 64 and 2 at P = 128,
    within the H200's 227 KB of shared memory. At P = 64 the next N blocks' loads get buffers of
    their own (more shared memory than stage11's unpipelined aux); at P = 128 the [C*R, 128]
    dot operands' buffers already set the kernel's peak (98 KB with Triton 3.6 and 3.9 alike)."""
    for shape, stages in (((64, 64, 4, 16), 3), ((64, 128, 4, 16), 2)):
        base = compile_stage("stage11_steptrig", *shape, "aux_streamed")["bwd_bwd_aux_streamed_kernel"]
        piped = compile_stage("stage12_pipeaux", *shape, "aux_streamed")["bwd_bwd_aux_streamed_kernel"]
        assert (base["num_stages"], piped["num_stages"]) == (1, stages)
        assert base["shared"] <= piped["shared"] <= 227 * 1024, (shape, base["shared"], piped["shared"])
        if stages == 3:
            assert piped["shared"] > base["shared"]


@pytest.mark.parametrize("shape", [(64, 64, 4, 16), (64, 128, 4, 16)])
def test_narrow_state_terms_keep_wgmma_n16(compile_stage, shape):
    """stage9's state_terms on one warpgroup with 16-row N blocks: its [C*R, 16] dK products
    stay whole on that warpgroup (N = 16), and it fits the H200's shared memory."""
    terms = compile_stage("stage9_termsblock", *shape, "state_terms")["bwd_bwd_state_terms_kernel"]
    assert terms["num_warps"] == 4
    wgmma = [m["instr"] for m in terms["mma"] if m["version"] == 3]
    assert wgmma and all(n >= 16 for _, n, _ in wgmma), wgmma
    assert terms["shared"] <= 227 * 1024


def _warm(cache, case_id, stages):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_CACHE_DIR": str(cache)}
    res = subprocess.run([sys.executable, "-m", "mamba3_perf.kernels.codegen", "warm", case_id, stages],
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def test_warm_fills_the_cache_with_every_kernel_and_its_keys_are_stable(tmp_path):
    """`codegen warm` compiles each launch through the JIT's warmup path into TRITON_CACHE_DIR;
    a second process computes the same keys and finds every binary there (what a GPU process
    with the same Python and Triton does with the carried cache)."""
    log = _warm(tmp_path, "pw-1", "stage9_termsblock")
    groups = {p.name for p in tmp_path.glob("*/__grp__*.json")}
    names = {"bwd_bwd_pre_kernel", "bwd_bwd_aux_streamed_kernel", "bwd_bwd_state_pass_kernel",
             "bwd_bwd_state_terms_kernel", "bwd_bwd_chunk_sum_kernel", "bwd_bwd_post_kernel"}
    assert groups == {f"__grp__{n}.json" for n in names}, (groups, log)
    assert all(list(tmp_path.glob(f"*/{n}.cubin")) for n in names)
    before = sorted(p.name for p in tmp_path.iterdir())
    _warm(tmp_path, "pw-1", "stage9_termsblock")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_packed_cache_is_found_where_it_is_unpacked(tmp_path):
    """`codegen pack` keeps each kernel's metadata and binary, points the group files at the
    unpack path, and a process using the unpacked cache compiles nothing new."""
    import tarfile

    _warm(tmp_path / "tc", "pw-1", "prod")
    at = tmp_path / "unpacked"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-m", "mamba3_perf.kernels.codegen", "pack", str(tmp_path / "tc"),
                          str(tmp_path / "tc.tar.xz"), "--at", str(at)], capture_output=True, text=True, env=env)
    assert res.returncode == 0 and res.stdout.startswith("4 kernels"), res.stderr[-2000:]
    at.mkdir()
    with tarfile.open(tmp_path / "tc.tar.xz") as t:
        t.extractall(at, filter="data")
    for grp in at.glob("*/__grp__*.json"):
        paths = json.loads(grp.read_text())["child_paths"]
        assert sorted(p.rsplit(".", 1)[1] for p in paths) == ["cubin", "json"], paths
        assert all(p.startswith(str(at)) and os.path.isfile(p) for p in paths.values())
    before = sorted(p.name for p in at.iterdir())
    _warm(at, "pw-1", "prod")
    assert sorted(p.name for p in at.iterdir()) == before
    # a recompile would have rewritten the groups with the IR files again
    assert not list(at.glob("*/*.ttir"))
    assert all(len(json.loads(g.read_text())["child_paths"]) == 2 for g in at.glob("*/__grp__*.json"))


@pytest.mark.parametrize("knob,why", [("nomodule.X=1", "knob 'nomodule.X=1'"),
                                      ("aux_gluon.WIDE_P=0,1", "one value here")])
def test_codegen_refuses_a_bad_knob(knob, why, capsys):
    from mamba3_perf.kernels import codegen

    with pytest.raises(SystemExit) as e:
        codegen.main(["compile", "stage0", "16", "16", "1", "16", "--knob", knob])
    assert e.value.code == 2 and why in capsys.readouterr().err


def test_tma_ring_counts_the_blocks_issued_before_the_first_loop():
    from mamba3_perf.kernels.codegen import tma_ring

    ttgir = "\n".join([
        "ttng.init_barrier %0", "ttng.init_barrier %1", "ttng.barrier_expect %0",
        "scf.for %j = ... {", "  ttng.wait_barrier %1", "  ttng.barrier_expect %1", "}",
    ])
    assert tma_ring(ttgir) == {"barriers": 2, "filled": 1, "in_loop": 1}
    assert tma_ring("ttng.init_barrier %0\nttng.barrier_expect %0") == {"barriers": 1, "filled": 1, "in_loop": 0}
