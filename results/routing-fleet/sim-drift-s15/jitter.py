"""Does the real stack's first-token jitter explain slo's drift below the simulator (docs/routing.md, session 15)?

The simulator's two_variant fleet at capacity, 150 s, slo and length_threshold, twice: as the simulator runs it, and
with each request's first token (and its last) reaching the ingress later by a delay drawn from what run9 measured
beyond the simulator under length_threshold, whose routing is the same in both (per variant: the real engine span,
dispatch to first delta, less the simulated TTFT of the same request, floored at 0). The router learns from the late
first tokens as the real ingress does, and the client waits for them.

    PYTHONPATH=. python results/routing-fleet/sim-drift-s15/jitter.py [duration_s] [seeds]
"""

from __future__ import annotations

import gzip
import json
import random
import sys
from collections import Counter
from pathlib import Path

from bench.fleet import fleet_scenario
from sim.capacity import estimate_capacity
from sim.scenario import SCENARIOS
from sim.simulator import Simulation
from sim.workload import sim_requests

RUN9 = Path(__file__).parent.parent / "h100" / "run9-s15" / "compact.jsonl.gz"


def measured_extra_ms() -> dict[str, list[float]]:
    with gzip.open(RUN9, "rt") as f:
        rows = [json.loads(line) for line in f]
    extra: dict[str, list[float]] = {}
    for r in rows:
        if r["policy"].startswith("length_threshold") and r["engine_ms"] is not None and r["sim_ttft"] is not None:
            extra.setdefault(r["variant"], []).append(max(0.0, r["engine_ms"] - r["sim_ttft"]))
    return extra


class JitteredSimulation(Simulation):
    """The simulator with each first token reaching the ingress late by a measured delay (and the last as late)."""

    def __init__(self, *args, extra_ms: dict[str, list[float]], jitter_seed: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._extra_ms = extra_ms
        self._rng = random.Random(jitter_seed)
        self._late_s: dict[int, float] = {}  # id(request) -> its delay, until it closes
        self._ticket_late_s: dict[int, float] = {}  # id(ticket) -> the same, until the book hears of its first token
        book_first_token = self.book.first_token
        self.book.first_token = lambda ticket, at: book_first_token(
            ticket, at + self._ticket_late_s.pop(id(ticket), 0.0)
        )

    def _step_end(self, replica, now):
        if not getattr(replica, "delays_first_tokens", False):
            # Once per replica: its requests that start in a step get their delay before the base class reads them.
            step_end = replica.step_end

            def delayed(at):
                result = step_end(at)
                for request in replica.started:
                    late = self._rng.choice(self._extra_ms[request.variant]) / 1e3
                    self._late_s[id(request)] = late
                    request.first_token_s += late
                    if request.ticket is not None:
                        self._ticket_late_s[id(request.ticket)] = late
                return result

            replica.step_end = delayed
            replica.delays_first_tokens = True
        return super()._step_end(replica, now)

    def _close(self, request) -> None:
        request.end_s += self._late_s.pop(id(request), 0.0)
        super()._close(request)


def run(policy: str, duration_s: float, seed: int, extra_ms: dict[str, list[float]] | None):
    make = SCENARIOS["two_variant"]
    estimate = estimate_capacity(fleet_scenario(make, duration_s, 1.0, 1.0))
    scenario = fleet_scenario(make, duration_s, estimate.rate_scale, 1.0)
    router = scenario.router.model_copy(update={"policy": policy})
    variants = [p.sim_variant("static") for p in scenario.pools]
    kwargs = dict(seed=scenario.seed + seed, replica_choice=scenario.replica_choice)
    if extra_ms is None:
        sim = Simulation(variants, router, **kwargs)
    else:
        sim = JitteredSimulation(variants, router, extra_ms=extra_ms, jitter_seed=seed, **kwargs)
    result = sim.run(sim_requests(scenario.streams, scenario.duration_s, router), horizon_s=duration_s)
    return result.records


def summary(records) -> str:
    met = sum(1 for r in records if r.slo_met) / len(records)
    tiers = Counter()
    for r in records:
        if r.slo_tier == "standard" and r.variant and "8b" in r.variant:
            tiers["standard on 8B"] += 1
    inter = [r for r in records if r.slo_tier == "interactive"]
    inter_met = sum(1 for r in inter if r.slo_met) / max(1, len(inter))
    return f"{100 * met:.1f}% (interactive {100 * inter_met:.1f}%, standard on the 8B {tiers['standard on 8B']})"


def main() -> None:
    duration_s = float(sys.argv[1]) if len(sys.argv) > 1 else 150.0
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    extra = measured_extra_ms()
    for name, values in sorted(extra.items()):
        values_sorted = sorted(values)
        pick = [values_sorted[int(q * (len(values_sorted) - 1))] for q in (0.5, 0.9, 0.99)]
        print(
            f"measured extra first-token delay, {name}: "
            f"p50 / p90 / p99 {pick[0]:.1f} / {pick[1]:.1f} / {pick[2]:.1f} ms"
        )
    # The 70B's figure under length_threshold is mostly its saturated queue, which the two sides filled differently,
    # not the path: the 8B's (lightly loaded there) is the cleaner measure of what the path adds; both are tried.
    small = next(name for name in extra if "8b" in name)
    delays = {"each variant's own": extra, "the 8B's for both": {name: extra[small] for name in extra}}
    for policy in ("slo", "length_threshold"):
        for seed in range(seeds):
            line = f"{policy} seed {seed}: simulator {summary(run(policy, duration_s, seed, None))}"
            for label, delay in delays.items():
                line += f" | with {label} delay {summary(run(policy, duration_s, seed, delay))}"
            print(line)


if __name__ == "__main__":
    main()
