"""Does the way engine reports reach the real ingress explain slo's drift below the simulator (session 15)?

The simulator snapshots every replica of a variant at one instant every 0.1 s. The real stack does not: each engine
replica posts its stats every 0.25 s (serve_app/engine_deployment.STATS_PERIOD_S) on its own phase, the ingress
fetches the board every 0.1 s, and the view of a variant sums reports of different ages, dated by the oldest
(serve_app/routing.RoutingTable.refresh). This runs the two_variant fleet at capacity, slo and length_threshold, as
the simulator runs it and with reports posted and dated as the real stack does.

    PYTHONPATH=. python results/routing-fleet/sim-drift-s15/staggered.py [duration_s] [seeds]
"""

from __future__ import annotations

import dataclasses
import random
import sys

import capacity  # this folder's shared fleet run (the script's folder is on sys.path)

from router import VariantView
from router.load import decode_pace
from serve_app.engine_deployment import STATS_PERIOD_S
from serve_app.routing import REFRESH_PERIOD_S
from sim.simulator import Simulation


class StaggeredReports(Simulation):
    """The simulator with each replica's figures posted every ``STATS_PERIOD_S`` on its own phase and the ingress's
    view refreshed every ``REFRESH_PERIOD_S`` from the latest posts, dated by the oldest."""

    def __init__(self, *args, phase_seed: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._rng = random.Random(phase_seed)
        self._posts: dict[str, tuple[float, float, tuple]] = {}  # replica -> (posted at, next post, figures)
        self._report_at: dict[str, float | None] = {}

    def _post(self, now: float) -> None:
        for deployment in self.deployments.values():
            for r in deployment.ready:
                post = self._posts.get(r.replica_id)
                if post is not None and now < post[1]:
                    continue
                figures = (
                    r.queued,
                    r.running,
                    r.queued_prompt_tokens,
                    r.kv_used_fraction,
                    r.pace.tpot_ms(now),
                    r.pace.decode_batch(now),
                )
                next_at = now + self._rng.uniform(0.0, STATS_PERIOD_S) if post is None else post[1] + STATS_PERIOD_S
                while next_at <= now:
                    next_at += STATS_PERIOD_S
                self._posts[r.replica_id] = (now, next_at, figures)

    def _views(self, now: float) -> list[VariantView]:
        self._post(now)
        if now - self._snapshot_s >= REFRESH_PERIOD_S:
            self._snapshot_s = now
            self._snapshot = {}
            for name in self.variants:
                view, report_at = self._reported_view(name)
                self._snapshot[name] = view
                self._report_at[name] = report_at
        return [self.book.annotate(view, now, self._report_at[view.name]) for view in self._snapshot.values()]

    def _reported_view(self, name: str) -> tuple[VariantView, float | None]:
        # The simulator's own view, its engine figures replaced by the replicas' latest posts.
        posts = [self._posts[r.replica_id] for r in self.deployments[name].ready if r.replica_id in self._posts]
        figures = [p[2] for p in posts]
        pace_ms, pace_batch = decode_pace((f[4], f[5]) for f in figures)
        view = dataclasses.replace(
            self._snapshot_view(name, self._snapshot_s),
            ready_replicas=len(posts),
            queued_requests=sum(f[0] for f in figures),
            running_requests=sum(f[1] for f in figures),
            queued_prompt_tokens=sum(f[2] for f in figures),
            kv_used_fraction=max((f[3] for f in figures), default=0.0),
            recent_tpot_ms=pace_ms,
            recent_decode_batch=pace_batch,
        )
        return view, (min(p[0] for p in posts) if posts else None)


def run(policy: str, duration_s: float, seed: int, staggered: bool):
    if not staggered:
        return capacity.run(Simulation, policy, duration_s)[0]
    return capacity.run(StaggeredReports, policy, duration_s, phase_seed=seed)[0]


def main() -> None:
    duration_s = float(sys.argv[1]) if len(sys.argv) > 1 else 150.0
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    for policy in ("slo", "length_threshold"):
        plain = capacity.summary(run(policy, duration_s, 0, False))
        for seed in range(seeds):
            print(
                f"{policy}: simulator {plain} | reports as the real stack dates them, phases {seed}: "
                f"{capacity.summary(run(policy, duration_s, seed, True))}"
            )


if __name__ == "__main__":
    main()
