"""Shared-memory wavefronts of the Gluon kernels' register <-> shared copies: the swizzle, the
model against hand-counted cases, and the model against Triton's own bank-conflict count on every
copy of stage30's two Gluon kernels compiled for sm_90 here."""
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from mamba3_perf.analysis.banks import COLUMNS, nvmma_offset, summary


def test_nvmma_offset_swizzles_16_byte_chunks_by_row():
    # 128-byte swizzle, fp32: a row is 32 elements; row r's chunks XORed with r % 8
    assert nvmma_offset((0, 0), [8, 32], 128, 32) == 0
    assert nvmma_offset((1, 0), [8, 32], 128, 32) == 128 + 16
    assert nvmma_offset((7, 4), [8, 32], 128, 32) == 7 * 128 + (1 ^ 7) * 16
    assert nvmma_offset((0, 32), [8, 64], 128, 32) == 8 * 128  # the second column block
    # 64-byte swizzle: two rows a 128-byte line, the chunk XORed with (r // 2) % 4
    assert nvmma_offset((2, 0), [8, 16], 64, 32) == 2 * 64 + 16
    for sw, bits in ((32, 16), (64, 32), (128, 16), (128, 32)):
        per_row = sw * 8 // bits
        offsets = {nvmma_offset((r, c), [8, 2 * per_row], sw, bits) for r in range(8) for c in range(2 * per_row)}
        assert offsets == set(range(0, 8 * 2 * sw, bits // 8)), (sw, bits)  # a permutation


# (register layout, shared layout, shape, bits) of the hand-counted cases, evaluated by the model in
# a subprocess: Triton's linear-layout binding leaks (nanobind reports it at exit) in the process
# that calls it
CASES = {
    # each warp stores rows of 32 consecutive fp32: 128 bytes, one wavefront an instruction
    "row": ("gl.BlockedLayout([1, 1], [1, 32], [4, 1], [1, 0])", "gl.NVMMASharedLayout(128, 32, 2)", [16, 32], 32),
    # lane l stores row l of one column: the 128-byte swizzle spreads 8 rows over 8 chunks, so
    # the 32 lanes hit 8 banks, 4 distinct words each
    "column": ("gl.BlockedLayout([1, 1], [32, 1], [1, 4], [0, 1])", "gl.NVMMASharedLayout(128, 32, 2)", [32, 32], 32),
    # 16 bytes a lane (4 fp32 along the row), 8 lanes a phase; 8 consecutive rows' same chunk
    # land on 8 different chunks under the swizzle: no conflict
    "vector": ("gl.BlockedLayout([1, 4], [32, 1], [2, 2], [1, 0])", "gl.NVMMASharedLayout(128, 32, 2)", [64, 64], 32),
    "transposed": ("gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])",
                   "gl.NVMMASharedLayout(128, 32, 2, transposed=True)", [16, 64], 32),
    "swizzled": ("gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])", "gl.SwizzledSharedLayout(1, 1, 1, [1, 0])",
                 [16, 64], 32),
}


@pytest.fixture(scope="module")
def model():
    code = (
        "import json, sys\n"
        "import triton.experimental.gluon.language as gl\n"
        "from mamba3_perf.analysis.banks import standalone_builder, wavefronts\n"
        "b = standalone_builder()\n"
        "cases = json.loads(sys.argv[1])\n"
        "print(json.dumps({k: wavefronts(b, eval(r), eval(s), shape, bits) for k, (r, s, shape, bits) in cases.items()}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", code, json.dumps(CASES)], capture_output=True, text=True, env=env,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout)


def test_a_row_per_warp_is_one_wavefront(model):
    assert model["row"] == {"vector": 1, "instructions": 4, "wavefronts": 4.0, "ideal": 4.0}


def test_a_column_per_warp_takes_four_wavefronts(model):
    assert model["column"] == {"vector": 1, "instructions": 8, "wavefronts": 32.0, "ideal": 8.0}


def test_vectors_are_served_a_quarter_warp_at_a_time(model):
    w = model["vector"]
    assert w["vector"] == 4 and w["wavefronts"] == w["ideal"] == 4 * w["instructions"]


def test_other_shared_layouts_are_not_modelled(model):
    assert model["transposed"] is None and model["swizzled"] is None


@pytest.mark.parametrize("kernel", ["aux", "state_terms"])
def test_model_agrees_with_tritons_count_on_stage30(compile_stage, kernel):
    """Every copy of the kernel as compiled for sm_90: the model's excess per ideal wavefront is
    Triton's bank-conflict count; and stage30 has conflicting copies in its N walk (the transposed
    q / k / dstates parts Nsight Compute measured at twice their ideal wavefronts)."""
    (line,) = compile_stage("stage30_stepdesc", 128, 64, 4, 16, kernel, banks=True).values()
    rows = line["banks"]
    assert len(rows) >= 6
    for row in rows:
        assert row["wavefronts"] is not None and row["conflicts"] is not None, row
        assert row["wavefronts"] / row["ideal"] - 1 == row["conflicts"], row
    assert any(r["kind"] == "store" and r["loops"] and r["conflicts"] > 0 for r in rows)


def test_summary_keeps_one_row_per_site():
    row = dict.fromkeys(COLUMNS, "")
    row.update(loops=1, conflicts=1, wavefronts=8.0, ideal=4.0, line="k.py:10")
    other = dict(row, line="k.py:20", loops=0, conflicts=0, wavefronts=4.0, ideal=4.0)
    table = summary(pd.DataFrame([row, row, other]))
    assert list(table["line"]) == ["k.py:10", "k.py:20"] and list(table["excess"]) == [4.0, 0.0]
