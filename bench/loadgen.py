"""The load generator: sends a workload as a closed loop (fixed concurrency) or an open loop
(each request at its arrival time), bounded in count and in time.

Open loop: requests go out at their scheduled times whether or not earlier ones have finished,
as real users do. Closed loop: ``concurrency`` workers each send their next request when the previous
one ends. Either way no new request starts after ``duration_s``; requests in flight then run to their
end (each is bounded by the target's hard timeout).

Each request in flight holds a connection of its own, kept alive for the next (:class:`_Connections`):
the client never queues a request itself, and never pays a new connection inside a measured TTFT once
it has as many as requests in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass

import httpx
from pydantic import BaseModel, Field, model_validator
from tqdm.auto import tqdm

from bench.client import Clock, MonotonicClock, TargetConfig, send_request
from traffic.records import RequestRecord
from traffic.workload import RequestSpec


class LoadConfig(BaseModel):
    concurrency: int | None = Field(
        None, ge=1, description="Closed loop with this many streams; None sends at each request's send_at."
    )
    num_requests: int | None = Field(None, ge=1, description="Send at most this many requests.")
    duration_s: float | None = Field(None, gt=0, description="Start no request after this many seconds.")
    progress: bool = Field(True, description="Show a tqdm progress bar on stderr.")

    @model_validator(mode="after")
    def _bounded(self) -> LoadConfig:
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("bound the run: set num_requests, duration_s or both")
        return self


@dataclass(slots=True)
class LoadResult:
    records: list[RequestRecord]  # in completion order
    wall_start: float  # unix epoch seconds at the start of the run
    duration_s: float  # start of the run -> last request finished


class _Connections:
    """One single-connection httpx client per request in flight, each kept for the next request.

    Not one shared pool: httpcore 1.0's pool assigns the first idle connection to every request queued at that
    moment (``_assign_requests_to_connections``), all but one of them fail over and go round again, and at 64
    closed-loop streams requests waited up to 0.3-0.9 s (p90-p99) before their headers went out, inside their
    measured TTFT (httpcore's trace hooks, docs/streaming.md). A client passed in (the tests' transports)
    serves every request itself.
    """

    def __init__(self, shared: httpx.AsyncClient | None) -> None:
        self._shared = shared
        self._idle: list[httpx.AsyncClient] = []
        self._all: list[httpx.AsyncClient] = []
        # One TLS context for all: httpx builds one per client otherwise, loading the CA bundle (~35 ms of CPU).
        self._tls = ssl.create_default_context()

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[httpx.AsyncClient]:
        if self._shared is not None:
            yield self._shared
            return
        if self._idle:
            client = self._idle.pop()
        else:
            client = httpx.AsyncClient(
                verify=self._tls, limits=httpx.Limits(max_connections=1, max_keepalive_connections=1)
            )
            self._all.append(client)
        try:
            yield client
        finally:
            self._idle.append(client)

    async def aclose(self) -> None:
        for client in self._all:
            await client.aclose()


class _Run:
    """State shared by the tasks of one run."""

    def __init__(
        self,
        connections: _Connections,
        target: TargetConfig,
        load: LoadConfig,
        specs: Iterable[RequestSpec],
        clock: Clock,
        on_record: Callable[[RequestRecord], None] | None,
    ) -> None:
        self.connections, self.target, self.load, self.clock = connections, target, load, clock
        self.specs: Iterator[RequestSpec] = iter(specs)
        self.on_record = on_record
        self.sent = 0
        self.records: list[RequestRecord] = []
        self.run_id = uuid.uuid4().hex[:8]
        self.bar = tqdm(total=load.num_requests, disable=not load.progress, unit="req", desc="load")
        self.run_start = clock.now()
        self.wall_start = time.time()

    def next_spec(self) -> RequestSpec | None:
        """The next request to send, or None when a bound is reached (count, workload or time)."""
        if self.load.num_requests is not None and self.sent >= self.load.num_requests:
            return None
        spec = next(self.specs, None)
        if spec is None:
            return None
        self.sent += 1
        return spec

    def past_duration(self, offset_s: float) -> bool:
        return self.load.duration_s is not None and offset_s >= self.load.duration_s

    async def send(self, spec: RequestSpec, start: float) -> None:
        async with self.connections.lease() as client:
            record = await send_request(
                client,
                self.target,
                spec,
                request_id=f"bench-{self.run_id}-{spec.index}",
                clock=self.clock,
                start=start,
                run_start=self.run_start,
                wall_start=self.wall_start,
            )
        self.records.append(record)
        self.bar.update(1)
        if not record.ok:
            self.bar.set_postfix(errors=sum(not r.ok for r in self.records), refresh=False)
        if self.on_record is not None:
            self.on_record(record)

    async def closed_loop(self, concurrency: int) -> None:
        async def worker() -> None:
            while not self.past_duration(self.clock.now() - self.run_start):
                spec = self.next_spec()
                if spec is None:
                    return
                await self.send(spec, self.clock.now())

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    async def open_loop(self) -> None:
        tasks: set[asyncio.Task[None]] = set()
        try:
            while (spec := self.next_spec()) is not None:
                if spec.send_at is None:
                    raise ValueError("an open loop needs send times: set concurrency or give arrivals")
                if self.past_duration(spec.send_at):
                    break
                delay = self.run_start + spec.send_at - self.clock.now()
                if delay > 0:
                    await self.clock.sleep(delay)
                # The clock is read here, not in the task: the request's latency starts when it was
                # due, even if the event loop is slow to run its task.
                task = asyncio.create_task(self.send(spec, self.clock.now()))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()


async def run_load(
    target: TargetConfig,
    load: LoadConfig,
    specs: Iterable[RequestSpec],
    *,
    client: httpx.AsyncClient | None = None,
    clock: Clock | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
) -> LoadResult:
    """Send ``specs`` to ``target`` as ``load`` says; one record per request sent.

    ``client`` and ``clock`` are injectable (tests pass a transport and a clock they drive);
    ``on_record`` sees each record as its request ends (e.g. to stream them to a file).
    """
    connections = _Connections(client)
    run = _Run(connections, target, load, specs, clock or MonotonicClock(), on_record)
    try:
        if load.concurrency is not None:
            await run.closed_loop(load.concurrency)
        else:
            await run.open_loop()
    finally:
        run.bar.close()
        await connections.aclose()
    end = max((r.end_s for r in run.records), default=0.0)
    return LoadResult(records=run.records, wall_start=run.wall_start, duration_s=end)
