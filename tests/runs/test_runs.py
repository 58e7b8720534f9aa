"""mamba3_perf.runs: the benchmark scripts' records."""
import json


def test_rows_record_carries_command_environment_and_extra_meta(tmp_path):
    """benchmarks' sweep / host-overhead records: the command that made them, the environment,
    the rows, written atomically (no partial file on failure: write_text_atomic's)."""
    from mamba3_perf.runs import write_rows_record

    p = write_rows_record(tmp_path / "rec.json", "sweep_knob.py", ["--cases", "N16_P64_R4_C8"], [{"a": 1}],
                          defaults={"chunk": {"num_warps": 8}})
    rec = json.loads(p.read_text())
    assert rec["rows"] == [{"a": 1}]
    assert rec["meta"]["command"] == "python benchmarks/sweep_knob.py --cases N16_P64_R4_C8"
    assert rec["meta"]["defaults"] == {"chunk": {"num_warps": 8}} and "versions" in rec["meta"]


def test_cases_recorded_writes_the_rows_after_each_case(tmp_path, monkeypatch):
    from mamba3_perf import runs
    from mamba3_perf.runs import cases_recorded

    envs = []  # the environment collected once, after the first case, and in every record
    monkeypatch.setattr(runs, "collect_environment", lambda: envs.append(1) or {"device": "d", "n": len(envs)})
    out, rows = tmp_path / "rec.json", []
    for case in cases_recorded(["a", "b"], out, "x.py", ["--y"], rows, extra=1):
        rows.append({"case_id": case})
        rec = json.loads(out.read_text()) if out.exists() else None
        if case == "b":  # a's record was written once a was done, not yet complete
            assert rec["rows"] == [{"case_id": "a"}] and rec["meta"]["complete"] is False
    rec = json.loads(out.read_text())
    assert rec["rows"] == [{"case_id": "a"}, {"case_id": "b"}]
    assert rec["meta"]["complete"] is True and rec["meta"]["extra"] == 1
    assert rec["meta"]["command"] == "python benchmarks/x.py --y"
    assert envs == [1] and rec["meta"]["device"] == "d" and rec["meta"]["n"] == 1
