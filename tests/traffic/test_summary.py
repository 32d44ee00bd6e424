import dataclasses

import pytest

from traffic.records import RequestRecord
from traffic.summary import NO_STATUS, latency_stats, summarize


def record(i, **kw):
    met = kw.pop("slo_met", None)
    base = RequestRecord(
        request_id=f"r{i}", index=i, start_time=1e9 + i, start_s=float(i), arrival_s=float(i),
        prompt_tokens=10, max_tokens=20, output_tokens=20, ttft_s=0.1, itl_s=[0.01, 0.03], tpot_s=0.02,
        e2e_s=0.5, status=200,
    )  # fmt: skip
    r = dataclasses.replace(base, **kw)
    r.slo_met = r.ok if met is None else met
    return r


def test_latency_stats_by_hand():
    # 100, 200, ..., 1000 ms: linear interpolation puts p50 halfway between 500 and 600.
    s = latency_stats([i / 10 for i in range(1, 11)])
    assert (s.count, s.mean, s.p50, s.p90, s.p99, s.max) == pytest.approx((10, 550, 550, 910, 991, 1000))
    assert latency_stats([]).count == 0
    assert latency_stats([]).p50 is None


def test_summary_by_hand():
    records = [
        record(0, ttft_s=0.1, e2e_s=0.5, slo_tier="gold", variant="small"),
        record(1, ttft_s=0.3, e2e_s=0.9, slo_tier="gold", variant="small", slo_met=False),
        record(2, ttft_s=0.2, e2e_s=0.7, variant="large"),
        record(3, status=429, error_type="overloaded", ttft_s=None, e2e_s=0.01, output_tokens=0, slo_tier="gold"),
        record(4, status=429, error_type="overloaded", ttft_s=None, e2e_s=0.01, output_tokens=0),
        record(5, status=500, error_type="http_500", ttft_s=None, e2e_s=0.02, output_tokens=0),
        record(6, status=None, error_type="timeout", ttft_s=None, e2e_s=4.0, output_tokens=0),
    ]
    s = summarize(records)
    assert (s.requests, s.succeeded, s.failed) == (7, 3, 4)
    assert s.duration_s == pytest.approx(10.0)  # first send at 0, last end at 6 + 4.0
    assert s.offered_rate == pytest.approx(1.0)  # 7 sends over 6 s: 6 gaps of 1 s
    assert s.request_rate == pytest.approx(0.7)
    assert s.output_tokens == 60
    assert s.output_tokens_per_s == pytest.approx(6.0)
    assert s.input_tokens == 30
    assert s.errors_by_status == {"429": 2, "500": 1, NO_STATUS: 1}
    assert s.errors_by_type == {"http_500": 1, "overloaded": 2, "timeout": 1}
    # Latencies only over the 3 successes.
    assert (s.ttft_ms.count, s.ttft_ms.p50, s.ttft_ms.max) == pytest.approx((3, 200, 300))
    assert s.e2e_ms.mean == pytest.approx(700)
    assert s.itl_ms.count == 6
    assert s.itl_ms.mean == pytest.approx(20)
    assert s.tpot_ms.p99 == pytest.approx(20)
    # Two of seven met their SLO: attainment counts failures as misses.
    assert s.slo_met == 2
    assert s.slo_attainment == pytest.approx(2 / 7)
    assert s.goodput == pytest.approx(0.2)
    assert s.by_tier["gold"].model_dump() == {
        "requests": 3,
        "succeeded": 2,
        "slo_met": 1,
        "slo_attainment": 1 / 3,
        "prefix_hit_rate": None,  # no usage said what was cached
    }
    assert s.prefix_hit_rate is None
    assert s.by_variant["small"].requests == 2
    assert s.by_variant["large"].slo_attainment == 1.0


def test_explicit_duration_wins():
    s = summarize([record(0), record(1)], duration_s=4.0)
    assert s.request_rate == pytest.approx(0.5)
    assert s.goodput == pytest.approx(0.5)


def test_empty_run():
    s = summarize([])
    assert (s.requests, s.duration_s, s.request_rate, s.slo_attainment, s.offered_rate) == (
        0,
        0.0,
        0.0,
        0.0,
        None,
    )


def test_summary_is_json():
    s = summarize([record(0)])
    assert type(s).model_validate_json(s.model_dump_json()) == s


def test_the_prefix_hit_rate_counts_only_requests_whose_usage_said():
    told = RequestRecord("a", 0, 0.0, 0.0, None, prompt_tokens=1000, max_tokens=8, cached_tokens=750, variant="v")
    silent = RequestRecord("b", 1, 0.0, 0.0, None, prompt_tokens=1000, max_tokens=8, variant="v")
    failed = RequestRecord("c", 2, 0.0, 0.0, None, prompt_tokens=1000, max_tokens=8, cached_tokens=0)
    failed.error_type = "timeout"
    s = summarize([told, silent, failed])
    assert s.prefix_hit_rate == pytest.approx(0.75)
    assert s.prefill_tokens == 250 + 1000  # what the engines computed for the requests that succeeded
    assert s.by_variant["v"].prefix_hit_rate == pytest.approx(0.75)
