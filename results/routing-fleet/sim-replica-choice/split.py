"""The simulator's two_variant at capacity (33.59 req/s), 150 s, router ttft_path_ms 60 (as h200/run7), with the
replica choice made four ways:

* least_prefill: the simulator's (each replica's true queued prompt tokens);
* estimated x1: as serve_app/replica_router.py makes it with one ingress: the prompts this ingress sent each
  replica and has not seen end, drained first come first served at the variant's profile prefill rate
  (router.replica_backlog.prefill_backlog), then the fewest of its requests, ties at random;
* estimated x2: the same with two ingresses, each request through ingress index % 2, each knowing only its own;
* reported x2: two ingresses as above, each adding to its own unfinished sends the replica's queued prompt tokens
  as last reported (a snapshot every 0.25 s, the stats board's period) less what it has prefilled since at the
  profile rate, the sends of its own that the snapshot already holds left out: what a replica router reading the
  stats board's per-replica reports would know;
* power_of_two: Serve's default.

Run: python results/routing-fleet/sim-replica-choice/split.py  (a monkeypatch of sim/deployment.py's _pick; the
simulator's code is unchanged).
"""

from __future__ import annotations

import random
import sys

import sim.deployment as D
from router.replica_backlog import prefill_backlog
from sim.scenario import SCENARIOS, simulate

INGRESSES = {"estimated_x1": 1, "estimated_x2": 2, "reported_x2": 2}
REPORT_PERIOD_S = 0.25
_orig_pick = D.SimDeployment._pick
_orig_dispatch = D.SimDeployment.dispatch
_orig_drain = D.SimDeployment.drain_handle_queue
_rng = random.Random(0)


def _pick_estimated(self, request, now):
    ready = self.ready
    limit = self.max_ongoing_requests
    with_room = [r for r in ready if r.ongoing < limit]
    if not with_room:
        return None
    k = INGRESSES[MODE]
    ingress = request.index % k
    sent = self.__dict__.setdefault("_sent", {})
    rate = self.profile.prefill_tokens_per_s

    reports = self.__dict__.setdefault("_reports", {})

    def load(replica):
        mine = sent.setdefault((ingress, replica.replica_id), [])
        mine[:] = [e for e in mine if e[2].end_s is None]  # on_request_completed
        if MODE != "reported_x2":
            return (prefill_backlog([(t, s) for t, s, _ in mine], now, rate), len(mine), _rng.random())
        value, at = reports.get(replica.replica_id, (0.0, float("-inf")))
        if now - at >= REPORT_PERIOD_S:  # a fresh report (the board's period), taken at its own time
            at = now - (now % REPORT_PERIOD_S)
            value = float(replica.queued_prompt_tokens)
            reports[replica.replica_id] = (value, at)
        reported = max(0.0, value - (now - at) * rate)
        since = [(t, s) for t, s, _ in mine if s > at]
        return (reported + prefill_backlog(since, now, rate), len(mine), _rng.random())

    best = min(with_room, key=load)
    sent[(ingress, best.replica_id)].append((request.prompt_tokens, now, request))
    return best


def dispatch(self, request, now):
    if MODE not in INGRESSES:
        return _orig_dispatch(self, request, now)
    if self.handle_queue:
        self.handle_queue.append(request)
        return None
    replica = _pick_estimated(self, request, now) if len(self.ready) > 1 else _orig_pick(self)
    if replica is None:
        self.handle_queue.append(request)
        return None
    return replica, replica.submit(request, now)


def drain_handle_queue(self, now):
    if MODE not in INGRESSES:
        yield from _orig_drain(self, now)
        return
    while self.handle_queue:
        request = self.handle_queue[0]
        replica = _pick_estimated(self, request, now) if len(self.ready) > 1 else _orig_pick(self)
        if replica is None:
            return
        self.handle_queue.popleft()
        yield replica, replica.submit(request, now)


D.SimDeployment.dispatch = dispatch
D.SimDeployment.drain_handle_queue = drain_handle_queue

modes = sys.argv[1:] or ["least_prefill", "estimated_x1", "estimated_x2", "reported_x2", "power_of_two"]
for MODE in modes:
    choice = "power_of_two" if MODE == "power_of_two" else "least_prefill"
    for policy in ("slo", "length_threshold"):
        sc = SCENARIOS["two_variant"](150.0, 4.1984433002780515)
        router = sc.router.model_copy(update={"ttft_path_ms": 60.0})
        sc = sc.model_copy(update={"replica_choice": choice, "router": router})
        _, run = simulate(sc, policy, "static")
        s = run.summary
        tiers = " ".join(f"{k} {100 * v.slo_attainment:.1f}%" for k, v in sorted(s.by_tier.items()))
        print(f"{MODE:14s} {policy:17s} {100 * s.slo_attainment:.1f}%  ({tiers})", flush=True)
