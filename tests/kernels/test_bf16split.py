"""stage37_bf16split: common.fdot's three bf16 passes, checked on the CPU with CUDA's bf16 dots
emulated (conftest.cuda_precisions), and where the split precision is chosen. The device runs
check the stage on the GPU (records/h100-bf16split-*)."""
import pytest
import torch
import triton
import triton.language as tl

from mamba3_perf.analysis.occupancy import occupancy
from mamba3_perf.bench import prepare
from mamba3_perf.kernels import get_case, make_inputs
from mamba3_perf.kernels.bwd_bwd import common, stage37_bf16split
from mamba3_perf.kernels.checking import check_stage


@triton.jit
def _split_dot_kernel(A, B, O, HI, LO, M: tl.constexpr, PREC: tl.constexpr):
    i = tl.arange(0, M)
    a = tl.load(A + i[:, None] * M + i[None, :])
    b = tl.load(B + i[:, None] * M + i[None, :])
    hi, lo = common.bf16_split(a)
    tl.store(HI + i[:, None] * M + i[None, :], hi.to(tl.float32))
    tl.store(LO + i[:, None] * M + i[None, :], lo.to(tl.float32))
    tl.store(O + i[:, None] * M + i[None, :], common.fdot(a, b, PREC))


def _split_dot(a, b, prec):
    o, hi, lo = (torch.empty_like(a) for _ in range(3))
    _split_dot_kernel[(1,)](a, b, o, hi, lo, M=a.shape[0], PREC=prec)
    return o, hi, lo


def test_bf16_split_keeps_16_bits_and_the_passes_sum_to_the_product(cuda_precisions):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(32, 32, generator=g), torch.randn(32, 32, generator=g)
    o, hi, lo = _split_dot(a, b, common.SPLIT_BF16X3)
    assert torch.equal(hi, a.bfloat16().float())  # to nearest even
    assert torch.equal(lo, (a - hi).bfloat16().float())
    assert ((a - hi - lo).abs() <= a.abs() * 2.0 ** -16).all()
    exact = a.double() @ b.double()
    err = ((o.double() - exact).norm() / exact.norm()).item()
    one_pass = ((a.bfloat16().double() @ b.bfloat16().double() - exact).norm() / exact.norm()).item()
    assert err < 2.0 ** -14 and one_pass > 2.0 ** -10  # three passes: ~16 bits; one: ~8


def test_split_precision_only_in_its_scope_and_only_for_the_fp32_level_dots():
    assert common.dot_precision("cuda") == "tf32x3"
    with common.split_bf16x3():
        assert common.dot_precision("cuda") == common.SPLIT_BF16X3
        assert common.dot_precision("cuda", aux=True) == common.SPLIT_BF16X3
        with common.split_tf32x3(aux=False):  # stage19's scope inside stage37's
            assert common.dot_precision("cuda", aux=True) == common.SPLIT_BF16X3
        assert common.dot_precision("cuda", low=True) == "tf32"
        assert common.dot_precision("cpu") == "ieee"
        with common.forced_dot_precision("tf32"):
            assert common.dot_precision("cuda") == "tf32"
    assert common.dot_precision("cuda") == "tf32x3"


@pytest.mark.parametrize("case_id", ["small-N16_P64_R4_C8", "small-N256_P64_R4_C8", "small-N128_P128_R4_C8",
                                     "pw-1", "pw-2"])
def test_stage_passes_the_golden_with_bf16_emulated(cuda_precisions, case_id):
    """The C*R = 32 shapes, where stage34 runs the Triton aux and wave pass, and fp16 / bf16
    pairwise cases (bf16 cached states: the benchmarks' inputs)."""
    c = get_case(case_id)
    rows = check_stage("stage37_bf16split", c, inputs=prepare(c, device="cpu"))
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]


