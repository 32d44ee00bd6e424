"""Coalescing a stream of deltas into fewer, larger chunks: the one rule, and the wrapper most backends use.

Ray Serve moves every yielded item through Ray as its own object (ray-project/ray #52745), so one item per
token caps a replica at roughly a thousand items per second in total. We yield the first delta at once (TTFT
is what users feel) and afterwards gather whatever the engine produced during ``interval_s`` into one delta.
When the consumer is slower than the engine, deltas simply pile up and go out together on its next pull.

What is decided here, for every engine: the interval (:func:`interval_s`, from the engine config's
``coalesce.interval_ms``), when a stream's next message is due (:class:`Cadence`: the first and the last at
once, the others on a fixed cadence, :func:`next_due`) and how the deltas that waited become one
(:func:`merge_deltas`). Where it is applied is the one place a stream's messages leave the engine, whose wake-up
differs by engine: :func:`coalesce` around the backend's stream (hf, trtllm, openai_server), the emulated
engine's batch loop, which wakes a stream only when its message is due, and, with ``engine_process``, the
replica side of the pipe (``engines.process``), the child engine running with no interval.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from engines.protocol import Delta


def interval_s(config: Any) -> float:
    """The stream interval of an engine config, in seconds; 0.0 (every delta at once) for one without any."""
    coalesce_config = getattr(config, "coalesce", None)
    return 0.0 if coalesce_config is None else coalesce_config.interval_ms / 1000.0


def next_due(due: float, now: float, interval_s: float) -> float:
    """When a stream's next message is due, its last one having been due at ``due`` and sent at ``now``.

    A message sent late (a busy event loop, an engine step that ran past its due time) keeps the cadence: the next
    is due one interval after this one was due, not after it was sent, so that every hop's delay does not push
    every later message back (TensorRT-LLM's ``stream_interval`` counts iterations, a fixed cadence too). A message
    sent early (at the last engine step before it was due, :meth:`Cadence.due`'s ``next_at``) starts the next
    interval when it left: the tokens made after it are held at most an interval. A stream more than an interval
    behind is due one interval after now (it does not catch up with one-token messages). The first message's
    ``due`` is 0.
    """
    following = min(due, now) + interval_s
    return following if following > now else now + interval_s


class Cadence:
    """When one stream's next message is due: at once for the first and for a finished one, otherwise once
    ``send_at`` has passed, or earlier, at the last engine step before it, when the caller knows when the next step
    ends (``next_at``): a token is then held at most the interval, and a client sees messages at most an interval
    apart plus what the hops add, not an interval plus an engine step. :meth:`sent` moves ``send_at`` on by
    :func:`next_due`. Times are seconds on the one clock its caller keeps to (``time.monotonic`` or the event
    loop's)."""

    __slots__ = ("interval_s", "send_at")

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.send_at = 0.0  # the first message is due at once

    def due(self, now: float, *, finished: bool = False, next_at: float | None = None) -> bool:
        """Whether a message should leave at ``now``; ``next_at``: when the next chance to send comes (the engine's
        next step ends), None where unknown (the message then leaves at the first chance at or after ``send_at``)."""
        return finished or now >= self.send_at or (next_at is not None and next_at > self.send_at)

    def sent(self, now: float, *, readable: bool = True) -> None:
        """A message left at ``now``. One a client could not read (:attr:`Delta.readable`: its tokens only part
        of a character) starts no interval: the text it holds back leaves with the next token, not an interval
        later. Else a stream whose first token is half a character would show its first text an interval late."""
        if readable:
            self.send_at = next_due(self.send_at, now, self.interval_s)
        else:
            self.send_at = min(self.send_at, now)


def merge_deltas(deltas: list[Delta]) -> Delta:
    """One delta equivalent to ``deltas`` in order (text and ids concatenated, the last figures win)."""
    if len(deltas) == 1:
        return deltas[0]
    last = deltas[-1]
    token_ids: list[int] = []
    for d in deltas:
        token_ids.extend(d.token_ids)
    return Delta(
        text="".join(d.text for d in deltas),
        token_ids=token_ids,
        finish_reason=last.finish_reason,
        prompt_tokens=last.prompt_tokens,
        completion_tokens=last.completion_tokens,
        first_token_time=next((d.first_token_time for d in deltas if d.first_token_time), None),
        arrival_time=last.arrival_time,
        error=last.error,
        cached_tokens=last.cached_tokens,
        logprobs=[entry for d in deltas for entry in d.logprobs or ()] if any(d.logprobs for d in deltas) else None,
    )


async def coalesce(source: AsyncIterator[Delta], interval_s: float) -> AsyncGenerator[Delta, None]:
    """Yields ``source``'s deltas, merged so that at most one chunk leaves every ``interval_s`` after the first.

    Closing or cancelling this generator closes ``source`` (which aborts the engine request).
    """
    if interval_s <= 0:
        # aclosing: closing this generator must close the passthrough (and so abort the engine request)
        # at once, not whenever the garbage collector finalizes it.
        async with contextlib.aclosing(_passthrough(source)) as passthrough:
            async for delta in passthrough:
                yield delta
        return

    loop = asyncio.get_running_loop()
    pending: asyncio.Future[Delta] | None = None
    buffer: list[Delta] = []
    cadence = Cadence(interval_s)
    try:
        while True:
            if buffer:
                # Holding tokens: wait for the engine's next delta only until the interval is over. The pull
                # runs as a task so that the timeout leaves it (and the engine request) alive.
                if pending is None:
                    pending = asyncio.ensure_future(anext(source))
                timeout = max(0.0, cadence.send_at - loop.time())
                done, _ = await asyncio.wait((pending,), timeout=timeout)
                if not done:  # interval over: send what we have, keep waiting for the engine
                    merged = merge_deltas(buffer)
                    buffer = []
                    yield merged
                    cadence.sent(loop.time(), readable=merged.readable)
                    continue
                pull, pending = pending, None
            try:
                if buffer:
                    delta = pull.result()
                elif pending is not None:  # the pull that outlived the last interval
                    delta = await pending
                    pending = None
                else:
                    # Nothing held: await the engine directly, with no task or timer (one of each per token per
                    # stream was most of this function's CPU when deltas come slower than the interval).
                    delta = await anext(source)
            except StopAsyncIteration:
                pending = None
                if buffer:
                    yield merge_deltas(buffer)
                return
            except Exception:
                # Deliver what the engine produced before it failed, then let the error through.
                pending = None
                if buffer:
                    yield merge_deltas(buffer)
                raise
            buffer.append(delta)
            now = loop.time()
            if cadence.due(now, finished=delta.finished):
                # The first token goes out at once, the final delta needs no more waiting, and a delta that
                # comes after the interval is over has waited long enough.
                merged = merge_deltas(buffer)
                buffer = []
                yield merged
                cadence.sent(now, readable=merged.readable)
                if delta.finished:
                    return
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                await pending
        await _aclose(source)


async def _passthrough(source: AsyncIterator[Delta]) -> AsyncGenerator[Delta, None]:
    try:
        async for delta in source:
            yield delta
    finally:
        await _aclose(source)


async def _aclose(source: AsyncIterator[Delta]) -> None:
    aclose = getattr(source, "aclose", None)
    if aclose is not None:
        await aclose()
