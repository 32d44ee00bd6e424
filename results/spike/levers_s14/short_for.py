"""Sim A/B: the predictive term only once the variant has been short for at least MIN_SHORT_S."""

import statistics
import sys

sys.path.insert(0, "/work/main/results/spike/step_s12")
from levers import scale_ups_outside

import serve_app.autoscaling as glue
from bench.spike_fleet import DURATIONS_S, FLEET, SHAPES
from bench.spike_report import mode_report
from router import autoscaling as policy
from sim.replica_starts import ProcessStarts
from sim.spike import simulate_spike

GATED = policy.scaled_ahead
QUEUE = (24, 0.0, 2.7)


def make(min_short):
    def gated(decision, history, ctx, targets):
        if not history:
            return decision
        # how long the demand has been above the running replicas, continuously, up to now
        start = None
        for t, d in reversed(history):
            if d > ctx.current_replicas + 1e-6:
                start = t
            else:
                break
        if start is None or history[-1][0] - start < min_short:
            return decision
        return GATED(decision, history, ctx, targets)

    return gated


def cell(shape):
    att, rat, ups = [], [], []
    for seed in (0, 1, 2):
        records, samples = simulate_spike(
            FLEET, SHAPES[shape], DURATIONS_S[shape], "engine_load", seed=seed, process_starts=ProcessStarts(*QUEUE)
        )
        w = SHAPES[shape].peak_windows()
        r = mode_report("engine_load", "sim", records, samples, FLEET, w, DURATIONS_S[shape])
        att.append(r.during.slo_attainment or 0)
        rat.append(r.replica_ratio)
        ups.append(scale_ups_outside(samples, FLEET.variants[0].name, w))
    return f"{statistics.mean(att):.1%} / {statistics.mean(rat):.3f} / {statistics.mean(ups):.0f}"


shapes = ("step", "ramp", "diurnal", "bursts", "trace")
print("| min short | " + " | ".join(shapes) + " |")
for ms in (0.0, 1.0, 2.0, 3.0):
    glue.scaled_ahead = make(ms)
    print(f"| {ms} | " + " | ".join(cell(s) for s in shapes) + " |", flush=True)
