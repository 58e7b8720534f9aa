"""analysis.traffic: bytes per (launch, tensor) counted on the interpreter from sampled programs."""
import os

import pytest
import torch
import triton
import triton.language as tl

from mamba3_perf.analysis import traffic
from mamba3_perf.errors import BackendError
from mamba3_perf.kernels import get_case

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="counts through the Triton interpreter")


@triton.jit
def _own_and_shared(X, Y, Z, BLOCK: tl.constexpr):
    """Each program reads its own BLOCK of X and all of Y (BLOCK elements), writes its BLOCK of Z."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    y = tl.load(Y + tl.arange(0, BLOCK))
    tl.store(Z + i, tl.load(X + i) + y)


def _toy(programs, samples):
    x = torch.arange(programs * 4, dtype=torch.float32)
    y = torch.ones(4, dtype=torch.float16)
    z = torch.zeros(programs * 4, dtype=torch.float32)
    with traffic.recording(samples) as launches:
        _own_and_shared[(programs,)](x, y, z, BLOCK=4)
    return traffic.traffic_table(launches, {"_own_and_shared": "aux"}).set_index("tensor"), x, z


@pytest.mark.parametrize("samples", [3, 10, 100])
def test_own_rows_extrapolate_exactly_and_shared_ones_cap_at_their_size(samples):
    rows, x, z = _toy(10, samples)
    assert list(rows.index) == ["X", "Y", "Z"]  # the signature's order
    assert rows.loc["X", "read_bytes"] == rows.loc["X", "read_no_reuse"] == 10 * 4 * 4
    assert rows.loc["Z", "write_bytes"] == 10 * 4 * 4 and rows.loc["Z", "read_bytes"] == 0
    # Y: every program reads all 8 bytes; fetched once per kernel, or once per program without reuse
    assert rows.loc["Y", "read_bytes"] == 8 and rows.loc["Y", "read_no_reuse"] == 10 * 8
    assert (rows["sampled"] == min(samples, 10)).all() and (rows["programs"] == 10).all()
    assert (rows["tag"] == "aux").all()
    ran = torch.nonzero(z.view(10, 4)[:, 0]).flatten().tolist()  # program p writes z[4p] = 4p + 1
    assert ran == [p for p, _, _ in traffic.sample_programs((10,), samples)]  # only those ran


def test_samples_spread_over_the_grid_first_and_last_included():
    assert traffic.sample_programs((10,), 3) == [(0, 0, 0), (4, 0, 0), (9, 0, 0)]
    assert traffic.sample_programs((2, 3), 100) == [(x, y, 0) for x in range(2) for y in range(3)]
    with pytest.raises(ValueError, match="at least 1"):
        with traffic.recording(0):
            pass


def test_stage_traffic_counts_every_scratch_buffer_once_where_programs_own_rows():
    """stage25 on a small case with every program run: the pre kernel writes all of QR / KR, the
    scan reads and writes all of DST, and a sample of three programs extrapolates the same."""
    case = get_case("small-N128_P64_R4_C16")
    full = traffic.kernel_traffic("stage25_subchunk", case, samples=1000)
    sampled = traffic.kernel_traffic("stage25_subchunk", case, samples=3)
    pre = full[full.kernel == "bwd_bwd_pre_halves_kernel"].set_index("tensor")
    for name in ("QR_S", "KR_S"):
        assert pre.loc[name, "write_bytes"] == pre.loc[name, "tensor_bytes"] > 0
    scan = full[full.tag == "scan"].set_index("tensor").loc["DST_S"]
    assert scan["read_bytes"] == scan["write_bytes"] == scan["tensor_bytes"]
    own = full.tensor.str.endswith("_S") & ~full.tensor.isin(["DECAY_S", "WT_S", "SEGSUM"])
    key = ["launch", "tensor"]
    a = full[own].set_index(key)[["read_bytes", "write_bytes"]]
    b = sampled.set_index(key).loc[a.index, ["read_bytes", "write_bytes"]]
    assert (abs(a - b) <= 0.02 * a.max(axis=1).to_numpy()[:, None]).all().all()
    per = traffic.per_kernel(full)
    assert per.kernel.tolist()[0] == "bwd_bwd_pre_halves_kernel" and (per.hbm_us > 0).all()


def test_needs_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(BackendError, match="interpreter"):
        traffic.kernel_traffic("stage25_subchunk", get_case("pw-1"))