def test_fp32_cached_states_keep_tf32x3(cuda_precisions):
    """The rule's reason: with fp32 cached states DANGLES' bound is the criterion's floor, which
    bf16x3 misses (pw-1 forced to bf16x3 fails); the stage keeps tf32x3 there and passes."""
    c = get_case("pw-1")
    x = make_inputs(c, states_dtype=torch.float32)
    assert not stage37_bf16split.splits_bf16(x)
    rows = check_stage("stage37_bf16split", c, inputs=x)
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]
    with common.split_bf16x3():
        forced = check_stage("stage34_poststeps", c, inputs=x)
    assert "DANGLES" in {r.gradient for r in forced if not r.passed}


_split = common.bf16_split


@triton.jit
def _hi_only(x):
    hi, lo = _split(x)
    return hi, (lo.to(tl.float32) * 0.0).to(tl.bfloat16)


def test_dropping_the_low_passes_fails(cuda_precisions, monkeypatch):
    """The check above can fail: with lo zeroed (one bf16 pass) the fp32-level gradients miss."""
    monkeypatch.setattr(common, "bf16_split", _hi_only)
    c = get_case("small-N16_P64_R4_C8")
    rows = check_stage("stage37_bf16split", c, inputs=make_inputs(c, states_dtype=torch.bfloat16))
    assert {"DSSDA", "DFACTOR"} <= {r.gradient for r in rows if not r.passed}


def test_the_interpreter_runs_stage34s_arithmetic(same_outputs):
    """Without the emulation (the interpreter's own dots): "ieee" everywhere, the same outputs as
    stage34 bit for bit."""
    same_outputs("stage37_bf16split", "stage34_poststeps", "small-N16_P64_R4_C8")


def test_every_split_kernel_takes_bf16_parts_and_the_others_are_stage34s(compile_stage):
    """C*R = 64 (N128_P64_R4_C16's N, P, R, C): the Gluon state_terms and (with its knob) the aux
    compile with bf16 parts (BF16, 16-bit A operands, K = 16 wgmma), the Triton kernels without
    fp32-level dots to stage34's launches; at C*R = 32 the streamed aux takes the bf16 split."""
    mine = compile_stage("stage37_bf16split", 128, 64, 4, 16, "", knobs=("aux_gluon.BF16=1",))
    theirs = compile_stage("stage34_poststeps", 128, 64, 4, 16, "")
    assert mine.keys() == theirs.keys()
    gluon = {k for k in mine if "gluon" in k}
    assert gluon == {"bwd_bwd_aux_gluon_kernel", "bwd_bwd_state_terms_gluon_kernel"}
    for k in gluon:
        assert (mine[k]["keywords"]["BF16"], mine[k]["keywords"]["KW"], mine[k]["keywords"]["IK"]) == (True, 2, 16)
        assert theirs[k]["keywords"]["BF16"] is False
        assert {m["instr"][2] for m in mine[k]["mma"]} == {16} and {m["instr"][2] for m in theirs[k]["mma"]} == {8}
        assert mine[k]["shared"] < theirs[k]["shared"]
    assert {k: v for k, v in mine.items() if k not in gluon} == {k: v for k, v in theirs.items() if k not in gluon}
    # the aux's bf16 parts are its knob's (aux_gluon.BF16: on since an H200 checked them)
    plain = compile_stage("stage37_bf16split", 128, 64, 4, 16, "aux_gluon")
    assert [line["keywords"]["BF16"] for line in plain.values()] == [True]
    off = compile_stage("stage37_bf16split", 128, 64, 4, 16, "aux_gluon", knobs=("aux_gluon.BF16=0",))
    assert [line["keywords"]["BF16"] for line in off.values()] == [False]
    aux = compile_stage("stage37_bf16split", 16, 64, 4, 8, "aux_streamed")
    assert [line["keywords"]["PREC"] for line in aux.values()] == [common.SPLIT_BF16X3]


