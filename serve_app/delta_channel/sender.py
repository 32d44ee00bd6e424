"""The engine replica's side of the delta channels: a TCP server on the node's address, one connection per
ingress replica, one frame per event-loop turn per connection with every delta queued in that turn."""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
from typing import Any

from engines.coalesce import merge_deltas
from engines.protocol import Delta
from serve_app.delta_channel.wire import ChannelOffer, frame, read_hello

logger = logging.getLogger("ray.serve")

HELLO_TIMEOUT_S = 10.0  # a connection that has not said who it is by then is dropped


class ChannelServer:
    """Listens for ingress replicas' channels; :meth:`sender` gives the live connection of a channel id."""

    def __init__(self) -> None:
        self.secret = secrets.token_bytes(16)
        self._links: dict[str, IngressLink] = {}
        self._server: asyncio.Server | None = None
        self._offer: ChannelOffer | None = None

    async def start(self, host: str) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: IngressLink(self), host, 0)
        port = self._server.sockets[0].getsockname()[1]
        self._offer = ChannelOffer(host, port, self.secret)

    @property
    def offer(self) -> ChannelOffer:
        assert self._offer is not None, "the channel server has not started"
        return self._offer

    def sender(self, channel_id: str) -> IngressLink | None:
        """The open connection of ``channel_id``; None when that channel has not connected (or dropped)."""
        return self._links.get(channel_id)

    def connected(self) -> list[str]:
        """The channel ids with a live connection."""
        return sorted(self._links)

    @property
    def deltas_sent(self) -> int:
        """Deltas queued on the live connections since they opened."""
        return sum(link.sent for link in self._links.values())

    def joined(self, channel_id: str, link: IngressLink) -> None:
        old = self._links.get(channel_id)
        self._links[channel_id] = link
        if old is not None and old is not link:
            old.close()  # the ingress reconnected: its streams go on the new connection

    def left(self, channel_id: str, link: IngressLink) -> None:
        if self._links.get(channel_id) is link:
            del self._links[channel_id]

    async def close(self) -> None:
        for link in list(self._links.values()):
            link.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


class IngressLink(asyncio.Protocol):
    """One ingress replica's connection. :meth:`send` queues a delta; the first in a loop turn schedules one
    write of everything queued by then. While the socket's buffer is over its mark (the ingress is behind),
    deltas pile up and leave merged per stream when it drains: a hop that is behind sends what piled up as one
    message."""

    def __init__(self, server: ChannelServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._hello_timer: asyncio.TimerHandle | None = None
        self._hello = bytearray()
        self.channel_id: str | None = None
        self._pending: list[tuple[int, Delta]] = []
        self._scheduled = False
        self._paused = False
        self._piled = False  # deltas queued while paused: merge per stream before the next write
        self.closed = False
        self.sent = 0

    # -- asyncio's callbacks
    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self._hello_timer = asyncio.get_running_loop().call_later(HELLO_TIMEOUT_S, self._no_hello)

    def _no_hello(self) -> None:
        if self.channel_id is None:
            self.close()

    def _cancel_hello_timer(self) -> None:
        if self._hello_timer is not None:
            self._hello_timer.cancel()
            self._hello_timer = None

    def data_received(self, data: bytes) -> None:
        if self.channel_id is not None:
            return  # nothing follows the hello
        self._hello += data
        try:
            parsed = read_hello(self._hello)
        except (ValueError, UnicodeDecodeError):
            self.close()
            return
        if parsed is None:
            return
        secret, channel_id = parsed
        if not hmac.compare_digest(secret, self._server.secret):
            logger.warning("delta channel: a connection with a wrong secret was dropped")
            self.close()
            return
        self.channel_id = channel_id
        self._hello = bytearray()
        self._cancel_hello_timer()
        self._server.joined(channel_id, self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_hello_timer()
        self._pending.clear()
        if self.channel_id is not None:
            self._server.left(self.channel_id, self)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._pending and not self._scheduled:
            self._schedule()

    # -- the engine replica's side
    def send(self, key: int, delta: Delta) -> bool:
        """Queues ``delta`` for the stream ``key``; False when the connection is gone (the stream has nowhere to
        go: its request should end)."""
        if self.closed:
            return False
        self._pending.append((key, delta))
        self.sent += 1
        if self._paused:
            self._piled = True
        elif not self._scheduled:
            self._schedule()
        return True

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            self._transport.close()
        self.closed = True

    def _schedule(self) -> None:
        self._scheduled = True
        asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        if self.closed or self._paused or not self._pending or self._transport is None:
            return
        items, self._pending = self._pending, []
        if self._piled:
            items = _merged_per_stream(items)
            self._piled = False
        self._transport.write(frame(items))


def _merged_per_stream(items: list[tuple[int, Delta]]) -> list[tuple[int, Delta]]:
    """One delta per stream, its queued ones merged in order (dicts keep the order of first insertion)."""
    by_key: dict[int, list[Delta]] = {}
    for key, delta in items:
        by_key.setdefault(key, []).append(delta)
    return [(key, merge_deltas(deltas)) for key, deltas in by_key.items()]
