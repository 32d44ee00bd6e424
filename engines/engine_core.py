"""The engine's own process: runs any engine in-process and relays it over one socket (the child side).

Started by :class:`engines.process.ProcessEngine` with the multiprocessing *spawn* context, so the child is a
fresh interpreter (CUDA-safe, no forked locks). Its event loop runs the inner engine and the per-request
streams (detokenizing, stop strings, coalescing), and sends **one message per loop turn** carrying every
(request id, delta) produced during that turn: the cost per token of crossing processes is a list append.

Messages from the parent::

    ("generate", rid, GenerationRequest)   start a stream
    ("abort", rid)                         the parent's stream was closed or cancelled: close the inner one
    ("health", qid)                        run the inner engine's health check
    ("shutdown",)                          stop the engine and exit

Messages to the parent::

    ("ready", info, EngineStats)           started; info: context_length, pid, torch_threads, kv_block_tokens
    ("failed", error)                      start() raised (the error pickled, type and fields kept)
    ("out", [(rid, item), ...])            item: a delta's fields (a tuple), None (stream ended) or an error
    ("stats", EngineStats, KvEvents|None)  every STATS_INTERVAL_S; the prefix cache's events since the last one
                                           (None: none, or the engine tells nothing of its cache)
    ("health", qid, error | None)

The child exits when the parent says so or when its socket reaches end of file (the parent died): it never
outlives the replica that started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import sys
import threading
from typing import Any

from engines import event_loop
from engines.backends import in_process_engine
from engines.config import EngineConfig
from engines.ipc import Channel, delta_to_wire, portable_error
from engines.protocol import Engine, EngineStats, GenerationRequest

logger = logging.getLogger(__name__)

STATS_INTERVAL_S = 0.1
# After the parent is gone, how long the engine may take to stop before the process exits regardless.
ORPHAN_GRACE_S = 30.0
# Once the engine has stopped, how long the interpreter's own teardown may take.
EXIT_GRACE_S = 10.0


def run(sock: socket.socket, config: EngineConfig) -> None:
    """The child process's entry point (the spawn context's ``Process`` target); exits with serve()'s code."""
    threads = getattr(config, "num_threads", None)
    if threads:
        # Before torch is imported: its OpenMP pool then starts at the configured size (Ray's replica
        # environment, inherited here, says OMP_NUM_THREADS=1 for fractional CPUs).
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    # Ctrl-C in a terminal reaches the whole process group: the parent decides when this process stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s engine-core[%(process)d] %(levelname)s %(message)s")
    code = 1
    try:
        code = event_loop.run(EngineCore(sock, config).serve())
    except BaseException:
        logger.exception("engine process failed")
    finally:
        # multiprocessing's own exit path follows (it joins threads, releases semaphores); a thread that
        # does not stop must not keep the process alive.
        _exit_after(EXIT_GRACE_S, code)
    sys.exit(code)


def _exit_after(seconds: float, code: int) -> None:
    timer = threading.Timer(seconds, os._exit, (code,))
    timer.daemon = True
    timer.start()


class EngineCore:
    """The inner engine plus one task per open stream, driven by the parent's messages."""

    def __init__(self, sock: socket.socket, config: EngineConfig) -> None:
        self._sock = sock
        self._config = config
        self._engine: Engine | None = None
        self._tasks: dict[int, asyncio.Task[None]] = {}  # one per open stream
        self._chores: set[asyncio.Task[None]] = set()  # health checks in progress
        self._pending: list[tuple[int, Any]] = []  # outputs of this loop turn, not yet sent
        self._flush_scheduled = False
        self._stop = asyncio.Event()
        self._channel: Channel | None = None
        self._kv_block_tokens: int | None = None

    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        self._channel = Channel(self._sock, loop, self._on_message, self._on_parent_gone)
        try:
            self._engine = in_process_engine(self._config)
            await self._engine.start()
        except BaseException as exc:
            logger.error("engine start failed: %s", exc)
            self._channel.send(("failed", portable_error(exc)))
            await self._channel.drain()
            return 1
        self._kv_block_tokens = self._engine.kv_block_tokens
        self._channel.send(("ready", self._info(), self._stats()))
        stats = asyncio.create_task(self._push_stats())
        await self._stop.wait()
        stats.cancel()
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._engine.shutdown()
        self._channel.close()
        return 0

    def _info(self) -> dict[str, Any]:
        assert self._engine is not None
        torch = sys.modules.get("torch")
        return {
            "context_length": self._engine.context_length,
            "pid": os.getpid(),
            "torch_threads": torch.get_num_threads() if torch is not None else None,
            "kv_block_tokens": self._engine.kv_block_tokens,
        }

    def _stats(self) -> EngineStats:
        assert self._engine is not None
        stats = self._engine.stats()
        if stats.registered_requests >= 0:
            # Streams this process still runs count as tracked too (0 when idle, whatever the engine says).
            stats = dataclasses.replace(stats, registered_requests=stats.registered_requests + len(self._tasks))
        return stats

    async def _push_stats(self) -> None:
        assert self._channel is not None and self._engine is not None
        while True:
            await asyncio.sleep(STATS_INTERVAL_S)
            try:
                stats = self._stats()
                events = self._engine.kv_events() if self._kv_block_tokens else None
                self._channel.send(("stats", stats, events or None))
            except Exception:  # a stats hiccup must not end the process
                logger.warning("could not read the engine's stats", exc_info=True)

    # ---------------------------------------------------------------- messages

    def _on_message(self, message: tuple) -> None:
        kind = message[0]
        if kind == "generate":
            _, rid, request = message
            self._tasks[rid] = asyncio.create_task(self._stream(rid, request))
        elif kind == "abort":
            task = self._tasks.get(message[1])
            if task is not None:
                task.cancel()
        elif kind == "health":
            task = asyncio.create_task(self._health(message[1]))
            self._chores.add(task)  # the loop keeps only weak references to tasks
            task.add_done_callback(self._chores.discard)
        elif kind == "shutdown":
            self._stop.set()
        else:
            logger.error("unknown message %r", kind)

    def _on_parent_gone(self) -> None:
        if not self._stop.is_set():
            logger.warning("the parent process is gone: stopping the engine")
            _exit_after(ORPHAN_GRACE_S, 1)
        self._stop.set()

    async def _health(self, qid: int) -> None:
        assert self._engine is not None and self._channel is not None
        error: BaseException | None = None
        try:
            await self._engine.check_health()
        except Exception as exc:
            error = portable_error(exc)
        self._channel.send(("health", qid, error))

    # ---------------------------------------------------------------- streams

    async def _stream(self, rid: int, request: GenerationRequest) -> None:
        assert self._engine is not None
        try:
            async with contextlib.aclosing(self._engine.generate(request)) as stream:
                async for delta in stream:
                    self._emit(rid, delta_to_wire(delta))
            self._emit(rid, None)
        except asyncio.CancelledError:
            pass  # aborted by the parent (or shutting down): aclosing closed the inner stream, nobody listens
        except Exception as exc:
            self._emit(rid, portable_error(exc))
        finally:
            self._tasks.pop(rid, None)

    def _emit(self, rid: int, item: Any) -> None:
        self._pending.append((rid, item))
        if not self._flush_scheduled:
            # Everything the other streams produce during this loop turn goes out in the same message.
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        assert self._channel is not None
        self._flush_scheduled = False
        batch, self._pending = self._pending, []
        if batch:
            self._channel.send(("out", batch))