def test_stage38_runs_the_gluon_aux_in_pairs_on_bf16_parts_with_one_states_slot_at_p128(compile_stage):
    """N128_P128_R4_C8 (C*R = 32): stage38's Gluon aux takes two chunks a program with bf16 parts (the
    increments' buffers in the 64-byte swizzle), the states from a ring of one slot, two programs
    per SM; stage37 keeps TF32 parts there, one program per SM. The other kernels are the same."""
    mine = compile_stage("stage38_bf16aux", 128, 128, 4, 8, "")
    theirs = compile_stage("stage37_bf16split", 128, 128, 4, 8, "")
    aux, tf32 = mine["bwd_bwd_aux_gluon_kernel"], theirs["bwd_bwd_aux_gluon_kernel"]
    assert (aux["keywords"]["CP"], aux["keywords"]["BF16"], aux["keywords"]["KW"], aux["keywords"]["IK"]) == (2, True, 2, 16)
    assert (aux["keywords"]["STB"], aux["keywords"]["ST1"], tf32["keywords"]["BF16"]) == (True, True, False)
    assert (aux["programs_per_sm_by_shared"], tf32["programs_per_sm_by_shared"]) == (2, 1)
    assert {k: v for k, v in mine.items() if "aux" not in k} == {k: v for k, v in theirs.items() if "aux" not in k}


@pytest.mark.parametrize("N,P,R,C", [(256, 64, 4, 8), (128, 64, 4, 16)])
def test_stage38_is_stage37_below_p128(compile_stage, N, P, R, C):
    """P = 64: N256_P64_R4_C8's Gluon aux in pairs measured slower than the Triton aux and its wave
    pass, and N128_P64_R4_C16's states operand within 0.4 % (records/h100-sweep-bf16aux-*-1995c12):
    stage38 launches stage37's kernels there, the Triton aux at N256_P64_R4_C8."""
    mine = compile_stage("stage38_bf16aux", N, P, R, C, "")
    assert ("bwd_bwd_aux_streamed_kernel" in mine) == (N == 256)
    assert mine == compile_stage("stage37_bf16split", N, P, R, C, "")


def test_stage38_reads_the_states_slot_as_the_operand_and_fits_two_aux_programs_an_sm_at_p128(compile_stage):
    """N64_P128_R4_C16: with the states' TMA slot as dQ's operand (STB) the aux's shared memory
    drops by the [NB, P] copy's buffer, and with the states' ring of one slot (ST1) by one slot
    more (its barrier's 8 B added), under what two programs per SM take; stage37 keeps its copy
    and two slots (one program per SM)."""
    mine = compile_stage("stage38_bf16aux", 64, 128, 4, 16, "aux")["bwd_bwd_aux_gluon_kernel"]
    theirs = compile_stage("stage37_bf16split", 64, 128, 4, 16, "aux")["bwd_bwd_aux_gluon_kernel"]
    assert (mine["keywords"]["STB"], mine["keywords"]["ST1"], theirs["keywords"]["STB"]) == (True, True, False)
    assert theirs["shared"] - mine["shared"] == 2 * 16 * 128 * 2 - 8
    assert (mine["programs_per_sm_by_shared"], theirs["programs_per_sm_by_shared"]) == (2, 1)


def test_one_states_slot_fits_two_aux_programs_an_sm_on_chunk_pairs_at_p128(compile_stage):
    """N128_P128_R4_C8 in stage38 (two chunks a program): the states in a ring of one slot
    (aux_gluon.STATES_SLOTS = 1, the kernel's ST1) take one slot of two [NB, P] bf16 blocks less
    (its barrier's 8 B more), which brings the aux under what two programs per SM take."""
    mine = compile_stage("stage38_bf16aux", 128, 128, 4, 8, "aux")
    theirs = compile_stage("stage38_bf16aux", 128, 128, 4, 8, "aux", knobs=("stage38_bf16aux.STATES_SLOTS=2",))
    aux, two = (k["bwd_bwd_aux_gluon_kernel"] for k in (mine, theirs))
    assert (aux["keywords"]["ST1"], two["keywords"]["ST1"]) == (True, False)
    assert two["shared"] - aux["shared"] == 2 * 16 * 128 * 2 - 8
    assert (aux["programs_per_sm_by_shared"], two["programs_per_sm_by_shared"]) == (2, 1)


