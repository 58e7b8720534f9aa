"""Bad input is a ShapeError (a ValueError) naming the argument, raised before any launch."""
import pytest
import torch

from mamba3_perf.errors import ShapeError
from mamba3_perf.kernels import get_case, make_inputs, mamba3_mimo_bwd_bwd


@pytest.fixture
def x():
    return make_inputs(get_case("pw-1"))  # B1 S32 H2 G1 N16 P16 R2 C16, reduce-O, D


def call(x, **over):
    return mamba3_mimo_bwd_bwd(**{**x, **over}, chunk_size=over.pop("chunk_size", 16))


@pytest.mark.parametrize("name,bad,match", [
    ("q", lambda t: t[..., :-2].contiguous(), r"k: expected shape \[1, 32, 2, 1, 14\], received \[1, 32, 2, 1, 16\]"),
    ("q", lambda t: t[0], r"q: expected a 5-d tensor \[B,S,R,G,N\], received \[32, 2, 1, 16\]"),
    ("k", lambda t: t[:, :16], r"k: expected shape \[1, 32, 2, 1, 16\], received \[1, 16, 2, 1, 16\]"),
    ("v", lambda t: t.unsqueeze(0), r"v: expected a 4-d tensor"),
    ("states", lambda t: t[:, :, :1], r"states: expected shape \[1, 2, 2, 16, 16\], received \[1, 2, 1, 16, 16\]"),
    ("qk_dot", lambda t: t[..., :1], r"qk_dot: expected shape"),
    ("segsum", lambda t: t[..., :8, :8], r"segsum: expected shape \[1, 2, 2, 16, 16\]"),
    ("angles", lambda t: t[..., :2], r"angles: expected shape \[1, 32, 2, 4\]"),
    ("dout", lambda t: t.unsqueeze(2).expand(-1, -1, 2, -1, -1).contiguous(), r"dout: expected shape \[1, 32, 2, 16\]"),
    ("d", lambda t: t[:1], r"d: expected shape \[2\]"),
    ("trap", lambda t: t.to(torch.int32), r"trap: expected a floating dtype"),
    ("v", lambda t: t.to(torch.float32), r"v: expected the dtype of q"),
    ("q", lambda t: t.transpose(1, 2).contiguous().transpose(1, 2), r"q: expected a contiguous tensor"),
    # the kernels index the per-step inputs [B,H,S] as contiguous too (before, a strided view was misread)
    ("dt", lambda t: t.transpose(1, 2).contiguous().transpose(1, 2), r"dt: expected a contiguous tensor"),
    ("trap", lambda t: t.transpose(0, 2).contiguous().transpose(0, 2), r"trap: expected a contiguous tensor"),
])
def test_bad_argument_named(x, name, bad, match):
    with pytest.raises(ShapeError, match=match):
        call(x, **{name: bad(x[name])})


def test_other_rules(x):
    with pytest.raises(ValueError, match=r"H % G == 0"):
        xb = make_inputs(get_case("pw-2").with_(G=4))
        call({**xb, "q": xb["q"][:, :, :, :3].contiguous(), "k": xb["k"][:, :, :, :3].contiguous()})
    with pytest.raises(ShapeError, match="even head dim"):
        call({**x, "q": x["q"][..., :15].contiguous(), "k": x["k"][..., :15].contiguous()})
    with pytest.raises(ShapeError, match="chunk_size: expected a positive power of two"):
        mamba3_mimo_bwd_bwd(**x, chunk_size=12)
    with pytest.raises(ShapeError, match=r"MIMO rank R in \{1, 2, 4, 8\}"):
        xr = make_inputs(get_case("pw-1").with_(R=3))
        call(xr)
    with pytest.raises(ShapeError, match="output_dtype"):
        mamba3_mimo_bwd_bwd(**x, output_dtype=torch.int8)


def test_unknown_stage(x):
    from mamba3_perf.errors import StageError
    with pytest.raises(StageError, match="unknown stage 'stage9'"):
        mamba3_mimo_bwd_bwd(**x, stage="stage9")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device")
def test_mixed_devices(x):
    with pytest.raises(ShapeError, match="states: expected device"):
        call({**{k: (v.cuda() if v is not None else v) for k, v in x.items()}, "states": x["states"]})
