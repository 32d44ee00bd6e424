"""The spike bench's pure parts: replica-seconds, the per-policy report, and the app it deploys."""

from __future__ import annotations

import pytest

from bench.records import RequestRecord
from bench.replicas import ReplicaSample
from bench.spike import QUICK, VARIANT, app_args, policy_report, replica_seconds, stream_cut
from serve_app.config import load_app_config


def _sample(t: float, n: int) -> ReplicaSample:
    return ReplicaSample(t_s=t, variant=VARIANT, replicas=n)


def _record(start_s: float, *, status: int = 200, error: str | None = None, slo_met: bool = True) -> RequestRecord:
    return RequestRecord(
        request_id="r",
        index=0,
        start_time=0.0,
        start_s=start_s,
        arrival_s=start_s,
        prompt_tokens=1,
        max_tokens=1,
        status=status,
        error_type=error,
        slo_met=slo_met,
    )


def test_replica_seconds_integrate_a_step_function_over_the_window():
    samples = [_sample(1.0, 1), _sample(10.0, 3), _sample(20.0, 1)]

    # 1 replica over [0, 10) (the first count holds before the first sample), 3 over [10, 20), 1 over [20, 30).
    assert replica_seconds(samples, 0.0, 30.0) == pytest.approx(10 + 30 + 10)
    assert replica_seconds(samples, 15.0, 25.0) == pytest.approx(5 * 3 + 5 * 1)
    assert replica_seconds([], 0.0, 30.0) == 0.0


def test_a_stream_is_cut_only_when_it_was_accepted_and_failed():
    assert stream_cut(_record(0, error="internal_error"))
    assert not stream_cut(_record(0))
    assert not stream_cut(_record(0, status=429, error="rate_limit_error"))


def test_the_report_splits_attainment_by_phase_and_counts_rejections_and_cuts():
    # Spike from 10 s to 40 s, trace ends at 60 s, at most 3 replicas.
    update = {"spike_start_s": 10.0, "spike_duration_s": 30.0, "after_s": 20.0, "max_replicas": 3}
    shape = QUICK.model_copy(update=update)
    records = [
        _record(5.0),
        _record(15.0, slo_met=False),
        _record(20.0, status=429, error="rate_limit_error", slo_met=False),
        _record(25.0),
        _record(45.0, error="internal_error", slo_met=False),
        _record(50.0),
    ]
    samples = [_sample(0.0, 1), _sample(20.0, 3), _sample(45.0, 2), _sample(52.0, 1)]

    report = policy_report("engine_load", records, samples, shape)

    assert report.phases["before"].slo_attainment == 1.0
    assert report.phases["during"].slo_attainment == pytest.approx(1 / 3)
    assert report.phases["after"].slo_attainment == 0.5
    assert (report.rejected, report.streams_cut, report.other_failures) == (1, 1, 0)
    assert (report.peak_replicas, report.replicas_at_end) == (3, 1)
    assert report.scaled_down_after_s == pytest.approx(12.0)
    assert report.replica_seconds == pytest.approx(20 * 1 + 25 * 3 + 7 * 2 + 8 * 1)
    assert report.fixed_fleet_replica_seconds == 3 * 60


@pytest.mark.parametrize("policy", ["engine_load", "ongoing_requests"])
def test_the_benched_app_is_a_valid_config(policy):
    variant = load_app_config(app_args(policy, QUICK)).variants[0]

    assert variant.autoscaling is not None and variant.autoscaling.policy == policy
    assert variant.autoscaling.max_replicas == QUICK.max_replicas


def test_an_emulated_preset_is_benched_with_the_shapes_batch_slots_and_a_scaled_cold_start():
    engine = load_app_config(app_args("engine_load", QUICK, "emulated:h200-llama-3.1-8b-int4", 0.1)).variants[0].engine

    assert engine.backend == "emulated"
    assert engine.engine_profile().max_running_requests == QUICK.max_running_requests  # type: ignore[union-attr]
    assert engine.startup_time_scale == 0.1  # type: ignore[union-attr]
