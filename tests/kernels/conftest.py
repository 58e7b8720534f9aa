"""Shared by the kernel tests."""
import numpy as np
import pytest
import torch
import triton.language as tl
from triton._C.libtriton import ir
from triton.runtime import interpreter

from mamba3_perf.bench import prepare
from mamba3_perf.kernels import api, get_case, make_inputs
from mamba3_perf.kernels.bwd_bwd import common
from mamba3_perf.kernels.checking import check_stage


@pytest.fixture
def case_meta():
    """The launch meta (api.validate) of a case's generated inputs, by case or case id: what
    the stages' shape rules read."""
    def meta(case):
        case = get_case(case) if isinstance(case, str) else case
        return api.validate(**make_inputs(case), chunk_size=case.C, rotary_dim_divisor=case.rotary_dim_divisor)
    return meta


@pytest.fixture
def cuda_golden():
    """Run a stage on a case (or case id) on the GPU, with the benchmarks' inputs, and assert that
    every gradient passes the golden criterion (the Hopper tests' check)."""
    def check(stage, case):
        case = get_case(case) if isinstance(case, str) else case
        rows = check_stage(stage, case, device="cuda", inputs=prepare(case, device="cuda"))
        assert all(r.passed for r in rows), [r for r in rows if not r.passed]
    return check


def _tf32(h):
    return interpreter.TensorHandle(interpreter._round_f32_to_tf32(h.data), h.dtype.scalar)


def _bf16_as_f32(h):
    """A bf16 operand (the interpreter holds bf16 as its uint16 bit patterns) as fp32 numbers."""
    return interpreter.TensorHandle((h.data.astype(np.uint32) << 16).view(np.float32), tl.float32)


def _f32_to_bf16_rne(data):
    """fp32 -> bf16 bit patterns, rounded to nearest even as CUDA's cvt.rn.bf16.f32 does."""
    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


@pytest.fixture
def cuda_precisions(monkeypatch):
    """CUDA's dot precisions on the interpreter (skips where CUDA itself runs): the operands of
    every "tf32" dot rounded to TF32 (10 mantissa bits, to nearest even, as the tensor cores
    take them; "tf32x3" and "ieee" dots stay fp32), bf16 dots multiplied as numbers and fp32 ->
    bf16 conversions rounded to nearest even, as on CUDA (Triton's interpreter multiplies bf16
    operands as their bit patterns and truncates), and dot_precision answering what it answers
    on CUDA."""
    if torch.cuda.is_available():
        pytest.skip("emulates CUDA's TF32 on the interpreter")
    create_dot = interpreter.InterpreterBuilder.create_dot
    cast = interpreter.InterpreterBuilder.cast_impl
    original = common.dot_precision

    def dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if input_precision == ir.INPUT_PRECISION.TF32 and a.data.dtype == np.float32:
            a, b = _tf32(a), _tf32(b)
        if a.dtype.scalar == tl.bfloat16:
            a, b = _bf16_as_f32(a), _bf16_as_f32(b)
        return create_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return interpreter.TensorHandle(_f32_to_bf16_rne(src.data), tl.bfloat16)
        return cast(self, src, dst_type)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", dot)
    monkeypatch.setattr(interpreter.InterpreterBuilder, "cast_impl", cast_impl)
    monkeypatch.setattr(common, "dot_precision", lambda device, **kw: original("cuda", **kw))


@pytest.fixture
def post_launch(monkeypatch):
    """Run stage26 on a case's CPU inputs and return its post kernel's launch: (x, scratch,
    the outputs it leaves, meta, launch keywords). The tests of stages 28-29 finish dK / dQ from
    that scratch as their Gluon kernels do and compare."""
    from mamba3_perf.bench import prepare
    from mamba3_perf.kernels.bwd_bwd import prod

    def run(case_id):
        launches, launch = [], prod.launch_post

        def capture(x, s, out, meta, **kw):
            launch(x, s, out, meta, **kw)
            launches.append((x, s, {k: v.clone() for k, v in out.items() if v is not None}, meta, kw))

        monkeypatch.setattr(prod, "launch_post", capture)
        case = get_case(case_id)
        api.mamba3_mimo_bwd_bwd(**prepare(case, device="cpu"), chunk_size=case.C,
                                rotary_dim_divisor=case.rotary_dim_divisor, stage="stage26_widep")
        monkeypatch.setattr(prod, "launch_post", launch)
        return launches[0]
    return run


