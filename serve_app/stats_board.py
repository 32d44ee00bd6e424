"""A small Serve deployment where every engine replica posts its live stats.

The ingress (``GET /variants``) and the router read one snapshot of all replicas of all variants from here,
instead of fanning out to replicas (Serve handles address a deployment, not a replica). Entries expire when
a replica stops posting, so a dead or drained replica drops out on its own.

Replicas whose engine reports its prefix cache post its changes with their stats; each ingress reads them since
its last read (``kv_changes``), for its prefix index (``router/prefix_index.py``).

The other way round, each ingress posts the demand its router redirected away from each variant
(``router.redirect``: spilled to another variant or shed while that one was full), and every engine replica
gets its variant's sum over the ingresses back as the answer to its own post, for the autoscaling policy.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from ray import serve

from engines.kv_blocks import KvEvents
from engines.protocol import EngineStats
from serve_app.kv_log import KvLog

# Generous: a replica busy with long prefills on a small CPU can post late; a dead one still drops out.
STALE_AFTER_S = 10.0


@dataclass(frozen=True, slots=True)
class ReplicaReport:
    """One engine replica's latest stats as the board hands them out: typed from the engine to the router."""

    replica: str  # the replica's id (Serve's unique_id)
    age_s: float  # since the replica posted them
    stats: EngineStats

    def as_json(self) -> dict[str, Any]:
        """``GET /variants``' entry: the id, the age and every stats field, flat."""
        return {"replica": self.replica, "age_s": round(self.age_s, 3), **dataclasses.asdict(self.stats)}


@serve.deployment(
    num_replicas=1,
    ray_actor_options={"num_cpus": 0},
    max_ongoing_requests=10_000,
    logging_config={"enable_access_log": False},  # several posts a second per replica would drown the log
)
class StatsBoard:
    """The board. Its methods are async with nothing awaited inside: Serve runs a sync method in a thread pool
    (``RAY_SERVE_RUN_SYNC_IN_THREADPOOL``, on by default in 2.60), a thread hop per call that cost more than the
    call, at several posts a second per engine replica and ten snapshots a second per ingress replica; on the
    event loop each runs to its end, so no two interleave."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], tuple[float, EngineStats]] = {}
        self._kv: dict[str, KvLog] = {}  # replica -> its prefix cache, where its engine reports one
        self._redirected: dict[str, tuple[float, dict[str, float]]] = {}  # ingress -> (posted, {variant: level})

    async def post(self, variant: str, replica: str, stats: EngineStats, kv: KvEvents | None = None) -> float:
        """Takes a replica's stats (and its prefix cache's changes since its last post, where its engine reports
        them); answers the requests redirected away from its variant, summed over ingresses."""
        now = time.monotonic()
        self._entries[(variant, replica)] = (now, stats)
        if kv is not None:
            self._kv.setdefault(replica, KvLog()).add(kv)
        return sum(
            levels.get(variant, 0.0) for posted, levels in self._redirected.values() if now - posted <= STALE_AFTER_S
        )

    async def redirected(self, source: str, levels: dict[str, float]) -> None:
        """One ingress's redirected demand per variant (``RedirectedDemand.levels``); replaces its last post."""
        self._redirected[source] = (time.monotonic(), levels)

    async def remove(self, variant: str, replica: str) -> None:
        self._entries.pop((variant, replica), None)
        self._kv.pop(replica, None)

    async def kv_changes(self, cursors: dict[str, int]) -> dict[str, tuple[int, KvEvents]]:
        """Per replica with a reported prefix cache, what changed after the reader's ``cursors`` (0: never read),
        with the number to pass next time; replicas with no change are left out."""
        live = {replica for _, replica in self._entries}
        for gone in [r for r in self._kv if r not in live]:  # expired from the board: its cache goes too
            del self._kv[gone]
        out = {}
        for replica, log in self._kv.items():
            change = log.since(cursors.get(replica, 0))
            if change is not None:
                out[replica] = change
        return out

    async def snapshot(self) -> dict[str, list[ReplicaReport]]:
        """Fresh entries grouped by variant."""
        now = time.monotonic()
        out: dict[str, list[ReplicaReport]] = {}
        for (variant, replica), (posted, stats) in list(self._entries.items()):
            age = now - posted
            # A starting replica posts once (EngineStats.starting_ready_in_s) and then nothing until it serves.
            if age > STALE_AFTER_S + stats.starting_ready_in_s:
                del self._entries[(variant, replica)]
                continue
            out.setdefault(variant, []).append(ReplicaReport(replica, age, stats))
        return out
