"""Which replica of a variant takes a request: the one with the least prefill ahead of its first token there.

Serve's default request router (power of two choices) compares ongoing requests, so a short interactive request
goes behind a replica's long prefill as readily as behind a few decoding chats, and misses its TTFT. This router
ranks the variant's replicas by the prompt tokens it estimates each still has to prefill
(``router.replica_backlog``: the prompts this handle sent, drained first come first served at the variant's
prefill rate) plus the part of this request's prompt each has not cached (``GenerationRequest.cached_by_replica``,
from the ingress's prefix index: ``router.replica_backlog.prefill_ahead``), then by how many of its requests each
holds. Serve still probes the first-ranked replica's queue
and moves on to the next when it is full (``max_ongoing_requests``).

Each ingress replica's handle knows what it sent itself; with several ingress replicas that misses the long
prompts the others sent, so where larger it takes each replica's last report on the stats board (its unprefilled
prompt tokens, as the routing table last read them) plus its own prompts sent since (``router.replica_backlog.
seen_backlog``; docs/routing.md). Hooks used
(Ray 2.60's public ``ray.serve.request_router`` API): ``choose_replicas`` returns ranks tried in order;
``on_request_routed`` / ``on_request_completed`` fire once per dispatched request (``_private/router.py``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import importlib
import logging
import random
import threading
import time
from typing import Any

from ray.serve.request_router import FIFOMixin, PendingRequest, ReplicaID, RequestRouter, RunningReplica

from engines.protocol import GenerationRequest
from router.config import LatencyProfile
from router.replica_backlog import prefill_ahead, seen_backlog

# serve.deployment(...).options(request_router_config=...) takes the class by import path.
IMPORT_PATH = "serve_app.replica_router:LeastPrefillRequestRouter"

logger = logging.getLogger("ray.serve")

_SERVED_BY_MAX = 4096


class ReplicaChoiceState:
    """What this process's request routers share with its ingress: which replica each generate call went to, and
    each engine replica's last report on the stats board.

    Owner: this module, which makes the process's one instance, :data:`CHOICE_STATE`. Its writers and readers:

    * ``served_by``: :class:`LeastPrefillRequestRouter` notes the replica each generate call went to, by its
      ``GenerationRequest``'s id (a retry on another replica replaces the first); the pipeline asks for it once
      (:func:`replica_of`), to name it in the response (``x-route-replica``). Bounded to the latest
      ``_SERVED_BY_MAX``: an entry nobody asks for (a request that failed before its first token) must not stay.
    * ``reports``: each engine replica's unprefilled prompt tokens and when it measured them (replica id, Serve's
      ``unique_id`` -> (tokens, ``time.monotonic()``)), as the routing table last read them from the stats board
      (``RoutingTable.refresh``); the routers add their own sends since (``router.replica_backlog.seen_backlog``).

    Thread safety: the routers run in Serve's router thread, the routing table and the pipeline on the ingress's
    event loop. ``served_by`` changes under a lock; ``reports`` is replaced whole, never changed in place, so a
    reader holds one snapshot or the next.

    Serve ships the router class pickled *by value* (``ray.serve.config`` registers this module with cloudpickle), so
    the class the ingress runs carries a copy of this module's globals, this instance among them: a router reaches
    the process's instance through ``sys.modules`` (:func:`_registry`), where the ingress's imports find it.
    """

    def __init__(self) -> None:
        self._served_by: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.reports: dict[str, tuple[int, float]] = {}

    def note_served_by(self, request_id: str, replica: str) -> None:
        with self._lock:
            self._served_by[request_id] = replica
            self._served_by.move_to_end(request_id)
            while len(self._served_by) > _SERVED_BY_MAX:
                self._served_by.popitem(last=False)

    def replica_of(self, request_id: str) -> str | None:
        """The id (Serve's ``unique_id``, as in the stats board and GET /variants) of the replica that the request
        router sent generate request ``request_id`` to, once; None when no router of ours routed it (Serve's default
        router, ``replica_choice: power_of_two``) or it was asked already."""
        with self._lock:
            return self._served_by.pop(request_id, None)

    def note_reports(self, reports: dict[str, tuple[int, float]]) -> None:
        """The replicas' reports as the stats board last showed them (see the class)."""
        self.reports = reports


CHOICE_STATE = ReplicaChoiceState()
replica_of = CHOICE_STATE.replica_of  # what the pipeline asks


def _registry() -> Any:
    """This module as imported in this process (not the by-value copy a router class unpickled carries)."""
    return importlib.import_module(__name__)


def _unique_id(replica_id: ReplicaID) -> str:
    """A ReplicaID's unique_id, the board's name for the replica (anything else, as in tests, by its string)."""
    return str(getattr(replica_id, "unique_id", replica_id))


def _generation(request: PendingRequest | None) -> GenerationRequest | None:
    """The GenerationRequest of a ``generate`` call; None for the other methods (stats, info)."""
    if request is not None:
        for arg in request.args:
            if isinstance(arg, GenerationRequest):
                return arg
    return None


class LeastPrefillRequestRouter(FIFOMixin, RequestRouter):
    def initialize_state(
        self, prefill_tokens_per_s: float = LatencyProfile().prefill_tokens_per_s, **kwargs: Any
    ) -> None:
        self._prefill_tokens_per_s = prefill_tokens_per_s
        self._shared: ReplicaChoiceState = _registry().CHOICE_STATE
        logger.info("least_prefill request router at %.0f prompt tokens/s", prefill_tokens_per_s)
        # replica -> internal request id -> (prompt tokens, send time) of the requests not completed yet
        self._sent: dict[ReplicaID, dict[str, tuple[int, float]]] = {}
        self._replica_added = asyncio.Event()  # set (then replaced) when the long poll brings a new replica

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        now = time.monotonic()
        reported = self._shared.reports
        generation = _generation(pending_request)
        prompt = 0 if generation is None else len(generation.prompt_token_ids)
        cached = {} if generation is None else generation.cached_by_replica

        def load(replica: RunningReplica) -> tuple[float, int, float]:
            sent = self._sent.get(replica.replica_id, {})
            name = _unique_id(replica.replica_id)
            backlog = seen_backlog(sent.values(), reported.get(name), now, self._prefill_tokens_per_s)
            # The prefill ahead of this request's first token there: its queue, and its own uncached prompt.
            ahead = prefill_ahead(backlog, prompt, cached.get(name, 0))
            return (ahead, len(sent), random.random())  # random: spread ties instead of piling on the first

        return [[replica] for replica in sorted(candidate_replicas, key=load)]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        sent = self._sent.setdefault(replica_id, {})
        generation = _generation(pending_request)
        # What the replica must prefill of it: the part of its prompt the replica had not cached.
        tokens = 0 if generation is None else len(generation.prompt_token_ids)
        if generation is not None:
            tokens -= generation.cached_by_replica.get(_unique_id(replica_id), 0)
            self._shared.note_served_by(generation.request_id, _unique_id(replica_id))
        sent[pending_request.metadata.internal_request_id] = (tokens, time.monotonic())

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        sent = self._sent.get(replica_id)
        if sent is not None:
            sent.pop(internal_request_id, None)

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        added = any(r.replica_id not in self.curr_replicas for r in replicas)
        super().update_replicas(replicas)
        if added:
            # Wake the routing tasks sleeping in their backoff (below) on the router's loop, whichever thread the
            # long poll's callback runs in.
            self._event_loop.call_soon_threadsafe(self._wake_backoff)

    def _wake_backoff(self) -> None:
        woken, self._replica_added = self._replica_added, asyncio.Event()
        woken.set()

    async def _backoff(self, attempt: int) -> None:
        """Serve's backoff between routing attempts while every replica is full (ray/serve/_private/request_router/
        request_router.py, 2.60: 25 ms doubling up to ``max_backoff_s``, 0.5 s), cut short when a replica is added:
        under a spike every replica is full, the routing tasks sleep up to 0.5 s each, and a replica the autoscaler
        just started got its first request 0.13-0.43 s after Serve marked it running (the queue waited for the
        sleeps to end). Private hook: without it (another Ray) the backoff is Serve's own."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._replica_added.wait(), timeout=self._compute_backoff_s(attempt))

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self._sent.pop(replica_id, None)