def test_states_slots_takes_one_or_two():
    from mamba3_perf.kernels.bwd_bwd import aux_gluon
    with pytest.raises(ValueError, match="states_slots: 1 or 2, got 3"):
        aux_gluon.launch_aux({}, {}, {}, None, diag_blocks=True, increments=True, states_slots=3)


def test_stage38_is_stage37_without_a_hopper_gpu(same_outputs):
    """On the CPU (and on any device without the Gluon aux's bf16 parts) stage38 launches exactly
    stage37's kernels: the same outputs bit for bit."""
    same_outputs("stage38_bf16aux", "stage37_bf16split", "small-N256_P64_R4_C8")


def test_states_operand_knob_reads_the_states_slot_and_fits_two_aux_programs_an_sm_at_p128(compile_stage):
    """N64_P128_R4_C16: with the states' TMA slot as dQ's operand (aux_gluon.STATES_OPERAND, the
    kernel's STB) the aux's shared memory drops by the [NB, P] copy's buffer, under what two
    programs per SM take; without, one program per SM. The other kernels are the same launches."""
    mine = compile_stage("stage37_bf16split", 64, 128, 4, 16, "", knobs=("aux_gluon.STATES_OPERAND=1",))
    theirs = compile_stage("stage37_bf16split", 64, 128, 4, 16, "")
    aux, copy = (k["bwd_bwd_aux_gluon_kernel"] for k in (mine, theirs))
    assert (aux["keywords"]["STB"], copy["keywords"]["STB"]) == (True, False)
    assert copy["shared"] - aux["shared"] == 16 * 128 * 2  # the [NB, P] bf16 copy
    assert (aux["programs_per_sm_by_shared"], copy["programs_per_sm_by_shared"]) == (2, 1)
    assert {k: v for k, v in mine.items() if "aux" not in k} == {k: v for k, v in theirs.items() if "aux" not in k}


def test_stage39_fits_three_aux_programs_an_sm_at_p64(compile_stage):
    """N128_P64_R4_C16: stage39's Gluon aux reads the states' TMA slot as dQ's operand from a ring
    of one slot (STB, ST1) at 168 registers a thread: its shared memory under what three programs
    per SM take (stage38: two), and three programs of 128 threads in an SM's 65536 registers. The
    other kernels are stage38's launches."""
    mine = compile_stage("stage39_auxregs", 128, 64, 4, 16, "")
    theirs = compile_stage("stage38_bf16aux", 128, 64, 4, 16, "")
    aux, two = mine["bwd_bwd_aux_gluon_kernel"], theirs["bwd_bwd_aux_gluon_kernel"]
    assert (aux["keywords"]["STB"], aux["keywords"]["ST1"], two["keywords"]["STB"]) == (True, True, False)
    assert (aux["maxnreg"], two.get("maxnreg")) == (168, None)
    assert 3 * aux["maxnreg"] * 128 <= 65536 < 3 * 176 * 128
    assert (aux["programs_per_sm_by_shared"], two["programs_per_sm_by_shared"]) == (3, 2)
    assert {k: v for k, v in mine.items() if "aux" not in k} == {k: v for k, v in theirs.items() if "aux" not in k}


@pytest.mark.parametrize("N,P,R,C", [(256, 64, 4, 8), (128, 128, 4, 8), (64, 128, 4, 16), (128, 32, 4, 16)])
def test_stage39_is_stage38_off_p64_and_on_chunk_pairs(compile_stage, N, P, R, C):
    """Where a chunk has 32 rows (the Triton aux, or the Gluon aux in pairs at P = 128), at P =
    128 and at P = 32 (three aux programs per SM already) stage39 launches stage38's kernels."""
    assert compile_stage("stage39_auxregs", N, P, R, C, "") == compile_stage("stage38_bf16aux", N, P, R, C, "")


