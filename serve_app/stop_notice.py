"""The stop notice: ``variant-serve run`` tells the engine replicas the server is stopping, before Serve stops.

Serve's own shutdown (``serve.shutdown``) stops the proxy first (HAProxy is killed at once), then drains the
ingress, then the engines: a stream in flight is cut with the client's connection, with no error event and no
``data: [DONE]``. So before it, the stopping process (serve_app/supervisor.py) posts a notice in the cluster's
key-value store (GCS internal KV); every engine replica started under it watches for the notice and, when it comes,
shuts its engine down. The engine's contract ends each open stream with ``EngineDeadError`` (engines/protocol.py),
which the ingress, still running behind a live proxy, sends to its client as an ``engine_unavailable`` error event
and ``data: [DONE]``; a request not yet streaming gets a 503. Each replica acknowledges by removing its entry once
its streams have ended, and the stopping process waits for every entry (bounded) before it ends the cluster.

Replicas watch only where ``VARIANT_SERVE_RUN_ID`` is in their environment: the local cluster of a
``variant-serve run``, whose processes inherit it. Elsewhere (``serve run``, ``serve deploy``, a cluster started by
``ray start``) nothing is polled and the shutdown is Serve's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable

logger = logging.getLogger("ray.serve")

RUN_ID_ENV = "VARIANT_SERVE_RUN_ID"
NAMESPACE = "variant_serve"
WATCH_PERIOD_S = 0.25  # how often a replica looks for the notice: a GCS read, cheap beside a replica's own traffic


def _notice_key(run_id: str) -> bytes:
    return f"stop/{run_id}".encode()


def _entry_prefix(run_id: str) -> bytes:
    return f"watching/{run_id}/".encode()


class StopWatch:
    """One engine replica's watch for the notice; ``on_stop`` runs once when it comes."""

    def __init__(self, run_id: str, replica_id: str, on_stop: Callable[[], Awaitable[None]]) -> None:
        self._notice = _notice_key(run_id)
        self._entry = _entry_prefix(run_id) + replica_id.encode()
        self._on_stop = on_stop
        self.stopping = False  # the notice came: on_stop has started
        self._task = asyncio.get_running_loop().create_task(self._watch())

    @classmethod
    def start(cls, replica_id: str, on_stop: Callable[[], Awaitable[None]]) -> StopWatch | None:
        """A watch, in a replica of a ``variant-serve run`` cluster; None elsewhere."""
        run_id = os.environ.get(RUN_ID_ENV)
        return cls(run_id, replica_id, on_stop) if run_id else None

    async def _watch(self) -> None:
        from ray.experimental import internal_kv as kv

        with contextlib.suppress(Exception):  # unlisted, the stopping process just does not wait for this replica
            await asyncio.to_thread(kv._internal_kv_put, self._entry, b"1", True, namespace=NAMESPACE)
        try:
            while not await self._noticed(kv):
                await asyncio.sleep(WATCH_PERIOD_S)
            logger.info("the server is stopping: shutting the engine down, ending its open streams")
            self.stopping = True
            try:
                await self._on_stop()
            except Exception:
                logger.exception("the engine failed to shut down on the stop notice")
        finally:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(kv._internal_kv_del, self._entry, namespace=NAMESPACE)

    async def _noticed(self, kv) -> bool:
        try:
            return await asyncio.to_thread(kv._internal_kv_exists, self._notice, namespace=NAMESPACE)
        except Exception:  # the store unreachable for a moment: look again
            return False

    async def close(self) -> None:
        """Stops watching and withdraws the replica's entry (it is going away: a scale-down, Serve's shutdown); once
        the notice came, waits for ``on_stop`` to finish instead."""
        if not self.stopping:
            self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task


def announce_stop(run_id: str, timeout_s: float) -> bool:
    """Posts the notice, then waits until every watching replica has acted on it (at most ``timeout_s``; a replica
    that died without acknowledging holds it that long). True when all did. Called by a Ray driver."""
    from ray.experimental import internal_kv as kv

    kv._internal_kv_put(_notice_key(run_id), b"1", True, namespace=NAMESPACE)
    deadline = time.monotonic() + timeout_s
    while kv._internal_kv_list(_entry_prefix(run_id), namespace=NAMESPACE):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
