"""The load generator in several processes: a closed loop's streams split over N event loops that start together.

Why: one Python process spends about 1.3 ms of CPU to start a streamed request (a new httpx client and its
connection, the request, the SSE reader; 0.6-0.8 ms on a kept connection), measured on this project's 2-core CPU
against a server that answers at once (docs/streaming.md). A closed loop's first round starts every
stream at the same moment, so with 256 streams the last request leaves some 0.2-0.3 s after the first: that wait
is inside its measured TTFT and the level's tokens/s, though the engine alone (bench overhead's direct path) pays
none of it -- the load generator would be part of what it measures. Split over N processes, each starts its share
at once, at the same moment, and the burst's client cost falls N-fold.

The children are spawned once, before anything is timed, and run every level they are given. Their CPU is the load
generator's: ``bench.process_cpu`` counts a spawn child of the bench's own process as the bench's.
Each child runs :func:`bench.loadgen.run_load` on its share, unchanged: one connection per stream, its records as
a single process makes them; this module only splits the work and merges the records on one time base.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import multiprocessing
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from bench.client import TargetConfig
from bench.loadgen import LoadConfig, LoadResult, run_load
from engines import event_loop
from engines.process import main_module_hidden
from traffic.records import RequestRecord
from traffic.workload import RequestSpec

# Streams one process starts in a burst without its own cost being what a level measures (docs/streaming.md):
# at 64 a burst costs the client ~0.1 s on this project's CPU, the TTFT target at 64 streams is met with room,
# and a process then relays ~1,500 messages a second at a quarter of a core.
STREAMS_PER_PROCESS = 64
# The children are told to start this far ahead, so that every share starts at the same moment.
START_LEAD_S = 0.05


def processes_for(concurrency: int, cores: int) -> int:
    """How many load-generator processes a closed loop of ``concurrency`` streams gets on a host of ``cores``.

    One per ``STREAMS_PER_PROCESS`` streams, at most a quarter of the cores (the rest run what is measured), and
    one on a small host, where extra processes would take the cores from the server."""
    return max(1, min(cores // 4, math.ceil(concurrency / STREAMS_PER_PROCESS)))


def split(concurrency: int, specs: Sequence[RequestSpec], parts: int) -> list[tuple[int, list[RequestSpec]]]:
    """(streams, requests) of each share: the streams as even as they go, the requests dealt round-robin (so each
    share gets the same mix of lengths); never more shares than streams, and a share with no request is left out."""
    parts = max(1, min(parts, concurrency))
    shares = [(concurrency // parts + (i < concurrency % parts), list(specs[i::parts])) for i in range(parts)]
    return [(streams, share) for streams, share in shares if share]


def merge(results: Sequence[LoadResult]) -> LoadResult:
    """One result on one time base: the earliest share's start. Every share's records keep their own wall-clock
    start (``start_time``); their offsets from the run's start move by how much later their share began."""
    wall_start = min(r.wall_start for r in results)
    records: list[RequestRecord] = []
    for result in results:
        shift = result.wall_start - wall_start
        records.extend(replace(record, start_s=record.start_s + shift) for record in result.records)
    records.sort(key=lambda r: r.end_s)  # completion order, as one process reports it
    return LoadResult(records=records, wall_start=wall_start, duration_s=max((r.end_s for r in records), default=0.0))


class LoadProcesses:
    """``processes`` load-generator children, ready before the first level; ``run`` sends a closed loop through
    them. A context manager: leaving it stops them.

    Not a ``ProcessPoolExecutor`` (as ``bench/routing_fleet.py`` runs whole fleets): a pool starts its workers as
    work comes and may hand two shares to one worker, which would then start them one after the other; here each
    share has a process of its own, started and warm before the level's clock runs."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._children: list[tuple[Any, Connection]] = []

    def __enter__(self) -> LoadProcesses:
        context = multiprocessing.get_context("spawn")
        try:
            for index in range(self.processes):
                ours, theirs = context.Pipe()
                child = context.Process(target=_serve, args=(theirs,), name=f"load-generator-{index}", daemon=True)
                with main_module_hidden():
                    child.start()
                theirs.close()
                self._children.append((child, ours))
            for _, conn in self._children:  # each has imported what it runs: nothing of that is timed later
                if conn.recv() != "ready":
                    raise RuntimeError("a load-generator process failed to start")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for child, conn in self._children:
            with contextlib.suppress(OSError):
                conn.send(None)
            child.join(5.0)
            if child.is_alive():
                child.kill()
                child.join()
            conn.close()
        self._children.clear()

    def run(
        self, target: TargetConfig, load: LoadConfig, specs: Iterable[RequestSpec], *, processes: int
    ) -> LoadResult:
        """``load`` (a closed loop) over ``specs`` from ``processes`` of the children (at most as many as started)."""
        if load.concurrency is None:
            raise ValueError("the load generator splits closed loops only: set concurrency")
        if load.duration_s is not None:
            raise ValueError("a split closed loop is bounded by its requests: leave duration_s unset")
        wanted = list(specs if load.num_requests is None else itertools.islice(specs, load.num_requests))
        shares = split(load.concurrency, wanted, min(processes, len(self._children)))
        start_at = time.monotonic() + START_LEAD_S  # CLOCK_MONOTONIC: one clock for every process of the host
        for (streams, share), (_, conn) in zip(shares, self._children, strict=False):
            share_load = load.model_copy(update={"concurrency": streams, "num_requests": len(share), "progress": False})
            conn.send((target, share_load, share, start_at))
        answers = [conn.recv() for _, conn in self._children[: len(shares)]]
        for answer in answers:
            if isinstance(answer, BaseException):
                raise RuntimeError(f"a load-generator process failed: {answer!r}") from answer
        return merge(answers)


# ---------------------------------------------------------------------------------------------- the child


def _serve(conn: Connection) -> None:
    """A child's loop: one share of a level per message, its LoadResult (or its error) back; None ends it."""
    conn.send("ready")
    while (job := conn.recv()) is not None:
        target, load, specs, start_at = job
        try:
            answer: LoadResult | BaseException = event_loop.run(_share(target, load, specs, start_at))
        except Exception as exc:  # the parent raises it; this process stays for the next level
            answer = RuntimeError(f"{type(exc).__name__}: {exc}")
        conn.send(answer)


async def _share(target: TargetConfig, load: LoadConfig, specs: list[RequestSpec], start_at: float) -> LoadResult:
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    return await run_load(target, load, specs)
