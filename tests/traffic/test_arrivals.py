import itertools
import random
import statistics

import pytest
from pydantic import TypeAdapter

from traffic import arrivals
from traffic.arrivals import ArrivalSpec, arrival_times


def take(it, n):
    return list(itertools.islice(it, n))


def window_counts(times, edges):
    return [sum(lo <= t < hi for t in times) for lo, hi in itertools.pairwise(edges)]


def test_constant_is_evenly_spaced_from_zero():
    assert take(arrivals.constant(4.0), 5) == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])


def test_poisson_mean_rate_and_exponential_gaps():
    times = take(arrivals.poisson(5.0, random.Random(7)), 20_000)
    gaps = [b - a for a, b in itertools.pairwise([0.0, *times])]
    # Rate estimate n / T has relative sd 1/sqrt(n) ~ 0.7 %: 3 % is over 4 sd.
    assert len(times) / times[-1] == pytest.approx(5.0, rel=0.03)
    # Exponential gaps: standard deviation equals the mean.
    assert statistics.stdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, rel=0.05)
    assert all(g >= 0 for g in gaps)


def test_seed_fixes_the_times():
    spec = arrivals.PoissonArrivals(rate=3.0)
    assert take(arrival_times(spec, 1), 50) == take(arrival_times(spec, 1), 50)
    assert take(arrival_times(spec, 1), 50) != take(arrival_times(spec, 2), 50)


def test_even_spike_has_the_step_shape():
    times = take(arrivals.step_spike(1.0, 10.0, start_s=5.0, duration_s=2.0, rng=None), 28)
    assert times[:6] == pytest.approx([0, 1, 2, 3, 4, 5])
    spike = times[5:26]  # 5.0, 5.1, ..., 7.0
    assert [b - a for a, b in itertools.pairwise(spike)] == pytest.approx([0.1] * 20)
    assert times[25:] == pytest.approx([7.0, 8.0, 9.0])


def test_poisson_spike_counts_per_window():
    spec = arrivals.SpikeArrivals(base_rate=10, spike_rate=50, start_s=100, duration_s=20)
    times = list(itertools.takewhile(lambda t: t < 220, arrival_times(spec, 3)))
    base_before, spike, base_after = window_counts(times, [0, 100, 120, 220])
    # Each window expects 1000 arrivals (sd ~32): 10 % is three sd.
    assert base_before == pytest.approx(1000, rel=0.1)
    assert spike == pytest.approx(1000, rel=0.1)
    assert base_after == pytest.approx(1000, rel=0.1)


def test_spike_starting_at_zero_and_silent_base_is_finite():
    times = list(arrivals.step_spike(0.0, 10.0, start_s=0.0, duration_s=1.0, rng=None))
    assert len(times) == 10
    assert times == pytest.approx([i / 10 for i in range(10)])


def test_bursts_arrive_together():
    assert take(arrivals.bursts(3, 2.0), 7) == [0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 4.0]


def test_replay_shifts_and_speeds_up():
    assert list(arrivals.replay([100.0, 101.0, 103.0], speedup=2.0)) == [0.0, 0.5, 1.5]


@pytest.mark.parametrize(
    "segments",
    [[], [(1.0, 2.0)], [(0.0, 1.0), (5.0, 1.0), (3.0, 1.0)], [(0.0, -1.0)]],
)
def test_piecewise_rejects_bad_segments(segments):
    with pytest.raises(ValueError):
        next(arrivals.piecewise(segments, None))


def test_specs_parse_by_kind():
    adapter = TypeAdapter(ArrivalSpec)
    spec = adapter.validate_python({"kind": "bursts", "size": 4, "period_s": 1.5})
    assert take(arrival_times(spec, 0), 5) == [0.0, 0.0, 0.0, 0.0, 1.5]
    assert take(arrival_times(adapter.validate_python({"kind": "constant", "rate": 2}), 0), 2) == [0.0, 0.5]
    with pytest.raises(ValueError):
        adapter.validate_python({"kind": "poisson", "rate": 0})


# --- spike shapes -------------------------------------------------------------------------------


def test_gamma_marks_keep_the_rate_and_raise_the_burstiness():
    times = take(arrivals.piecewise([(0.0, 5.0)], random.Random(3), gamma_shape=0.5), 20_000)
    gaps = [b - a for a, b in itertools.pairwise([0.0, *times])]

    assert len(times) / times[-1] == pytest.approx(5.0, rel=0.05)
    # Gamma of shape k: coefficient of variation 1 / sqrt(k) = 1.41 (Poisson: 1).
    assert statistics.stdev(gaps) / statistics.mean(gaps) == pytest.approx(2**0.5, rel=0.08)


def test_a_ramp_climbs_holds_and_comes_back_down():
    ramp = arrivals.RampArrivals(base_rate=1.0, peak_rate=9.0, start_s=10.0, ramp_s=20.0, hold_s=10.0, step_s=5.0)

    rates = dict(ramp.segments())
    assert rates[0.0] == 1.0 and rates[60.0] == 1.0  # base before and after
    assert rates[10.0] == pytest.approx(2.0) and rates[25.0] == pytest.approx(8.0)  # mid-step rates, rising
    assert rates[30.0] == rates[35.0] == 9.0  # the hold
    assert rates[40.0] == pytest.approx(8.0)  # and down again
    assert ramp.peak_windows() == [(10.0, 60.0)]


def test_the_diurnal_wave_runs_trough_to_crest_to_trough_and_its_crest_is_the_peak_window():
    wave = arrivals.WaveArrivals(low_rate=1.0, high_rate=11.0, period_s=100.0)
    sharp = wave.model_copy(update={"sharpness": 2.0})

    assert wave.rate_at(0.0) == pytest.approx(1.0) and wave.rate_at(50.0) == pytest.approx(11.0)
    assert wave.peak_windows() == [pytest.approx((25.0, 75.0))]  # above the midpoint (6 req/s) half the time
    (start, end) = sharp.peak_windows()[0]
    assert sharp.rate_at(start) == pytest.approx(6.0) and sharp.rate_at(end) == pytest.approx(6.0)
    assert end - start < 50.0  # a sharper crest is shorter
    assert wave.segments()[-1] == (100.0, 0.0)  # one period, then no more arrivals


def test_a_burst_train_alternates_bursts_and_the_base_rate():
    train = arrivals.BurstTrainArrivals(base_rate=1.0, burst_rate=10.0, start_s=5.0, burst_s=5.0, gap_s=10.0, count=2)

    assert train.segments() == [(0.0, 1.0), (5.0, 10.0), (10.0, 1.0), (20.0, 10.0), (25.0, 1.0)]
    assert train.peak_windows() == [(5.0, 10.0), (20.0, 25.0)]


def test_a_synthesized_trace_follows_its_wave_with_bursty_gaps():
    wave = arrivals.WaveArrivals(low_rate=2.0, high_rate=20.0, period_s=200.0)
    trace = arrivals.TraceArrivals(wave=wave, gamma_shape=0.5)
    times = list(arrival_times(trace, 0))

    crest, trough = window_counts(times, [75.0, 125.0]), window_counts(times, [0.0, 25.0])
    assert crest[0] / 50.0 > 3 * trough[0] / 25.0  # the crest carries the load
    assert max(times) < 200.0  # one period
    assert TypeAdapter(ArrivalSpec).validate_python(trace.model_dump()) == trace
