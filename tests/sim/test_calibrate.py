"""Calibration: the comparison arithmetic, and a run replayed on its own engine model matching itself."""

from __future__ import annotations

import pytest

from sim.calibrate import calibrate, compare, relative_error
from tests.sim.helpers import profile, simulated_run
from traffic.summary import summarize


def test_relative_error_is_signed_and_undefined_without_both_values():
    assert relative_error(100.0, 125.0) == pytest.approx(0.25)
    assert relative_error(100.0, 80.0) == pytest.approx(-0.2)
    assert relative_error(None, 1.0) is None
    assert relative_error(0.0, 1.0) is None


def test_compare_lists_ttft_and_tpot_percentiles():
    records = simulated_run(profile())
    rows = compare(summarize(records), summarize(records))

    assert [(r.metric, r.percentile) for r in rows] == [
        (m, p) for m in ("ttft_ms", "tpot_ms") for p in ("p50", "p90", "p99")
    ]
    assert all(r.relative_error == 0.0 for r in rows)


def test_replaying_a_run_on_its_own_engine_model_reproduces_it():
    p = profile()
    result = calibrate(simulated_run(p), p)

    assert result.requests == 200
    for metric in ("ttft_ms", "tpot_ms"):
        error = result.row(metric, "p50").relative_error
        assert error is not None and abs(error) < 0.01


def test_a_profile_twice_too_slow_shows_up_as_a_large_error():
    result = calibrate(simulated_run(profile()), profile(step_ms_at_batch_1=20.0, prefill_tokens_per_s=5_000.0))

    assert (result.row("ttft_ms", "p50").relative_error or 0.0) > 0.5
    assert (result.row("tpot_ms", "p50").relative_error or 0.0) > 0.5
