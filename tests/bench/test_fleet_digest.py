"""bench/device/fleet_digest.py on constructed records: the causes of a miss, short requests behind a long prefill
on their replica (through the same or another ingress), and the digest of a run folder."""

from __future__ import annotations

import gzip
import json

from bench.device.fleet_digest import behind_long, digest, divergence, miss_cause
from traffic.records import RequestRecord, write_jsonl


def _record(index: int, prompt: int, start_s: float, ttft_s: float | None, **fields) -> RequestRecord:
    base = {
        "request_id": f"r{index}",
        "index": index,
        "start_time": start_s,
        "start_s": start_s,
        "arrival_s": start_s,
        "prompt_tokens": prompt,
        "max_tokens": 16,
        "ttft_s": ttft_s,
        "slo_ttft_ms": 300.0,
        "slo_tier": "interactive",
        "variant": "small",
        "status": 200,
    }
    return RequestRecord(**(base | fields))


def test_a_miss_is_late_at_the_ingress_late_on_the_path_a_tpot_or_an_error():
    at_ingress = _record(0, 10, 0.0, 0.5, server_ingress_ms=1.0, server_engine_ms=400.0)
    on_path = _record(1, 10, 0.0, 0.35, server_ingress_ms=1.0, server_engine_ms=250.0)
    tpot = _record(2, 10, 0.0, 0.1, server_ingress_ms=1.0, server_engine_ms=90.0)
    failed = _record(3, 10, 0.0, None, error_type="timeout")
    assert [miss_cause(r) for r in (at_ingress, on_path, tpot, failed)] == [
        "ttft_ingress",
        "ttft_path",
        "tpot",
        "error",
    ]


def test_short_requests_are_told_apart_by_whose_long_prefill_was_ahead_on_their_replica():
    records = [
        _record(0, 3000, 0.0, 1.0, replica="a", ingress="i1"),  # prefilling on a from 0 to 1 s
        _record(1, 50, 0.5, 0.6, replica="a", ingress="i1", slo_met=False),  # behind it, same ingress
        _record(2, 50, 0.6, 0.5, replica="a", ingress="i2", slo_met=False),  # behind it, the other ingress
        _record(3, 50, 1.5, 0.05, replica="a", ingress="i2", slo_met=True),  # after its first token: clear
        _record(4, 50, 0.5, 0.05, replica="b", ingress="i2", slo_met=True),  # another replica: clear
        _record(5, 50, 0.5, 0.05, slo_met=True),  # no replica named: left out
    ]
    assert behind_long(records) == {"same_ingress": (0, 1), "other_ingress": (0, 1), "clear": (2, 2)}


def test_the_digest_sets_the_real_stack_beside_the_simulator_and_writes_the_compact_rows(tmp_path):
    point = tmp_path / "slo" / "rate-4"
    real = [
        _record(
            0, 50, 0.0, 0.1, replica="a", ingress="i1", slo_met=True, server_engine_ms=80.0, predicted_ttft_ms=40.0
        ),
        _record(1, 50, 0.1, 0.5, replica="b", ingress="i1", slo_met=False, server_engine_ms=450.0),
    ]
    sim = [
        _record(0, 50, 0.0, 0.05, slo_met=True, predicted_ttft_ms=50.0),
        _record(1, 50, 0.1, 0.05, slo_met=True, variant="tiny"),
    ]
    write_jsonl(real, point / "records.jsonl")
    write_jsonl(sim, point / "sim-records.jsonl")
    lines = digest(tmp_path, tmp_path / "compact.jsonl.gz")
    text = "\n".join(lines)
    assert "slo@4 interactive 2 attained 50.0% sim 100.0%" in text
    assert "same variant as the simulator 1 of 2" in text
    assert "slo@4 missed, sim met: interactive on small: 1 (ttft_ingress 1)" in text
    assert "TTFT measured/predicted p50 p90: real (ingress) 2.00 2.00" in text
    with gzip.open(tmp_path / "compact.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    assert [(r["index"], r["replica"], r["sim_variant"], r["sim_met"]) for r in rows] == [
        (0, "a", "small", True),
        (1, "b", "tiny", True),
    ]


def test_where_the_two_sides_routed_apart_it_sets_what_each_expected_of_the_simulators_choice_side_by_side():
    real = [
        _record(0, 4000, 0.0, 0.5, variant="small", route_candidates=_candidates(large_ttft=900, large_met=0)),
        _record(1, 4000, 1.0, 0.5, variant="small", route_candidates=_candidates(large_ttft=1100, large_met=1)),
        _record(2, 50, 2.0, 0.1, variant="small", route_candidates=_candidates(large_ttft=300, large_met=1)),
        _record(3, 4000, 3.0, 0.5, variant="small"),  # no candidates came back: left out
    ]
    sim = {
        0: _record(0, 4000, 0.0, 0.5, variant="large", route_candidates=_candidates(large_ttft=700, large_met=1)),
        1: _record(1, 4000, 1.0, 0.5, variant="large", route_candidates=_candidates(large_ttft=800, large_met=1)),
        2: _record(2, 50, 2.0, 0.1, variant="small", route_candidates=_candidates(large_ttft=300, large_met=1)),
        3: _record(3, 4000, 3.0, 0.5, variant="large", route_candidates=_candidates(large_ttft=800, large_met=1)),
    }
    apart = divergence(real, sim)
    assert list(apart) == [("large", "small")]  # request 2 went to the same variant on both sides
    figures = apart[("large", "small")]
    assert figures["requests"] == 2
    assert figures["ttft"] == (1100.0, 800.0)  # the upper median of each side's expectations
    assert figures["met"] == (0.5, 1.0)


def _candidates(*, large_ttft: float, large_met: int) -> str:
    return (
        f"small ttft=100 ttft_up=150 tpot=20 tpot_up=25 ahead=0 slot=0 slowdown=1 met=1; "
        f"large ttft={large_ttft} ttft_up={1.5 * large_ttft} tpot=40 tpot_up=50 ahead=8000 slot=0 slowdown=1 "
        f"met={large_met}"
    )
