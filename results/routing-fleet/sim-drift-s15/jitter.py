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
from pathlib import Path

import capacity  # this folder's shared fleet run (the script's folder is on sys.path)

from sim.simulator import Simulation

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
    if extra_ms is None:
        return capacity.run(Simulation, policy, duration_s, seed=seed)[0]
    return capacity.run(JitteredSimulation, policy, duration_s, seed=seed, extra_ms=extra_ms, jitter_seed=seed)[0]


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
            line = f"{policy} seed {seed}: simulator {capacity.summary(run(policy, duration_s, seed, None))}"
            for label, delay in delays.items():
                line += f" | with {label} delay {capacity.summary(run(policy, duration_s, seed, delay))}"
            print(line)


if __name__ == "__main__":
    main()