@pytest.mark.parametrize("stage,takes,skips,knobs", [
    # stage39: P = 64, one 64-row chunk a Gluon aux program (fp32 cached states, or the aux's bf16
    # parts off, keep TF32 parts at 254 registers, which the cap would spill)
    ("stage39_auxregs", ("small-N128_P64_R4_C16", "small-N128_P64_R2_C32"),
     ("small-N256_P64_R4_C8", "small-N64_P128_R4_C16", "small-N128_P32_R4_C16"),
     ("stage39_auxregs.AUX_REGS=0", "aux_gluon.BF16=0")),
    # stage41: P = 64, C*R = 32 (the streamed aux), N > 16 (stage16 caps it at N <= 16); fp32 cached
    # states keep TF32 parts, on which the cap was not measured
    ("stage41_streamregs", ("small-N256_P64_R4_C8",),
     ("small-N16_P64_R4_C8", "small-N128_P64_R4_C16", "small-N128_P128_R4_C8"),
     ("stage41_streamregs.STREAM_REGS=0", "stage37_bf16split.BF16=0")),
])
def test_the_register_cap_stages_change_only_the_bf16_parts(stage, takes, skips, knobs):
    """stage39's and stage41's rules take their shapes only with bf16 cached states under the bf16
    split, and their knob (or the bf16 parts) off gives the parent everywhere."""
    import importlib

    from mamba3_perf.kernels.knobs import single_knobs

    module = importlib.import_module(f"mamba3_perf.kernels.bwd_bwd.{stage}")

    def changes(case_id, states_dtype=torch.bfloat16):
        c = get_case(case_id)
        return module.changes(make_inputs(c, states_dtype=states_dtype), c)

    assert all(changes(c) for c in takes)
    assert not any(changes(c) for c in skips)
    assert not changes(takes[0], torch.float32)
    for knob in knobs:
        with single_knobs([knob]):
            assert not changes(takes[0]), knob


def test_stage39_is_stage38_without_a_hopper_gpu(same_outputs):
    """On the CPU (no Gluon aux) stage39 launches exactly stage38's kernels: the same outputs bit
    for bit, on a shape its rule takes."""
    same_outputs("stage39_auxregs", "stage38_bf16aux", "small-N128_P64_R2_C32")


def test_stage40_fits_two_state_terms_programs_an_sm_on_chunk_pairs_at_p128(compile_stage):
    """N128_P128_R4_C8 (two chunks a state_terms program): stage40's state_terms walks on a TMA ring
    of one slot (RING = 1), a third of its shared memory less (one slot of every block: each
    chunk's [16, P] dstates fp32 and states bf16, its k and dK rows), two programs per SM where
    stage39's took one. The other kernels are stage39's launches."""
    mine = compile_stage("stage40_termsring", 128, 128, 4, 8, "")
    theirs = compile_stage("stage39_auxregs", 128, 128, 4, 8, "")
    terms, two = mine["bwd_bwd_state_terms_gluon_kernel"], theirs["bwd_bwd_state_terms_gluon_kernel"]
    assert (terms["keywords"]["CP"], terms["keywords"]["RING"], two["keywords"]["RING"]) == (2, 1, 2)
    assert (terms["programs_per_sm_by_shared"], two["programs_per_sm_by_shared"]) == (2, 1)
    assert {k: v for k, v in mine.items() if "state_terms" not in k} == {
        k: v for k, v in theirs.items() if "state_terms" not in k}


@pytest.mark.parametrize("N,P,R,C", [(64, 128, 4, 16), (256, 64, 4, 8), (128, 64, 4, 16)])
def test_stage40_is_stage39_off_chunk_pairs_at_p128(compile_stage, N, P, R, C):
    """One chunk a state_terms program at P = 128 (one slot measured slower there), chunk pairs at
    P = 64 (not measured), and P = 64: stage40 launches stage39's kernels."""
    assert compile_stage("stage40_termsring", N, P, R, C, "") == compile_stage("stage39_auxregs", N, P, R, C, "")


