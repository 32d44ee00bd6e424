"""Would the engine replicas' own reports give each ingress's replica choice back what several ingresses lose?

ingress_views.py (beside this) found that with two or four ingress replicas the loss of SLO attainment comes from
the handle's replica choice (least_prefill): each handle estimates a replica's prefill backlog from the prompts it
sent itself, and a short request lands behind a long prefill another ingress sent. The engine replicas already post
their unprefilled prompt tokens to the stats board (``queued_prompt_tokens``, every ``STATS_PERIOD_S``), which each
ingress reads every ``REFRESH_PERIOD_S``. Here each handle instead takes a replica's backlog as that report (as of the
ingress's last refresh) drained at the prefill rate, plus its own prompts sent after the report was taken: the same
"report, then own sends since" rule the variant-level in-flight book follows (router/inflight.py); and the larger of
that and the handle's own estimate (what a backend that reports no queued prompt tokens, trtllm's, would get).

    PYTHONPATH=.:results/routing-fleet/sim-drift-s15 python results/streaming/session25/refresh/reported_backlog.py \
        [duration_s] [seeds]
"""

from __future__ import annotations

import sys
from collections import deque

import capacity  # session 15's shared fleet run (results/routing-fleet/sim-drift-s15 on the path)

from router.replica_backlog import prefill_backlog
from sim.deployment import SimDeployment
from sim.replica import LoadReport, SimReplica
from sim.request import SimRequest
from sim.simulator import Simulation


class ReportedBacklogDeployment(SimDeployment):
    history: dict[str, deque[LoadReport]]
    snapshot_s: list[float]  # per ingress, its last refresh of the board (from the simulation's ingresses)
    at_least_own = False  # True: never less than the handle's own estimate (a backend that reports 0 loses nothing)

    def _pick(self, request: SimRequest, now: float) -> SimReplica | None:
        ready = self.ready
        if self.replica_choice != "least_prefill" or len(ready) < 2:
            return super()._pick(request, now)
        sent = self._sent[request.ingress]
        read_at = self.snapshot_s[request.ingress]

        def seen(replica: SimReplica) -> tuple[float, int, float]:
            own = sent.get(replica.replica_id, {})
            known = [r for r in self.history.get(replica.replica_id, ()) if r.at_s <= read_at]
            items = list(own.values())
            backlog = prefill_backlog(items, now, self._prefill_tokens_per_s)
            if known:
                report = known[-1]
                items = [(report.queued_prompt_tokens, report.at_s)] + [i for i in items if i[1] > report.at_s]
                reported = prefill_backlog(items, now, self._prefill_tokens_per_s)
                backlog = max(backlog, reported) if self.at_least_own else reported
            return (backlog, len(own), self._rng.random())

        with_room = [r for r in ready if r.ongoing < self.max_ongoing_requests]
        return min(with_room, key=seen) if with_room else None


class ReportedBacklog(Simulation):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._history: dict[str, deque[LoadReport]] = {}
        for deployment in self.deployments.values():
            deployment.__class__ = ReportedBacklogDeployment
            deployment.history = self._history
        self._refresh_times()

    def _refresh_times(self) -> None:
        for deployment in self.deployments.values():
            deployment.snapshot_s = [ingress.snapshot_s for ingress in self.ingresses]

    def _post_report(self, replica: SimReplica, now: float) -> None:
        super()._post_report(replica, now)
        if replica.report is not None and replica.report.at_s == now:
            self._history.setdefault(replica.replica_id, deque(maxlen=4)).append(replica.report)

    def _views(self, ingress, now):
        views = super()._views(ingress, now)
        self._refresh_times()
        return views


class AtLeastOwn(ReportedBacklog):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for deployment in self.deployments.values():
            deployment.at_least_own = True


def main() -> None:
    duration_s = float(sys.argv[1]) if len(sys.argv) > 1 else 150.0
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    for ingress_replicas in (1, 2, 4):
        for kind in (Simulation, ReportedBacklog, AtLeastOwn):
            rows = [
                capacity.summary(capacity.run(kind, "slo", duration_s, seed=s, ingress_replicas=ingress_replicas)[0])
                for s in range(seeds)
            ]
            label = {Simulation: "own sends (as the stack)", ReportedBacklog: "report + own sends since"}.get(
                kind, "the larger of the two"
            )
            print(f"{ingress_replicas} ingresses, {label}: " + " | ".join(rows), flush=True)


if __name__ == "__main__":
    main()
