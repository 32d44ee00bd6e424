"""An engine in its own process (like vLLM V1's EngineCore): the replica's process only relays.

Why: with the hf backend in-process, transformers' batch loop (a thread) shares one interpreter lock with
Ray Serve's per-item streaming, so at GPU token rates the replica's Python work per token starves the batch
loop (README, "Known limits"). Here the inner engine (any backend, built by ``engines.backends.in_process_engine``)
runs in a child started with the multiprocessing *spawn* context (CUDA-safe), together with everything it
does per token (detokenizing, stop strings, coalescing). The child sends one message per event-loop turn with
every stream's new deltas (``engines/engine_core.py``); this side reads the socket from its own asyncio loop
(``loop.add_reader``, no thread), files the deltas under their request and merges whatever piled up for a
stream into one delta when its consumer next pulls -- so a slow consumer gets fewer, larger chunks, as with
in-process coalescing.

The contract is the in-process one (``engines/protocol.py``): closing or cancelling a stream aborts it in the
child; the child's errors re-raise here with their type and fields; when the child dies (crash, SIGKILL)
every open stream raises ``EngineDeadError``, as do new requests and the health check. The child watches its
socket for end of file and exits when this process dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import multiprocessing
import socket
import sys
import time
import types
from collections.abc import AsyncGenerator, Iterator
from typing import Any

from core.errors import EngineDeadError
from engines import engine_core
from engines.coalesce import Cadence, interval_s, merge_deltas
from engines.config import CoalesceConfig, EngineConfig
from engines.ipc import Channel, delta_from_wire
from engines.kv_blocks import KvEvents
from engines.protocol import Delta, Engine, EngineStats, GenerationRequest

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def main_module_hidden() -> Iterator[None]:
    """Keeps spawn from re-running this process's ``__main__`` in the child.

    spawn imports the parent's main script in the child (as ``__mp_main__``) in case the target lives there:
    in a Ray replica that is Ray's worker script, in a user's script without a ``__main__`` guard it is the
    whole program again. A child whose target lives in an importable module (the engine's, the bench's load
    generator's) needs none of it, so it gets a bare main module.
    """
    modules = sys.modules
    main = modules["__main__"]
    modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        modules["__main__"] = main


class _Inbox:
    """One stream's undelivered items (delta tuples, then None or an error); cheaper than an asyncio.Queue.

    Its consumer is woken once per message: when its first delta comes, when the last does (a finish, the end
    or an error), and otherwise when its ``cadence`` (monotonic) says, with everything that came meanwhile.
    """

    __slots__ = ("cadence", "items", "waiter")

    def __init__(self, interval_s: float) -> None:
        self.items: list[Any] = []
        self.waiter: asyncio.Future[None] | None = None
        self.cadence = Cadence(interval_s)

    def _due(self) -> bool:
        if not self.items:
            return False
        last = self.items[-1]
        # A delta on the wire is Delta's fields in order; [2] is its finish_reason. Called for every item filed
        # (each engine step of each stream): the clock only when the stream has not ended.
        return type(last) is not tuple or last[2] is not None or self.cadence.due(time.monotonic())

    def put(self, item: Any) -> None:
        self.items.append(item)
        waiter = self.waiter
        if waiter is not None and not waiter.done() and self._due():
            waiter.set_result(None)

    async def take(self) -> list[Any]:
        while not self._due():
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        items, self.items = self.items, []
        return items


class ProcessEngine(Engine):
    """Runs ``config``'s engine in a child process and streams its deltas back."""

    def __init__(
        self, config: EngineConfig, *, shutdown_timeout_s: float = 60.0, health_timeout_s: float = 30.0
    ) -> None:
        if getattr(config, "engine_process", False):  # the child builds the in-process engine of the same config
            config = config.model_copy(update={"engine_process": False})
        # The stream interval applies here, where a stream's messages leave (``_Inbox``): the child sends every
        # engine step (no timers there, on the interpreter the batch loop needs) and this side wakes a stream once
        # per interval with everything that came for it meanwhile.
        self._interval_s = interval_s(config)
        if hasattr(config, "coalesce"):
            config = config.model_copy(update={"coalesce": CoalesceConfig(interval_ms=0.0)})
        self.config = config
        self.shutdown_timeout_s = shutdown_timeout_s
        self.health_timeout_s = health_timeout_s
        self._process: Any = None  # multiprocessing.context.SpawnProcess
        self._channel: Channel | None = None
        self._ready: asyncio.Future[dict[str, Any]] | None = None
        self._streams: dict[int, _Inbox] = {}
        self._health: dict[int, asyncio.Future[BaseException | None]] = {}
        self._ids = itertools.count()
        self._stats = EngineStats(healthy=False)
        self._info: dict[str, Any] = {}
        self._kv_events = KvEvents()  # the child's prefix-cache events not yet drained (kv_events)
        self._dead: str | None = None  # why this engine cannot serve any more; None while it can
        self._stopping = False
        self._reaper: asyncio.Task[None] | None = None

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        context = multiprocessing.get_context("spawn")
        # daemon: multiprocessing also ends the child when this interpreter exits normally without shutdown().
        self._process = context.Process(
            target=engine_core.run, args=(theirs, self.config), name="engine-core", daemon=True
        )
        try:
            with main_module_hidden():
                self._process.start()  # a fork and exec (milliseconds): on the loop, so no coroutine sees the swap
        finally:
            theirs.close()  # the child holds its own copy: its exit is then our end of file
        self._ready = loop.create_future()
        self._channel = Channel(ours, loop, self._on_message, self._on_child_gone)
        try:
            self._info = await self._ready
        except BaseException:
            await self.shutdown()
            raise
        logger.info("engine process %s ready", self._info.get("pid"))

    async def shutdown(self) -> None:
        """Asks the child to stop, waits for it (killing it after ``shutdown_timeout_s``) and ends open streams."""
        process = self._process
        if process is None:
            return
        self._stopping = True
        if self._channel is not None:
            self._channel.send(("shutdown",))
        await asyncio.to_thread(process.join, self.shutdown_timeout_s)
        if process.is_alive():
            logger.warning(
                "engine process %s did not stop within %.0f s: killing it", process.pid, self.shutdown_timeout_s
            )
            process.kill()
            await asyncio.to_thread(process.join, 10.0)
        self._on_child_gone()
        if self._channel is not None:
            self._channel.close()

    async def check_health(self) -> None:
        self._raise_if_dead()
        if not self._process.is_alive():
            self._on_child_gone()
            self._raise_if_dead()
        assert self._channel is not None
        qid = next(self._ids)
        answer: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        self._health[qid] = answer
        self._channel.send(("health", qid))
        try:
            error = await asyncio.wait_for(answer, self.health_timeout_s)
        except TimeoutError:
            raise EngineDeadError(
                f"The engine process did not answer a health check within {self.health_timeout_s:g} s."
            ) from None
        finally:
            self._health.pop(qid, None)
        if error is not None:
            raise error

    @property
    def context_length(self) -> int:
        return int(self._info.get("context_length", 0))

    @property
    def kv_block_tokens(self) -> int | None:
        return self._info.get("kv_block_tokens")

    def kv_events(self) -> KvEvents | None:
        """The child's prefix-cache events since the last call, folded into one batch (they come with its stats)."""
        if self.kv_block_tokens is None:
            return None
        events, self._kv_events = self._kv_events, KvEvents()
        return events

    @property
    def child_pid(self) -> int | None:
        """The engine process's pid (None before start)."""
        return self._process.pid if self._process is not None else None

    @property
    def child_info(self) -> dict[str, Any]:
        """What the child reported at start: context_length, pid, torch_threads."""
        return dict(self._info)

    # ---------------------------------------------------------------- stats

    def stats(self) -> EngineStats:
        """The child's latest report (pushed every ``engine_core.STATS_INTERVAL_S``), plus this side's streams."""
        stats = self._stats
        registered = stats.registered_requests
        if registered >= 0:
            registered += len(self._streams)
        return dataclasses.replace(stats, registered_requests=registered, healthy=stats.healthy and self._dead is None)

    # ---------------------------------------------------------------- generation

    def generate(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        return self._stream(request)

    async def _stream(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        self._raise_if_dead()
        assert self._channel is not None
        rid = next(self._ids)
        inbox = _Inbox(self._interval_s)
        self._streams[rid] = inbox
        ended = False  # the child has ended this stream: nothing to abort there
        try:
            self._channel.send(("generate", rid, request))
            while True:
                items = await inbox.take()
                last = items[-1]
                deltas = [delta_from_wire(item) for item in items if type(item) is tuple]
                if deltas:
                    delta = merge_deltas(deltas)
                    ended = delta.finished
                    inbox.cadence.sent(time.monotonic(), readable=delta.readable)
                    yield delta
                    if ended:
                        return
                if last is None:
                    ended = True
                    return
                if isinstance(last, BaseException):
                    ended = True
                    raise last
        finally:
            self._streams.pop(rid, None)
            if not ended and self._dead is None and self._channel is not None:
                self._channel.send(("abort", rid))

    # ---------------------------------------------------------------- the child's messages

    def _on_message(self, message: tuple) -> None:
        kind = message[0]
        if kind == "out":
            streams = self._streams
            for rid, item in message[1]:
                inbox = streams.get(rid)
                if inbox is not None:  # else: closed here already; the child was told to abort it
                    inbox.put(item)
        elif kind == "stats":
            self._stats = message[1]
            if len(message) > 2 and message[2] is not None:
                self._kv_events.extend(message[2])
        elif kind == "health":
            answer = self._health.get(message[1])
            if answer is not None and not answer.done():
                answer.set_result(message[2])
        elif kind == "ready":
            self._stats = message[2]
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(message[1])
        elif kind == "failed":
            if self._ready is not None and not self._ready.done():
                self._ready.set_exception(message[1])
        else:
            logger.error("unknown message from the engine process: %r", kind)

    def _on_child_gone(self) -> None:
        """The child exited (or was told to): fail everything that waits on it. Idempotent."""
        if self._dead is not None:
            return
        if self._stopping:
            self._dead = "The engine was shut down."
        else:
            code = self._process.exitcode if self._process is not None else None
            self._dead = "The engine process exited unexpectedly" + (
                f" (exit code {code})." if code is not None else "."
            )
            logger.error("%s", self._dead)
            self._reaper = asyncio.get_running_loop().create_task(self._reap())
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(EngineDeadError(f"{self._dead} It did not finish starting."))
        for inbox in self._streams.values():
            inbox.put(EngineDeadError(self._dead))
        for answer in self._health.values():
            if not answer.done():
                answer.set_result(EngineDeadError(self._dead))

    async def _reap(self) -> None:
        """Waits for the dead child's exit status, so that later errors can name it."""
        process = self._process
        with contextlib.suppress(Exception):
            await asyncio.to_thread(process.join, 5.0)
            if process.exitcode is not None and self._dead is not None and "exit code" not in self._dead:
                self._dead = f"The engine process exited unexpectedly (exit code {process.exitcode})."

    def _raise_if_dead(self) -> None:
        if self._dead is not None:
            raise EngineDeadError(self._dead)
        if self._channel is None:
            raise EngineDeadError("The engine is not running.")