def test_stage40_is_stage39_without_a_hopper_gpu(same_outputs):
    """On the CPU (no Gluon state_terms) stage40 launches exactly stage39's kernels: the same
    outputs bit for bit, on the shape its rule takes."""
    same_outputs("stage40_termsring", "stage39_auxregs", "small-N128_P128_R4_C8")


def _assert_only_capped(mine: dict, theirs: dict, kernel: str, cap: int) -> dict:
    """``mine`` launches ``kernel`` at ``cap`` registers a thread where ``theirs`` (the parent's
    compiles) launches it uncapped, three programs of its warps in an SM's 65536 registers, and
    is otherwise the parent's launch for launch. Returns mine's ``kernel`` entry."""
    one, two = mine[kernel], theirs[kernel]
    assert (one.get("maxnreg"), two.get("maxnreg")) == (cap, None)
    assert 3 * one["maxnreg"] * 32 * one["num_warps"] <= 65536
    assert one["keywords"].pop("maxnreg") == cap and "maxnreg" not in two["keywords"]
    assert {k: v for k, v in one.items() if k != "maxnreg"} == {k: v for k, v in two.items() if k != "maxnreg"}
    assert {k: v for k, v in mine.items() if k != kernel} == {k: v for k, v in theirs.items() if k != kernel}
    return one


def test_stage41_fits_three_streamed_aux_programs_an_sm_at_n256(compile_stage):
    """N256_P64_R4_C8 (chunks of 32 rows at P = 64: the streamed Triton aux): stage41 launches it
    at 168 registers a thread, three programs of 128 threads in an SM's 65536 (stage40: uncapped,
    250), its shared memory three programs' too. The other kernels are stage40's launches."""
    mine = compile_stage("stage41_streamregs", 256, 64, 4, 8, "")
    theirs = compile_stage("stage40_termsring", 256, 64, 4, 8, "")
    aux = _assert_only_capped(mine, theirs, "bwd_bwd_aux_streamed_kernel", 168)
    assert aux["programs_per_sm_by_shared"] >= 3


@pytest.mark.parametrize("N,P,R,C", [(16, 64, 4, 8), (128, 64, 4, 16), (128, 128, 4, 8)])
def test_stage41_is_stage40_where_the_streamed_aux_is_capped_or_not_run(compile_stage, N, P, R, C):
    """N = 16 (stage16 caps the streamed aux at 168 already), one 64-row chunk a program at P = 64
    (the Gluon aux) and chunk pairs at P = 128 (the Gluon aux in pairs): stage41 launches stage40's
    kernels."""
    assert compile_stage("stage41_streamregs", N, P, R, C, "") == compile_stage("stage40_termsring", N, P, R, C, "")


def test_stage41_is_stage40_on_the_interpreter(same_outputs):
    """Off Hopper GPUs (the cap was measured on one; the interpreter takes no register cap) stage41
    launches stage40's kernels: the same outputs bit for bit on the shape its rule takes."""
    same_outputs("stage41_streamregs", "stage40_termsring", "small-N256_P64_R4_C8")


def test_stage42_fits_three_pre_programs_an_sm_at_p128(compile_stage):
    """N128_P128_R4_C8 and N64_P128_R4_C16 (stage11's pre kernel on whole chunks, 8 warps, which
    stage16 leaves uncapped there): stage42 launches it at 80 registers a thread, three programs of
    256 threads in an SM's 65536 (stage41: uncapped, 97 and 112). The other kernels are stage41's
    launches."""
    for N, C in ((128, 8), (64, 16)):
        mine = compile_stage("stage42_precap", N, 128, 4, C, "")
        theirs = compile_stage("stage41_streamregs", N, 128, 4, C, "")
        assert _assert_only_capped(mine, theirs, "bwd_bwd_pre_steptrig_kernel", 80)["num_warps"] == 8


