import dataclasses
import json

import pytest

from traffic.records import RequestRecord, read_jsonl, slo_met, time_per_output_token, write_jsonl


def record(**kw):
    base = RequestRecord(
        request_id="r", index=0, start_time=1e9, start_s=0.0, arrival_s=None, prompt_tokens=5, max_tokens=4
    )
    return dataclasses.replace(base, **kw)


def test_time_per_output_token():
    assert time_per_output_token(0.7, 0.2, 11) == pytest.approx(0.05)
    assert time_per_output_token(0.7, 0.2, 1) is None
    assert time_per_output_token(None, 0.2, 11) is None
    assert time_per_output_token(0.7, None, 11) is None


@pytest.mark.parametrize(
    ("fields", "met"),
    [
        ({}, True),  # no targets: succeeding is enough
        ({"error_type": "overloaded", "status": 429}, False),
        ({"slo_ttft_ms": 300, "ttft_s": 0.3}, True),  # the target itself is met
        ({"slo_ttft_ms": 300, "ttft_s": 0.31}, False),
        ({"slo_ttft_ms": 300, "ttft_s": None}, False),  # no first token: missed
        ({"slo_tpot_ms": 50, "tpot_s": 0.06}, False),
        ({"slo_tpot_ms": 50, "tpot_s": None}, True),  # one token: no TPOT to miss
        ({"slo_ttft_ms": 300, "ttft_s": 0.1, "slo_tpot_ms": 50, "tpot_s": 0.05}, True),
    ],
)
def test_slo_met(fields, met):
    assert slo_met(record(**fields)) is met


def test_jsonl_round_trip_ignores_unknown_keys(tmp_path):
    records = [record(index=i, itl_s=[0.05] * i, variant="tiny", status=200) for i in range(3)]
    path = write_jsonl(records, tmp_path / "sub" / "records.jsonl")
    assert read_jsonl(path) == records
    lines = path.read_text().splitlines()
    extra = json.loads(lines[0]) | {"added_later": 1}
    path.write_text(json.dumps(extra) + "\n")
    assert read_jsonl(path) == records[:1]
