"""The README's side-by-side tables of the fastest stages against TileLang say what their records
say: each time, each ratio and the geomean the text states."""
import json
import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _medians(name: str) -> dict:
    rec = json.loads((ROOT / "records" / name).read_text())
    return {(t["case_id"], t["variant"]): t["median_us"] / 1000 for t in rec["timings"]}


def _rows(heading: str, head: str) -> tuple[str, list[list[str]]]:
    """The section under ``heading`` and the case rows of its table whose header starts ``head``."""
    section = (ROOT / "README.md").read_text().split(heading)[1].split("\n## ")[0]
    table = section.split("\n" + head)[1].split("\n\n")[0]
    rows = [list(map(str.strip, line.split("|")[1:-1])) for line in table.splitlines()
            if re.match(r"\| N\d+_P\d+_R\d+_C\d+ \|", line)]
    assert len(rows) == 11
    return section, rows


def _ratio(cell: str) -> str:
    return re.sub(r"[*x]|\(.*\)", "", cell).strip()


@pytest.mark.parametrize("record, heading, variant, label", [
    ("h200-widep-vs-tilelang-4fc1088.json",
     "## stage26_widep against TileLang, side by side (records/h200-widep-vs-tilelang-4fc1088.json)",
     "stage26_widep", "stage26 {:.3f}x slower than TileLang"),
    ("h200-stepdesc-vs-tilelang-ea994c0.json",
     "## stage30_stepdesc: the aux's wgmma descriptors formed per step, and launches through compiled "
     "launchers (records/h200-stepdesc-vs-tilelang-ea994c0.json)",
     "stage30_stepdesc", "stage30 {:.3f}x slower than TileLang eager"),
])
def test_side_by_side_table_matches_its_record(record, heading, variant, label):
    med = _medians(record)
    section, rows = _rows(heading, f"| case | {variant.split('_')[0]} ms |")
    logs = []
    for case, ours, tl, ratio, *_ in rows:
        assert float(ours) == round(med[(case, variant)], 3), case
        assert float(tl) == round(med[(case, "tilelang")], 3), case
        r = med[(case, variant)] / med[(case, "tilelang")]
        assert _ratio(ratio) == f"{r:.3f}", case
        logs.append(math.log(r))
    assert label.format(math.exp(sum(logs) / len(logs))) in section


def test_stage30_device_time_column_matches_the_graph_record():
    med = _medians("h200-stepdesc-vs-tilelang-graph-ea994c0.json")
    section, rows = _rows("(records/h200-stepdesc-vs-tilelang-ea994c0.json)\n", "| case | stage30 ms |")
    logs = []
    for case, _, _, _, graph, *_ in rows:
        r = med[(case, "stage30_stepdesc")] / med[(case, "tilelang")]
        assert _ratio(graph) == f"{r:.3f}", case
        logs.append(math.log(r))
    assert f"{math.exp(sum(logs) / len(logs)):.3f}x in device time" in section
