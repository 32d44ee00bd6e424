"""The spike scenario in virtual time: the bench's fleet and trace through the production router and policy."""

from __future__ import annotations

from bench.spike_fleet import FLEET
from bench.spike_report import mode_report
from sim.spike import sim_variants, simulate_spike
from traffic.arrivals import SpikeArrivals

STEP = SpikeArrivals(base_rate=1.0, spike_rate=10.0, start_s=10.0, duration_s=30.0)


def test_the_fixed_fleet_holds_every_variant_at_max_and_the_scaled_ones_start_at_min():
    fixed = {v.name: v for v in sim_variants(FLEET, "fixed")}
    scaled = {v.name: v for v in sim_variants(FLEET, "engine_load", extra_startup_s=2.0)}

    for spec in FLEET.variants:
        assert fixed[spec.name].num_replicas == spec.max_replicas and fixed[spec.name].autoscaling is None
        assert scaled[spec.name].num_replicas == spec.min_replicas
        assert scaled[spec.name].autoscaling is not None
        preset_start = spec.profile(FLEET.startup_time_scale).startup_s
        assert scaled[spec.name].profile.startup_s == preset_start + 2.0


def test_a_step_scales_the_cheap_variant_out_and_the_report_reads_the_simulated_run():
    records, samples = simulate_spike(FLEET, STEP, 60.0, "engine_load")
    report = mode_report("engine_load", "sim", records, samples, FLEET, STEP.peak_windows(), 60.0)

    small = FLEET.variants[0]
    assert report.variants[small.name].peak_replicas > small.min_replicas
    assert report.streams_cut == 0
    assert report.replica_ratio < 1.0
    assert report.requests == len(records) > 0


def _first_time_at(samples, variant: str, replicas: int) -> float:
    return min(s.t_s for s in samples if s.variant == variant and s.replicas >= replicas)


def test_a_start_queue_brings_a_scale_ups_replicas_one_after_another():
    from sim.replica_starts import ProcessStarts

    small = FLEET.variants[0]
    _, free = simulate_spike(FLEET, STEP, 60.0, "engine_load")
    _, queued = simulate_spike(FLEET, STEP, 60.0, "engine_load", process_starts=ProcessStarts(1, 2.0))

    # One process at a time, 2 s each: the last replicas of the step's scale-up come seconds after the first.
    first = _first_time_at(queued, small.name, small.min_replicas + 1)
    full = _first_time_at(queued, small.name, small.max_replicas)
    assert full - first >= 2.0 * (small.max_replicas - small.min_replicas - 2)
    assert full > _first_time_at(free, small.name, small.max_replicas)
