"""stage27_rotinline: where it rotates q / k inside the Gluon kernels, the pre kernels' cos / sin
(ROT_CS) on the interpreter, the Gluon kernels' block addressing and rotation (rows of the
16-bit inputs, partner columns, bias, cos / sin) replayed in torch against the pre kernel's own
rotated rows, and the two Gluon kernels compiled for the H200 (sm_90) within their programs' shared
memory per SM. The Gluon kernels themselves run on Hopper GPUs only (the golden check there:
tests/kernels/test_gluonaux.py)."""
import pytest
import torch

from mamba3_perf.bench import prepare
from mamba3_perf.kernels import api, get_case
from mamba3_perf.kernels.bwd_bwd import (
    stage1_pre, stage7_streamaux, stage11_steptrig, stage21_halves, stage25_subchunk, stage26_widep,
    stage27_rotinline,
)
from mamba3_perf.kernels.bwd_bwd.common import PRE_SCRATCH, alloc_scratch
from mamba3_perf.kernels.checking import check_stage


def _pipeline_inputs(case_id, monkeypatch):
    """(x, meta) as the API hands them to stage25's pipeline (padded, fp32 where it converts)."""
    seen = {}
    monkeypatch.setattr(stage25_subchunk, "run_with", lambda x, out, meta, **kw: seen.update(x=x, meta=meta))
    case = get_case(case_id)
    api.mamba3_mimo_bwd_bwd(**prepare(case, device="cpu"), chunk_size=case.C,
                            rotary_dim_divisor=case.rotary_dim_divisor, stage="stage27_rotinline")
    monkeypatch.undo()
    return seen["x"], seen["meta"]


def _pre(x, meta, kernel, steps, **kw):
    s = alloc_scratch(meta, "cpu", PRE_SCRATCH + ("COS", "SIN"))
    for t in s.values():
        t.fill_(float("nan"))
    stage1_pre.launch_pre(x, s, meta, kernel=kernel, steps=steps, inputs=True, **kw)
    return s


# the halves kernel on sub-chunks (P <= 64), stage11's on whole chunks (P = 128); a GQA shape
PRE_CASES = [("small-N128_P64_R4_C16", stage21_halves.bwd_bwd_pre_halves_kernel),
             ("small-N64_P128_R4_C16", stage11_steptrig.bwd_bwd_pre_steptrig_kernel),
             ("regular-1x64x4x2", stage21_halves.bwd_bwd_pre_halves_kernel)]


@pytest.mark.parametrize("case_id,kernel", PRE_CASES)
def test_pre_kernels_store_cos_sin_of_every_angle(monkeypatch, case_id, kernel):
    x, meta = _pipeline_inputs(case_id, monkeypatch)
    s = _pre(x, meta, kernel, stage25_subchunk.pre_steps(meta), rot_inline=True)
    torch.testing.assert_close(s["COS"], torch.cos(x["angles"]), rtol=0, atol=2e-7)
    torch.testing.assert_close(s["SIN"], torch.sin(x["angles"]), rtol=0, atol=2e-7)
    assert s["QR"].isnan().all() and s["KR"].isnan().all()  # not written


def _gluon_blocks(x, s, meta, name, nb):
    """What the Gluon kernels rotate, block by block, replayed in torch: rows [B*S*R, G*N] of the
    16-bit input (gluon_common.input_rows), the box at row (b*S + c*C)*R and columns hq*N + n0 and
    its partner box at hq*N + (n0 + N/2) % N (rotary_partner_col), then rotated_rows' arithmetic.
    Returns [B, H, nc, C*R, N] rows to compare with the pre kernel's QR / KR."""
    B, S, H, G, N, R, C, RD = meta.B, meta.S, meta.H, meta.G, meta.N, meta.R, meta.C, meta.RD
    CR, half = C * R, N // 2
    rows = x[name].reshape(B * S * R, G * N).float()
    bias = x[name + "_bias"]
    out = torch.empty(B, H, meta.nchunks, CR, N)
    i = torch.arange(CR)
    for b in range(B):
        for h in range(H):
            hq = h // (H // G)
            for c in range(meta.nchunks):
                r0 = (b * S + c * C) * R
                for n0 in range(0, N, nb):
                    n = n0 + torch.arange(nb)
                    pc = hq * N + (n0 + half) % N
                    own = rows[r0:r0 + CR, hq * N + n0:hq * N + n0 + nb]
                    par = rows[r0:r0 + CR, pc:pc + nb]
                    second = n >= half
                    j = torch.where(second, n - half, n)
                    pn = torch.where(second, n - half, n + half)
                    xo = own + bias[h, i % R][:, n]
                    xp = par + bias[h, i % R][:, pn]
                    t = c * C + i // R
                    rot = (j < RD)[None, :].expand(CR, nb)
                    jj = j.clamp(max=RD - 1)
                    cs = torch.where(rot, s["COS"][b, t][:, h][:, jj], torch.ones(()))
                    sn = torch.where(rot, s["SIN"][b, t][:, h][:, jj], torch.zeros(()))
                    out[b, h, c, :, n0:n0 + nb] = cs * xo + torch.where(second[None, :], sn, -sn) * xp
    return out


