"""Fitting a profile: a run made by a known engine model is fitted back from a wrong start."""

from __future__ import annotations

import pytest

from sim.fit import fit
from tests.sim.helpers import profile, simulated_run


def test_a_run_is_fitted_back_to_the_engine_that_made_it():
    truth = profile(step_ms_at_batch_1=12.0, step_ms_per_extra_seq=1.5, overhead_ms=5.0)
    start = profile(step_ms_at_batch_1=6.0, step_ms_per_extra_seq=0.5, overhead_ms=1.0)

    result = fit(simulated_run(truth), start)

    assert result.error < 0.03
    for metric in ("ttft_ms", "tpot_ms"):
        error = result.calibration.row(metric, "p50").relative_error
        assert error is not None and abs(error) < 0.03
    assert result.profile.max_running_requests == start.max_running_requests  # limits are the config's
    assert "fitted" in result.profile.source


def test_a_kept_figure_stays_as_given_and_an_unknown_one_is_refused():
    truth = profile(step_ms_at_batch_1=12.0, overhead_ms=5.0)
    start = profile(step_ms_at_batch_1=6.0, overhead_ms=5.0)

    result = fit(simulated_run(truth), start, keep=["overhead_ms"])

    assert result.profile.overhead_ms == 5.0
    assert abs(result.profile.step_ms_at_batch_1 - 12.0) < 1.0
    with pytest.raises(ValueError, match="max_running_requests"):
        fit(simulated_run(truth), start, keep=["max_running_requests"])
