"""Session 21: the step (and the wave) in the simulator over 20 seeds, with and without the router counting replicas
about to serve (30e793c), at the 8B's max_ongoing_requests 4 (the fleet's) and 2 (its batch slots: no queue at a
replica, everything beyond waits at Serve's handle for the first slot anywhere). 0.9 s beyond each cold start.
python results/spike/starting_s21/sweep.py [SHAPE ...]"""

import statistics
import sys

import sim.simulator
from bench.spike_report import mode_report
from bench.spike_fleet import DURATIONS_S, SHAPES, fleet_for
from sim.spike import simulate_spike

counted = sim.simulator.starting_ready_in_ms


def not_counted(serves_at, now):
    return 0, 0.0


for shape_name in sys.argv[1:] or ["step"]:
    base = fleet_for(shape_name)
    for ongoing in (4, 2):
        variants = [v.model_copy(update={"max_ongoing_requests": ongoing}) if v.name == "llama-8b-int4" else v
                    for v in base.variants]
        fleet = base.model_copy(update={"variants": variants})
        for label, fn in (("not counted", not_counted), ("counted", counted)):
            sim.simulator.starting_ready_in_ms = fn
            during, replica_s = [], []
            for seed in range(20):
                shape = SHAPES[shape_name]
                records, samples = simulate_spike(
                    fleet, shape, DURATIONS_S[shape_name], "engine_load", seed=seed, extra_startup_s=0.9
                )
                report = mode_report("engine_load", "sim", records, samples, fleet, shape.peak_windows(),
                                     DURATIONS_S[shape_name])
                during.append(report.during.slo_attainment)
                replica_s.append(report.replica_ratio)
            print(f"{shape_name} max_ongoing {ongoing} {label:12s}: during seed 0 {during[0]:.1%}, "
                  f"20 seeds mean {statistics.mean(during):.1%} (min {min(during):.1%}), "
                  f"replica-s / fixed {statistics.mean(replica_s):.3f}", flush=True)
