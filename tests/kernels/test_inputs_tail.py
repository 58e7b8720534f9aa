import pytest
import torch

from mamba3_perf.kernels import get_case, make_inputs
from mamba3_perf.kernels.inputs import INPUT_NAMES, dacs_segsum
from mamba3_perf.kernels.tail import crop_outputs, pad_inputs, pad_tail_seq, rebuild_dacs_tail


def test_make_inputs_is_deterministic_and_complete():
    c = get_case("tail-50")
    a, b = make_inputs(c, seed=7), make_inputs(c, seed=7)
    assert set(a) == set(INPUT_NAMES)
    for name in INPUT_NAMES:
        if a[name] is None:
            assert name == "d" and not c.has_d
            continue
        assert torch.equal(a[name], b[name]), name
    other = make_inputs(c, seed=8)
    assert not torch.equal(a["q"], other["q"])
    assert a["q"].dtype == torch.float16 and a["segsum"].dtype == torch.float32
    assert a["dout"].shape == (c.B, c.S, c.H, c.P)  # reduce-O
    assert make_inputs(get_case("pw-2"))["dout"].shape == (1, 48, 2, 4, 16)  # per-rank


def test_dacs_segsum_definitions():
    da = -torch.rand(1, 1, 20)
    cs, rev, seg = dacs_segsum(da, 8)
    assert torch.allclose(cs[0, 0, 8:16], da[0, 0, 8:16].cumsum(0))
    assert torch.allclose(rev[0, 0, 9], da[0, 0, 10:16].sum())
    assert torch.allclose(seg[0, 0, 1, 5, 2], da[0, 0, 11:14].sum())  # sum dA[j+1..i]
    assert seg[0, 0, 1, 2, 5] == 0 and seg[0, 0, 1, 3, 3] == 0
    assert torch.allclose(rev[0, 0, 17], da[0, 0, 18:20].sum())  # partial chunk


def test_pad_modes():
    x = torch.arange(6.0).reshape(1, 1, 6)
    assert pad_tail_seq(x, 8, 2, "zero").tolist() == [[[0, 1, 2, 3, 4, 5, 0, 0]]]
    assert pad_tail_seq(x, 8, 2, "edge").tolist() == [[[0, 1, 2, 3, 4, 5, 5, 5]]]
    with pytest.raises(ValueError, match="mode"):
        pad_tail_seq(x, 8, 2, "wrap")


def test_rebuild_dacs_tail_matches_zero_padded_da():
    da = -torch.rand(2, 3, 21)
    cs, rev, seg = dacs_segsum(da, 8)
    cs_p, rev_p, seg_p = dacs_segsum(torch.nn.functional.pad(da, (0, 3)), 8)
    new_rev, new_seg = rebuild_dacs_tail(pad_tail_seq(cs, 24, 2, "edge"), pad_tail_seq(rev, 24, 2), seg, 21, 8)
    assert torch.allclose(new_rev, rev_p, atol=1e-6)
    assert torch.allclose(new_seg, seg_p, atol=1e-6)


def test_crop_restores_lengths_and_zeroes_dssda_tail():
    c = get_case("tail-40")  # S=40, C=16 -> Sp=48, last chunk has 8 valid steps
    x = make_inputs(c)
    p = pad_inputs({k: x[k] for k in ("dout", "q", "k", "v", "angles", "qk_dot", "dt", "trap",
                                      "da_cs", "da_cs_rev", "segsum")}, c.S, c.C)
    assert p["q"].shape[1] == 48 and p["qk_dot"].shape[2] == 48
    assert torch.equal(p["q"][:, :40], x["q"]) and torch.count_nonzero(p["q"][:, 40:]) == 0
    assert torch.all(p["da_cs"][..., 40:] == p["da_cs"][..., 39:40])
    B, H, R, N, P = c.B, c.H, c.R, c.N, c.P
    out = dict(DQ=torch.ones(B, 48 * R, H, N), DK=torch.ones(B, 48 * R, H, N), DV=torch.ones(B, 48, H, P),
               DANGLES=torch.ones(B, 48, H, 4), DSSDA=torch.ones(B, H, 3, 16, 16),
               **{k: torch.ones(B, H, 48) for k in ("DFACTOR", "DGAMMA", "DDA", "DDA_CS_REV", "DDA_CS")})
    res = crop_outputs(out, 40, 16)
    assert res["DQ"].shape == (B, 40 * R, H, N) and res["DV"].shape == (B, 40, H, P)
    assert res["DDA"].shape == (B, H, 40)
    assert res["DSSDA"][:, :, 2, 8:].abs().sum() == 0 and res["DSSDA"][:, :, 2, :, 8:].abs().sum() == 0
    assert res["DSSDA"][:, :, 2, :8, :8].min() == 1
