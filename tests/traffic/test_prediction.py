"""The router's predictions against the outcomes (traffic/prediction.py), on hand-built records."""

from __future__ import annotations

import pytest

from traffic.prediction import prediction_accuracy, ratio_stats
from traffic.records import RequestRecord


def record(variant: str | None, ttft_ms: float | None, predicted_ttft_ms: float | None, **fields) -> RequestRecord:
    return RequestRecord(
        request_id="r",
        index=0,
        start_time=0.0,
        start_s=0.0,
        arrival_s=0.0,
        prompt_tokens=10,
        max_tokens=10,
        ttft_s=None if ttft_ms is None else ttft_ms / 1e3,
        variant=variant,
        predicted_ttft_ms=predicted_ttft_ms,
        **fields,
    )


def test_ratio_stats_are_measured_over_predicted_with_a_median_and_a_p90():
    pairs = [(float(m), 100.0) for m in range(50, 150, 10)]  # ratios 0.5 .. 1.4

    stats = ratio_stats(pairs)

    assert stats.count == 10
    assert stats.p50 == pytest.approx(0.95)
    assert stats.p90 == pytest.approx(1.4)


def test_pairs_without_a_positive_prediction_carry_no_ratio():
    assert ratio_stats([(100.0, 0.0)]).count == 0
    assert ratio_stats([]).p50 is None


def test_accuracy_is_per_variant_over_served_requests_with_predictions():
    records = [
        record("big", 300.0, 150.0, tpot_s=0.1, predicted_tpot_ms=50.0),
        record("big", 100.0, 100.0),
        record("small", 40.0, None),  # an older server: no prediction header
        record(None, None, None, error_type="rate_limit_error", status=429),
        record("big", None, 100.0, error_type="timeout"),  # failed: its outcome is not a latency
    ]

    accuracy = prediction_accuracy(records)

    assert set(accuracy) == {"big"}
    assert accuracy["big"].ttft.count == 2
    assert accuracy["big"].ttft.p50 == pytest.approx(1.5)  # ratios 1.0 and 2.0
    assert (accuracy["big"].tpot.count, accuracy["big"].tpot.p50) == (1, pytest.approx(2.0))


def test_the_servers_timing_splits_the_clients_ttft_into_ingress_engine_and_path():
    # Client TTFT 100 ms = 4 ms in the ingress before dispatch + 60 ms to the first token + 36 ms outside.
    records = [record("big", 100.0, 50.0, server_ingress_ms=4.0, server_engine_ms=60.0)]

    accuracy = prediction_accuracy(records)["big"]

    assert accuracy.ttft.p50 == pytest.approx(2.0)  # what the client saw, against the prediction
    assert accuracy.server_ttft.p50 == pytest.approx(1.28)  # what the router predicts (64 ms), against it
    assert (accuracy.ingress_ms_p50, accuracy.path_ms_p50) == (pytest.approx(4.0), pytest.approx(36.0))
