import json

import pytest

from traffic.trace import TraceRow, load_trace


def test_jsonl_rows_sorted_by_timestamp(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [
        {"timestamp": 12.5, "input_tokens": 30, "output_tokens": 4},
        {"timestamp": 10.0, "input_tokens": 10, "output_tokens": 2, "tier": "interactive"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert load_trace(path) == [TraceRow(10.0, 10, 2, "interactive"), TraceRow(12.5, 30, 4, None)]


def test_csv_rows_with_optional_tier(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("timestamp,input_tokens,output_tokens,tier\n0,5,6,batch\n1.5,7,8,\n")
    assert load_trace(path) == [TraceRow(0.0, 5, 6, "batch"), TraceRow(1.5, 7, 8, None)]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("t.jsonl", '{"timestamp": 0, "input_tokens": 5}\n', "bad trace row"),
        ("t.jsonl", '{"timestamp": 0, "input_tokens": 0, "output_tokens": 1}\n', ">= 1"),
        ("t.csv", "timestamp,input_tokens,output_tokens\n", "empty"),
        ("t.txt", "0 1 2\n", ".jsonl or .csv"),
    ],
)
def test_bad_traces_are_refused(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_trace(path)