@pytest.mark.parametrize("case_id,kernel", PRE_CASES)
def test_gluon_block_rotation_replayed_matches_the_pre_kernels_rows(monkeypatch, case_id, kernel):
    """Both N walks' blocks of the aux (32 and 16 columns) and state_terms' (16) rebuild the pre
    kernel's QR / KR from the inputs and its COS / SIN, to fp32 rounding (the order of the
    multiply-adds may differ by one rounding)."""
    x, meta = _pipeline_inputs(case_id, monkeypatch)
    steps = stage25_subchunk.pre_steps(meta)
    rows = _pre(x, meta, kernel, steps)
    cs = _pre(x, meta, kernel, steps, rot_inline=True)
    for name, scratch in (("q", "QR"), ("k", "KR")):
        for nb in (32, 16):
            torch.testing.assert_close(_gluon_blocks(x, cs, meta, name, nb), rows[scratch], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case_id,rot", [
    ("N128_P64_R4_C16", True), ("N64_P128_R4_C16", True), ("N128_P64_R1_C64", True),
    ("N32_P64_R4_C16", False),  # N / 2 = 16: the aux's 32-column blocks straddle the halves
    ("N256_P64_R4_C8", False), ("N128_P128_R4_C8", False),  # C*R = 32: the Triton aux
])
def test_plan(plan_on_hopper, case_id, rot):
    kw, parent = plan_on_hopper(stage27_rotinline.plan, stage26_widep.plan, case_id)
    assert kw == (dict(parent, rot_inline=True) if rot else parent)


def test_q_k_not_aligned_for_tma_keep_stage26(monkeypatch, case_meta):
    """A contiguous q starting 2 bytes into its buffer: TMA cannot read it, so no rot_inline."""
    monkeypatch.setattr(stage27_rotinline.stage24_gluonaux, "is_hopper", lambda device: True)
    monkeypatch.setattr(stage27_rotinline.stage23_gluonterms, "is_hopper", lambda device: True)
    case = get_case("small-N128_P64_R4_C16")
    x, meta = prepare(case, device="cpu"), case_meta(get_case("N128_P64_R4_C16").with_(B=1, S=case.S, H=2))
    assert stage27_rotinline.plan(x, meta).get("rot_inline")
    q = torch.empty(x["q"].numel() + 1, dtype=x["q"].dtype)[1:].view(x["q"].shape)
    q.copy_(x["q"])
    assert not stage27_rotinline.plan(dict(x, q=q), meta).get("rot_inline")


def test_rot_inline_only_with_the_gluon_kernels(monkeypatch, case_meta):
    x, meta = _pipeline_inputs("small-N128_P64_R4_C16", monkeypatch)
    with pytest.raises(ValueError, match="rot_inline"):
        stage7_streamaux.run_with(x, {}, meta, low_precision=True, rot_inline=True)


def test_off_hopper_it_is_stage26():
    rows = check_stage("stage27_rotinline", get_case("small-N128_P64_R4_C16"))
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]


@pytest.mark.parametrize("shape,programs", [((128, 64, 4, 16), 2)])  # P = 128: test_auxdq.py's, with FIN
def test_gluon_kernels_rotating_compile_for_sm90(compile_stage, shape, programs):
    """The aux and state_terms with ROT compile (the stand-in Hopper driver takes stage27's rule)
    and still fit as many programs per SM as stage26's (the 16-bit boxes and their partners take
    the fp32 boxes' shared memory)."""
    ks = compile_stage("stage27_rotinline", *shape, "")
    assert "bwd_bwd_pre_halves_kernel" in ks or "bwd_bwd_pre_steptrig_kernel" in ks, sorted(ks)
    for name in ("bwd_bwd_aux_gluon_kernel", "bwd_bwd_state_terms_gluon_kernel"):
        assert ks[name]["programs_per_sm_by_shared"] >= programs, (name, ks[name]["shared"])