def _per_head(x, H):
    """[B, S, R, G, N] -> [B, H, S, R, N] fp32 (head h reads group h // (H / G))."""
    G = x.shape[3]
    return x[:, :, :, torch.arange(H) // (H // G)].permute(0, 3, 1, 2, 4).float()


@pytest.fixture
def finish_replay():
    """gluon_common.finish_pair over a whole tensor, in torch: from the rotated-domain rows of one
    side (s["DKR"] or s["DQR"], [B, H, nc, C*R, N]) its gradient [B, S*R, H, N] (inverse rotary plus
    the qk_dot diagonal term from s["GDB"] and the other side's input) and its half of DANGLES
    [B, S, H, RD]: stage21_halves' post arithmetic, term for term."""
    def run(x, s, meta, side):
        B, S, H, N, R, RD = meta.B, meta.S, meta.H, meta.N, meta.R, meta.RD
        half, other = N // 2, "k" if side == "q" else "q"
        d = s["DQR" if side == "q" else "DKR"].reshape(B, H, S, R, N)
        xb = _per_head(x[side], H) + x[side + "_bias"][None, :, None]
        yb = _per_head(x[other], H) + x[other + "_bias"][None, :, None]
        ang = x["angles"].permute(0, 2, 1, 3)[:, :, :, None, :]  # [B, H, S, 1, RD]
        cs, sn = torch.ones(B, H, S, 1, half), torch.zeros(B, H, S, 1, half)
        cs[..., :RD], sn[..., :RD] = torch.cos(ang), torch.sin(ang)
        d1, d2, x1, x2 = d[..., :half], d[..., half:], xb[..., :half], xb[..., half:]
        g = (d1 * (-sn * x1 - cs * x2) + d2 * (-sn * x2 + cs * x1)).sum(3)[..., :RD]
        gdb = s["GDB"].reshape(B, H, S, R, R)  # [.., r_k, r_q]
        diag = torch.einsum("bhskq,bhskn->bhsqn" if side == "q" else "bhskq,bhsqn->bhskn", gdb, yb)
        dx = torch.cat([cs * d1 + sn * d2, cs * d2 - sn * d1], -1) + diag
        return dx.permute(0, 2, 3, 1, 4).reshape(B, S * R, H, N), g.permute(0, 2, 1, 3).contiguous()
    return run


@pytest.fixture
def plan_on_hopper(monkeypatch, case_meta):
    """A stage's plan and its parent's for an official case's N / P / R / C (at the size of its
    small twin, 16-bit states as benchmarked), as on a Hopper GPU: (plan, parent plan)."""
    from mamba3_perf.bench import prepare
    from mamba3_perf.kernels.bwd_bwd import stage23_gluonterms, stage24_gluonaux

    def run(plan, parent_plan, case_id):
        monkeypatch.setattr(stage24_gluonaux, "is_hopper", lambda device: True)
        monkeypatch.setattr(stage23_gluonterms, "is_hopper", lambda device: True)
        small = get_case("small-" + case_id)
        meta = case_meta(get_case(case_id).with_(B=1, S=small.S, H=2))
        x = prepare(small, device="cpu")
        return plan(x, meta), parent_plan(x, meta)
    return run


@pytest.fixture
def same_outputs():
    """Assert that stage ``stage`` and stage ``other`` give the same outputs bit for bit on
    ``case_id`` (bf16 cached states): a stage that is its parent where its change does not apply."""
    from mamba3_perf.kernels.checking import run_stage

    def check(stage: str, other: str, case_id: str) -> None:
        c = get_case(case_id)
        x = make_inputs(c, states_dtype=torch.bfloat16)
        mine, theirs = run_stage(stage, x, c), run_stage(other, x, c)
        for k, v in mine.items():
            assert (v is None and theirs[k] is None) or torch.equal(v, theirs[k]), k
    return check
