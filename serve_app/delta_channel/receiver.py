"""The ingress replica's side of the delta channels: one connection per engine replica that offered one, and an
inbox per request that its deltas land in."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from typing import Any

from core.errors import EngineDeadError
from engines.coalesce import merge_deltas
from engines.protocol import Delta
from serve_app.delta_channel.wire import ChannelOffer, hello, read_frames

logger = logging.getLogger("ray.serve")

CONNECT_TIMEOUT_S = 5.0
# After a failed connection (a network policy that blocks the port, say) the address is not tried again for this
# long: its requests go on over Serve's stream meanwhile, and the log gets one warning, not one per request.
RETRY_AFTER_S = 60.0


class Inbox:
    """One request's deltas as they arrive. :meth:`next` hands over everything that arrived since the last call
    as one delta: a relay that is behind (a slow client) catches up in one message."""

    __slots__ = ("_error", "_pending", "_timer", "_waiter", "finished", "link")

    def __init__(self) -> None:
        self._pending: deque[Delta] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.finished = False  # its finishing delta has arrived
        self.link: EngineLink | None = None  # the connection its deltas came on, once one has

    def put(self, delta: Delta) -> None:
        self._pending.append(delta)
        if delta.finish_reason is not None:
            self.finished = True
            self.cancel_timer()
        self._wake()

    def expect_end(self, grace_s: float) -> None:
        """Serve's call ended well: the finishing delta, written before it ended, is due on the channel. One that
        does not come within ``grace_s`` (a connection that broke without closing) ends the stream with an error
        instead of leaving it waiting."""
        if not self.finished and self._timer is None:
            error = EngineDeadError("The engine replica's stream ended without its last tokens; retry the request.")
            self._timer = asyncio.get_running_loop().call_later(grace_s, self.fail, error)

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def fail(self, error: BaseException) -> None:
        """Ends the stream with ``error`` once what arrived before it has been handed over; the first error wins."""
        if self._error is None:
            self._error = error
            self._wake()

    async def next(self) -> Delta:
        """The deltas that arrived since the last call, merged; raises the stream's error once they are handed
        over, and StopAsyncIteration after the finishing delta."""
        while not self._pending:
            if self._error is not None:
                raise self._error
            if self.finished:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if len(self._pending) == 1:
            return self._pending.popleft()
        deltas = list(self._pending)
        self._pending.clear()
        return merge_deltas(deltas)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class ChannelReceiver:
    """This ingress replica's channel: its id, its requests' inboxes by key, its connections by address."""

    def __init__(self) -> None:
        self.id = uuid.uuid4().hex
        self._inboxes: dict[int, Inbox] = {}
        self._links: dict[tuple[str, int], EngineLink] = {}
        self._connecting: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._failed: dict[tuple[str, int], float] = {}  # address -> when it may be tried again (monotonic)
        self._next_key = 0

    def open(self) -> tuple[int, Inbox]:
        """A key for a new request and its inbox, registered before the request leaves: its first delta can come
        on the channel before Serve's answer says that it will."""
        self._next_key += 1
        inbox = self._inboxes[self._next_key] = Inbox()
        return self._next_key, inbox

    def close(self, key: int) -> None:
        self._inboxes.pop(key, None)

    def connect(self, offer: ChannelOffer) -> None:
        """Connects to an engine replica that offered its channel, in the background; once per address at a
        time. Until the connection is up its requests go on over Serve."""
        address = offer.address
        if address in self._links or address in self._connecting:
            return
        if self._failed and time.monotonic() < self._failed.get(address, 0.0):
            return
        task = asyncio.get_running_loop().create_task(self._connect(offer))
        self._connecting[address] = task
        task.add_done_callback(lambda _: self._connecting.pop(address, None))

    async def _connect(self, offer: ChannelOffer) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                transport, link = await loop.create_connection(lambda: EngineLink(self, offer.address), *offer.address)
        except (OSError, TimeoutError) as exc:
            self._failed[offer.address] = time.monotonic() + RETRY_AFTER_S
            logger.warning(
                "delta channel: could not connect to the engine replica at %s:%d (%r); its streams go over Serve's "
                "stream, and the address is tried again in %.0f s",
                *offer.address,
                exc,
                RETRY_AFTER_S,
            )
            return
        self._failed.pop(offer.address, None)
        transport.write(hello(offer.secret, self.id))
        self._links[offer.address] = link

    def deliver(self, link: EngineLink, items: list[tuple[int, Delta]]) -> None:
        inboxes = self._inboxes
        for key, delta in items:
            inbox = inboxes.get(key)
            if inbox is not None:  # else the request ended (cancelled, timed out): its last deltas are dropped
                inbox.link = link
                inbox.put(delta)
                if delta.finish_reason is not None:
                    del inboxes[key]

    def lost(self, link: EngineLink) -> None:
        """A connection dropped: its streams end with the engine's error, as over Serve when a replica dies."""
        if self._links.get(link.address) is link:
            del self._links[link.address]
        error = EngineDeadError("The engine replica serving this request stopped; retry the request.")
        for key, inbox in list(self._inboxes.items()):
            if inbox.link is link:
                del self._inboxes[key]
                inbox.fail(error)

    async def aclose(self) -> None:
        for task in list(self._connecting.values()):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        for link in list(self._links.values()):
            link.close()


class EngineLink(asyncio.Protocol):
    """One engine replica's connection: reads its frames and hands them to the receiver."""

    def __init__(self, receiver: ChannelReceiver, address: tuple[str, int]) -> None:
        self._receiver = receiver
        self.address = address
        self._buffer = bytearray()
        self._transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        for items in read_frames(self._buffer):
            self._receiver.deliver(self, items)

    def connection_lost(self, exc: Exception | None) -> None:
        self._receiver.lost(self)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