@pytest.mark.parametrize("N,P,R,C", [(128, 64, 4, 16), (256, 64, 4, 8), (128, 128, 4, 16)])
def test_stage42_is_stage41_where_the_pre_kernel_is_on_halves_or_capped(compile_stage, N, P, R, C):
    """P = 64 (stage21's halves pre kernel on sub-chunks) and a [C, R, N] tile of 8192 elements at P
    = 128 (stage16 caps the pre kernel at 128 there): stage42 launches stage41's kernels."""
    assert compile_stage("stage42_precap", N, P, R, C, "") == compile_stage("stage41_streamregs", N, P, R, C, "")


def test_stage42_rule_and_knob():
    """The rule takes the P = 128 shapes whose pre tile stage16 leaves uncapped and nothing at P <=
    64; its knob off gives stage41 everywhere."""
    from mamba3_perf.kernels.bwd_bwd import stage42_precap
    from mamba3_perf.kernels.knobs import single_knobs

    takes = ("small-N128_P128_R4_C8", "small-N64_P128_R4_C16")
    assert all(stage42_precap.changes(get_case(c)) for c in takes)
    assert not any(stage42_precap.changes(get_case(c)) for c in
                   ("small-N256_P64_R4_C8", "small-N128_P64_R4_C16", "small-N128_P32_R4_C16", "small-N16_P64_R4_C8"))
    with single_knobs(["stage42_precap.PRE_REGS=0"]):
        assert not stage42_precap.changes(get_case(takes[0]))


def test_stage42_is_stage41_on_the_interpreter(same_outputs):
    """Off Hopper GPUs (the cap was measured on one; the interpreter takes no register cap) stage42
    launches stage41's kernels: the same outputs bit for bit on a shape its rule takes."""
    same_outputs("stage42_precap", "stage41_streamregs", "small-N64_P128_R4_C16")


def test_stage43_finishes_dq_and_dk_in_the_gluon_kernels(compile_stage):
    """N128_P64_R4_C16 (C*R = 64: both Gluon kernels run and can rotate): stage43 launches the Gluon
    aux and state_terms rotating q / k (ROT) and finishing dQ and dK (FIN), and no post kernel;
    the aux keeps stage42's cap and bf16 parts, and with them its three programs per SM: its shared
    memory too (e432311's, at 77848 B, held two)."""
    mine = compile_stage("stage43_finish", 128, 64, 4, 16, "")
    theirs = compile_stage("stage42_precap", 128, 64, 4, 16, "")
    assert not any("post" in k for k in mine) and any("post" in k for k in theirs)
    for k in ("bwd_bwd_aux_gluon_kernel", "bwd_bwd_state_terms_gluon_kernel"):
        kw, parent = mine[k]["keywords"], theirs[k]["keywords"]
        assert (kw["ROT"], kw["FIN"], parent["ROT"], parent["FIN"]) == (True, True, False, False), k
        assert kw["BF16"] == parent["BF16"], k
    assert mine["bwd_bwd_aux_gluon_kernel"]["maxnreg"] == theirs["bwd_bwd_aux_gluon_kernel"]["maxnreg"] == 168
    aux = mine["bwd_bwd_aux_gluon_kernel"]
    assert aux["programs_per_sm_by_shared"] == theirs["bwd_bwd_aux_gluon_kernel"]["programs_per_sm_by_shared"] == 3
    assert occupancy(aux["maxnreg"], 32 * aux["num_warps"], aux["shared"]).blocks_per_sm == 3


