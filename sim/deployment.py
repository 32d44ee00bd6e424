"""One variant's Serve deployment in the simulation: its replicas, the handle queue in front of them, and
the GPU time they hold.

Like a Serve handle, a request goes to the less loaded of two randomly drawn ready replicas (power of two
choices, ``request_router/pow_2_router.py``), never to one already holding ``max_ongoing_requests``; when
every replica is full (or none is ready yet) it waits at the handle in arrival order. ``replica_choice
"least_prefill"`` instead takes the replica with the least prompt work queued (then the fewest ongoing
requests) as the serve app's request router (serve_app/replica_router.py) sees it: each ingress replica's
handle knows the prompts it sent itself, and estimates what is left of them at the router's prefill rate; where
larger, it takes the replica's last report as of the ingress's last read of the board, plus its own prompts sent
since (``router.replica_backlog.seen_backlog``, the same function). Without the reports, with two ingresses each
would see half the fleet's sends, and a short request would land behind a long prefill the other ingress sent
(``sim/ingress.py`` keeps the rest of each ingress's view apart). Scaling down stops starting replicas
first, then drains the least loaded ready ones: they take nothing new and release their GPUs once their open
requests finish (Serve's graceful shutdown).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator

from engines.profile import EngineProfile
from router.config import ReplicaChoice
from router.replica_backlog import prefill_ahead, seen_backlog
from sim.replica import ReplicaState, SimReplica
from sim.request import SimRequest


class SimDeployment:
    def __init__(
        self,
        name: str,
        profile: EngineProfile,
        max_ongoing_requests: int,
        seed: int = 0,
        replica_choice: ReplicaChoice = "power_of_two",
        *,
        ingress_replicas: int = 1,
        prefill_tokens_per_s: float | None = None,
    ) -> None:
        self.name = name
        self.replica_choice = replica_choice
        # least_prefill: what each ingress's handle sent each replica and has not seen complete, by request
        # index: (prompt tokens, send time); drained at the rate the app's request router is configured with.
        self._sent: list[dict[str, dict[int, tuple[int, float]]]] = [{} for _ in range(ingress_replicas)]
        # least_prefill: each ingress's copy of the replicas' last reports, as of its last read of the stats board
        # (replica id -> (queued prompt tokens, when measured)); the simulation sets it at each ingress's refresh.
        self.reported: list[dict[str, tuple[int, float]]] = [{} for _ in range(ingress_replicas)]
        self._prefill_tokens_per_s = prefill_tokens_per_s or profile.prefill_tokens_per_s
        self.profile = profile
        self.max_ongoing_requests = max_ongoing_requests
        self.replicas: list[SimReplica] = []  # starting, ready and draining ones
        self.ready: list[SimReplica] = []
        self.handle_queue: deque[SimRequest] = deque()
        self._rng = random.Random(f"{seed}:{name}:pow2")
        self._ids = 0
        self._gpu_seconds = 0.0
        self._alive_gpus = 0
        self._last_change_s = 0.0

    # ------------------------------------------------------------------ counts

    @property
    def starting(self) -> int:
        return sum(r.state is ReplicaState.STARTING for r in self.replicas)

    @property
    def target(self) -> int:
        """Replicas that count towards the deployment's size: ready and starting (not draining)."""
        return sum(r.state in (ReplicaState.STARTING, ReplicaState.READY) for r in self.replicas)

    def gpu_seconds(self, now: float) -> float:
        return self._gpu_seconds + self._alive_gpus * (now - self._last_change_s)

    def _account(self, now: float, delta_replicas: int) -> None:
        self._gpu_seconds = self.gpu_seconds(now)
        self._last_change_s = now
        self._alive_gpus += delta_replicas * self.profile.gpus_per_replica

    # ------------------------------------------------------------------ requests

    def dispatch(self, request: SimRequest, now: float) -> tuple[SimReplica, float | None] | None:
        """Hands ``request`` to a replica (the replica and its new iteration end) or queues it (None)."""
        if self.handle_queue:  # keep arrival order: earlier requests go first
            self.handle_queue.append(request)
            return None
        replica = self._pick(request, now)
        if replica is None:
            self.handle_queue.append(request)
            return None
        return replica, self._submit(replica, request, now)

    def drain_handle_queue(self, now: float) -> Iterator[tuple[SimReplica, float | None]]:
        """Sends waiting requests to replicas with room, in order, while there is room."""
        while self.handle_queue:
            replica = self._pick(self.handle_queue[0], now)
            if replica is None:
                return
            yield replica, self._submit(replica, self.handle_queue.popleft(), now)

    def completed(self, replica: SimReplica, request: SimRequest) -> None:
        """The request's stream ended: its handle stops counting it (``on_request_completed``)."""
        self._sent[request.ingress].get(replica.replica_id, {}).pop(request.index, None)

    def _submit(self, replica: SimReplica, request: SimRequest, now: float) -> float | None:
        request.replica = replica.replica_id
        if self.replica_choice == "least_prefill":
            # What the replica must prefill of it: the part of its prompt the replica had not cached.
            tokens = request.prompt_tokens - request.cached_by_replica.get(replica.replica_id, 0)
            self._sent[request.ingress].setdefault(replica.replica_id, {})[request.index] = (tokens, now)
        return replica.submit(request, now)

    def _pick(self, request: SimRequest, now: float) -> SimReplica | None:
        ready = self.ready
        limit = self.max_ongoing_requests
        if not ready:
            return None
        if len(ready) == 1:
            only = ready[0]
            return only if only.ongoing < limit else None
        if self.replica_choice == "least_prefill":
            sent, reported = self._sent[request.ingress], self.reported[request.ingress]
            cached = request.cached_by_replica

            def seen(replica: SimReplica) -> tuple[float, int, float]:
                own = sent.get(replica.replica_id, {})
                report = reported.get(replica.replica_id)
                backlog = seen_backlog(own.values(), report, now, self._prefill_tokens_per_s)
                ahead = prefill_ahead(backlog, request.prompt_tokens, cached.get(replica.replica_id, 0))
                return (ahead, len(own), self._rng.random())  # random: ties spread, as the app's router does

            # Serve probes the first-ranked replica's true queue and moves on when it is full.
            with_room = [r for r in ready if r.ongoing < limit]
            return min(with_room, key=seen) if with_room else None
        a, b = self._rng.sample(ready, 2)
        best = a if a.ongoing <= b.ongoing else b
        if best.ongoing < limit:
            return best
        # Both draws are full: Serve keeps trying others; the least loaded one with room, if any.
        least = min(ready, key=lambda r: r.ongoing)
        return least if least.ongoing < limit else None

    # ------------------------------------------------------------------ scaling

    def add_replica(self, now: float) -> SimReplica:
        self._ids += 1
        replica = SimReplica(f"{self.name}#{self._ids}", self.profile, now + self.profile.startup_s)
        self.replicas.append(replica)
        self._account(now, +1)
        return replica

    def mark_ready(self, replica: SimReplica) -> bool:
        """A started replica serves; False when it was stopped while starting."""
        if replica.state is not ReplicaState.STARTING:
            return False
        replica.state = ReplicaState.READY
        self.ready.append(replica)
        return True

    def remove_replicas(self, count: int, now: float) -> None:
        """Stops ``count`` replicas: starting ones first, then the least loaded ready ones (they drain)."""
        for replica in [r for r in self.replicas if r.state is ReplicaState.STARTING][::-1][:count]:
            self._stop(replica, now)
            count -= 1
        for replica in sorted(self.ready, key=lambda r: r.ongoing)[: max(count, 0)]:
            self.ready.remove(replica)
            replica.state = ReplicaState.DRAINING
            if replica.ongoing == 0:
                self._stop(replica, now)

    def release_if_drained(self, replica: SimReplica, now: float) -> None:
        if replica.state is ReplicaState.DRAINING and replica.ongoing == 0:
            self._stop(replica, now)

    def _stop(self, replica: SimReplica, now: float) -> None:
        replica.state = ReplicaState.STOPPED
        self.replicas.remove(replica)
        self._account(now, -1)
