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


def test_per_kernel_sets_measured_times_and_dram_beside_the_counts():
    """Each kernel's median measured time and DRAM bytes join by name; a Gluon kernel's measured
    time joins the Triton kernel it stands in for; kernels the trace lacks stay blank."""
    import pandas as pd

    rows = pd.DataFrame([
        dict(launch=0, kernel="bwd_bwd_pre_halves_kernel", tag="pre", tensor="QR_S", tensor_bytes=4e9,
             read_bytes=0.0, write_bytes=2e9, read_no_reuse=0.0, write_no_reuse=2e9, programs=8, sampled=8),
        dict(launch=1, kernel="bwd_bwd_state_terms_kernel", tag="post", tensor="DST_S", tensor_bytes=4e9,
             read_bytes=1e9, write_bytes=0.0, read_no_reuse=1e9, write_no_reuse=0.0, programs=8, sampled=8),
        dict(launch=2, kernel="bwd_bwd_chunk_sum_kernel", tag="post", tensor="DD", tensor_bytes=8,
             read_bytes=0.0, write_bytes=8.0, read_no_reuse=0.0, write_no_reuse=8.0, programs=1, sampled=1),
    ], columns=list(traffic.COLUMNS))
    events = pd.DataFrame(dict(
        kernel_name=["bwd_bwd_pre_halves_kernel"] * 3 + ["bwd_bwd_state_terms_gluon_kernel"],
        dur_us=[900.0, 1000.0, 5000.0, 500.0], dram_bytes=[2.1e9, 2.2e9, 2.3e9, float("nan")]))
    out = traffic.per_kernel(rows, measured=events).set_index("kernel")
    assert out.loc["bwd_bwd_pre_halves_kernel", "measured_us"] == 1000.0
    assert out.loc["bwd_bwd_pre_halves_kernel", "dram_bytes"] == 2.2e9
    assert out.loc["bwd_bwd_pre_halves_kernel", "tbps"] == pytest.approx(2.0)
    assert out.loc["bwd_bwd_state_terms_kernel", "measured_kernel"] == "bwd_bwd_state_terms_gluon_kernel"
    assert out.loc["bwd_bwd_state_terms_kernel", "tbps"] == pytest.approx(2.0)
    assert pd.isna(out.loc["bwd_bwd_chunk_sum_kernel", "measured_us"])
    assert out.loc["bwd_bwd_pre_halves_kernel", "hbm_us"] == pytest.approx(2e9 / traffic.H200.hbm_bytes_per_s * 1e6)


def test_recording_restores_the_interpreter_when_a_launch_fails():
    """A launch that fails inside the count (here: a grid function, which the count refuses) leaves
    the interpreter as it found it: the next launch runs every program again."""
    from triton.runtime import interpreter as interp

    run, load = interp.InterpretedFunction.run, interp.InterpreterBuilder.create_masked_load
    with pytest.raises(NotImplementedError, match="grid function"):
        with traffic.recording(2):
            _own_and_shared[lambda meta: (4,)](torch.zeros(16), torch.zeros(4, dtype=torch.float16), torch.zeros(16),
                                               BLOCK=4)
    assert interp.InterpretedFunction.run is run and interp.InterpreterBuilder.create_masked_load is load
    assert "set_grid_idx" not in vars(interp.interpreter_builder)
    z = torch.zeros(16)
    _own_and_shared[(4,)](torch.ones(16), torch.ones(4, dtype=torch.float16), z, BLOCK=4)
    assert (z == 2).all()
