"""Serve's engine handle, wrapped so that a request's deltas come on the ingress's channel where the engine replica
has one from it, and over Serve's stream where not; the pipeline sees one stream of deltas either way."""

from __future__ import annotations

import asyncio
from typing import Any

from engines.protocol import Delta
from serve_app.delta_channel.receiver import ChannelReceiver, Inbox
from serve_app.delta_channel.wire import ChannelOffer, OnChannel

# How long a stream waits on the channel for its finishing delta after Serve's call ended well. The engine replica
# writes it before its call returns, so it is normally there first; this only bounds a connection that broke
# without closing.
FINAL_GRACE_S = 30.0


class ChannelHandle:
    """``handle.generate.remote(request)`` as Serve's streaming handle has it (what :class:`Pipeline` calls),
    answering a :class:`ChannelStream`."""

    def __init__(self, handle: Any, receiver: ChannelReceiver) -> None:
        self._handle = handle
        self._receiver = receiver
        self.generate = self  # so that ``generate.remote`` reads as on Serve's handle

    def remote(self, request: Any) -> ChannelStream:
        key, inbox = self._receiver.open()
        serve_stream = self._handle.generate.remote(request, reply_to=(self._receiver.id, key))
        return ChannelStream(serve_stream, self._receiver, key, inbox)


class ChannelStream:
    """One request's deltas: from its inbox once Serve's first item says they come on the channel, else Serve's
    own items. Serve's stream stays open underneath until the engine's ends; its error, if any, ends this one.
    ``cancel()`` cancels Serve's call, which aborts the request inside the engine, as on Serve's stream."""

    def __init__(self, serve_stream: Any, receiver: ChannelReceiver, key: int, inbox: Inbox) -> None:
        self._serve = serve_stream
        self._receiver = receiver
        self._key = key
        self._inbox = inbox
        self._on_channel = False
        self._started = False
        self._watcher: asyncio.Task[None] | None = None

    def __aiter__(self) -> ChannelStream:
        return self

    async def __anext__(self) -> Delta:
        if self._on_channel:
            return await self._inbox.next()
        if self._started:
            return await self._serve.__anext__()
        self._started = True
        try:
            first = await self._serve.__anext__()
        except BaseException:
            self._receiver.close(self._key)
            raise
        if isinstance(first, OnChannel):
            self._on_channel = True
            self._watcher = asyncio.get_running_loop().create_task(self._watch())
            return await self._inbox.next()
        self._receiver.close(self._key)
        if isinstance(first, ChannelOffer):
            self._receiver.connect(first)  # for the next requests; this one stays on Serve's stream
            first = await self._serve.__anext__()
        return first

    def cancel(self) -> None:
        self._serve.cancel()
        if self._watcher is not None:
            self._watcher.cancel()
        self._inbox.cancel_timer()
        self._receiver.close(self._key)

    async def _watch(self) -> None:
        """Serve's call for a request on the channel: nothing comes on it but its end or the engine's error."""
        try:
            async for _ in self._serve:
                pass
        except Exception as exc:  # the engine's error, or its replica gone: the stream ends with it
            self._receiver.close(self._key)
            self._inbox.fail(exc)
        else:
            self._inbox.expect_end(FINAL_GRACE_S)