def test_stage43_caps_both_gluon_kernels_at_p32(compile_stage):
    """N128_P32_R4_C16: where they finish at P = 32 (stage43_finish.CAP_MAX_P) both Gluon kernels run
    at 168 registers, three programs per SM by registers and shared memory; at P = 64 state_terms
    is capped only with the knob at 64 (the aux by stage39 either way)."""
    gluon = ("bwd_bwd_aux_gluon_kernel", "bwd_bwd_state_terms_gluon_kernel")
    p32 = compile_stage("stage43_finish", 128, 32, 4, 16, "gluon")
    for k in gluon:
        assert p32[k]["maxnreg"] == 168, k
        assert occupancy(168, 32 * p32[k]["num_warps"], p32[k]["shared"]).blocks_per_sm == 3, k
    assert compile_stage("stage42_precap", 128, 32, 4, 16, "state_terms")["bwd_bwd_state_terms_gluon_kernel"]["maxnreg"] is None
    p64 = compile_stage("stage43_finish", 128, 64, 4, 16, "state_terms")
    capped = compile_stage("stage43_finish", 128, 64, 4, 16, "state_terms", knobs=["stage43_finish.CAP_MAX_P=64"])
    assert p64["bwd_bwd_state_terms_gluon_kernel"]["maxnreg"] is None
    assert capped["bwd_bwd_state_terms_gluon_kernel"]["maxnreg"] == 168


@pytest.mark.parametrize("N,P,R,C", [(256, 64, 4, 8), (128, 128, 4, 8)])
def test_stage43_is_stage42_where_the_gluon_kernels_cannot_rotate(compile_stage, N, P, R, C):
    """Chunks of 32 rows (the streamed Triton aux at P = 64, the Gluon kernels on chunk pairs at P
    = 128, which do not rotate): stage43 launches stage42's kernels."""
    assert compile_stage("stage43_finish", N, P, R, C, "") == compile_stage("stage42_precap", N, P, R, C, "")


def test_stage43_knob_gives_stage42():
    """Its knob off, stage43's keywords are stage42's for any inputs."""
    from mamba3_perf.kernels.bwd_bwd import stage42_precap, stage43_finish
    from mamba3_perf.kernels.knobs import single_knobs

    c = get_case("small-N128_P64_R4_C16")
    x = make_inputs(c, states_dtype=torch.bfloat16)
    with single_knobs(["stage43_finish.FINISH=0"]):
        assert not stage43_finish.changes(x, c)
        assert stage43_finish.keywords(x, c) == stage42_precap.keywords(x, c)


def test_stage43_is_stage42_on_the_interpreter(same_outputs):
    """Off Hopper GPUs (the Gluon kernels, which rotate and finish, run only there) stage43 launches
    stage42's kernels: the same outputs bit for bit on a shape where it finishes on a GPU."""
    same_outputs("stage43_finish", "stage42_precap", "small-N128_P64_R4_C16")


@pytest.mark.parametrize("case_id,finishes", [
    ("N128_P64_R4_C16", True), ("N128_P32_R4_C16", True), ("N128_P64_R2_C32", True), ("N128_P64_R1_C64", True),
    ("N64_P64_R4_C16", False), ("N64_P128_R4_C16", False),  # N < MIN_N: measured slower on an H100
    ("N128_P64_R8_C8", False),  # R > MAX_R: measured slower
    ("N256_P64_R4_C8", False),  # chunks of 32 rows: the Gluon kernels in pairs do not rotate here
])
def test_stage43_rule_on_hopper(plan_on_hopper, case_id, finishes):
    """With a Hopper GPU assumed: stage43 finishes in the Gluon kernels on the shapes where it
    measured faster than stage42 (N >= 128, R <= 4) and they can rotate; elsewhere its keywords
    are stage42's, and with its bounds lifted it finishes at N = 64 and R = 8 too."""
    from mamba3_perf.kernels.bwd_bwd import stage42_precap, stage43_finish
    from mamba3_perf.kernels.knobs import single_knobs

    mine, theirs = plan_on_hopper(stage43_finish.keywords, stage42_precap.keywords, case_id)
    assert (mine != theirs) is finishes
    if finishes:
        assert mine["rot_inline"] and mine["finish_dk"] and mine["finish_dq"], mine
    with single_knobs(["stage43_finish.MIN_N=none", "stage43_finish.MAX_R=none"]):
        lifted = plan_on_hopper(stage43_finish.keywords, stage42_precap.keywords, case_id)[0]
    assert ("rot_inline" in lifted) is (case_id != "N256_P64_R4_C8")
