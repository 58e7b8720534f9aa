"""The README's side-by-side table of the fastest stage against TileLang says what its record says."""
import json
import math
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "records" / "h200-widep-vs-tilelang-4fc1088.json"
HEADING = "## stage26_widep against TileLang, side by side (records/h200-widep-vs-tilelang-4fc1088.json)"


def test_stage26_vs_tilelang_table_matches_its_record():
    rec = json.loads(RECORD.read_text())
    med = {(t["case_id"], t["variant"]): t["median_us"] / 1000 for t in rec["timings"]}
    section = (ROOT / "README.md").read_text().split(HEADING)[1].split("\n## ")[0]
    rows = [line.split("|")[1:-1] for line in section.splitlines()
            if re.match(r"\| N\d+_P\d+_R\d+_C\d+ \|", line)]
    assert len(rows) == 11
    logs = []
    for case, s26, tl, ratio, *_ in (map(str.strip, r) for r in rows):
        assert float(s26) == round(med[(case, "stage26_widep")], 3), case
        assert float(tl) == round(med[(case, "tilelang")], 3), case
        r = med[(case, "stage26_widep")] / med[(case, "tilelang")]
        assert re.sub(r"[*x]|\(.*\)", "", ratio).strip() == f"{r:.3f}", case
        logs.append(math.log(r))
    geomean = math.exp(sum(logs) / len(logs))
    assert f"stage26 {geomean:.3f}x slower than TileLang" in section
