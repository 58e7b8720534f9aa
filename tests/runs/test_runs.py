

def test_rows_record_carries_command_environment_and_extra_meta(tmp_path):
    """benchmarks' sweep / host-overhead records: the command that made them, the environment,
    the rows, written atomically (no partial file on failure: write_text_atomic's)."""
    import json

    from mamba3_perf.runs import write_rows_record

    p = write_rows_record(tmp_path / "rec.json", "sweep_knob.py", ["--cases", "N16_P64_R4_C8"], [{"a": 1}],
                          defaults={"chunk": {"num_warps": 8}})
    rec = json.loads(p.read_text())
    assert rec["rows"] == [{"a": 1}]
    assert rec["meta"]["command"] == "python benchmarks/sweep_knob.py --cases N16_P64_R4_C8"
    assert rec["meta"]["defaults"] == {"chunk": {"num_warps": 8}} and "versions" in rec["meta"]
