"""Session 22: the step and the wave in the simulator over 20 seeds, our policy: the fleet's upscale delay (1 s) held
while the SLO breaks too (before), no upscale delay at all (what reacting ~1 s sooner is worth), and the delay skipped
only while the SLO breaks (breaking_upscale_delay_s 0, the default since). 0.9 s beyond each cold start.
python results/spike/urgent_s22/sweep_delay.py [SHAPE ...]"""

import statistics
import sys

from bench.spike_fleet import DURATIONS_S, SHAPES, fleet_for
from bench.spike_report import mode_report
from sim.spike import simulate_spike

for shape_name in sys.argv[1:] or ["step", "diurnal"]:
    base = fleet_for(shape_name)
    for label, delay, breaking in (("held always", 1.0, 1.0), ("none", 0.0, 0.0), ("skipped while breaking", 1.0, 0.0)):
        update = {"upscale_delay_s": delay, "breaking_upscale_delay_s": breaking}
        fleet = base.model_copy(update={"variants": [v.model_copy(update=update) for v in base.variants]})
        during, replica_s = [], []
        for seed in range(20):
            shape = SHAPES[shape_name]
            records, samples = simulate_spike(
                fleet, shape, DURATIONS_S[shape_name], "engine_load", seed=seed, extra_startup_s=0.9
            )
            report = mode_report(
                "engine_load", "sim", records, samples, fleet, shape.peak_windows(), DURATIONS_S[shape_name]
            )
            during.append(report.during.slo_attainment)
            replica_s.append(report.replica_ratio)
        print(
            f"{shape_name} upscale delay {label}: seed 0 {during[0]:.1%}, 20 seeds mean "
            f"{statistics.mean(during):.1%} (min {min(during):.1%}), "
            f"replica-s / fixed {statistics.mean(replica_s):.3f}",
            flush=True,
        )
