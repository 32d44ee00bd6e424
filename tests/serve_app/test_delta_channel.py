"""The delta channel between an engine replica and an ingress (serve_app/delta_channel): the real server and
receiver over a real localhost TCP connection. Serve's side of a request (its first item, its end or error) is a
scripted stream here; tests/serve_app/test_ingress.py and test_emulated_app.py run the channel through real
Serve, and test_failover_mid_stream.py a replica that dies mid-stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from core.errors import EngineDeadError
from engines.protocol import Delta
from serve_app.delta_channel import ON_CHANNEL, ChannelHandle, ChannelReceiver, ChannelServer, Inbox
from serve_app.delta_channel import handle as handle_module
from serve_app.delta_channel.sender import IngressLink
from serve_app.delta_channel.wire import frame, hello, read_frames, read_hello

HOST = "127.0.0.1"


def delta(text: str, n: int, finish: str | None = None) -> Delta:
    return Delta(text=text, token_ids=[n], completion_tokens=n, finish_reason=finish)


class ServeCall:
    """What Serve's handle gives for one request: the replica's items in order (an exception ends it), an end that
    a test releases, and ``cancel()``."""

    def __init__(self, items: list, *, end: asyncio.Event | None = None) -> None:
        self.items = list(items)
        self.end = end
        self.cancelled = False

    def __aiter__(self) -> AsyncIterator:
        return self

    async def __anext__(self):
        if self.items:
            item = self.items.pop(0)
            if isinstance(item, BaseException):
                raise item
            return item
        if self.end is not None:
            await self.end.wait()
        raise StopAsyncIteration

    def cancel(self) -> None:
        self.cancelled = True


class ScriptedHandle:
    """Serve's engine handle: ``generate.remote(request, reply_to=...)`` answers the next scripted call."""

    def __init__(self, *calls: ServeCall) -> None:
        self.calls = list(calls)
        self.reply_to: list = []
        self.generate = self

    def remote(self, request, *, reply_to):
        self.reply_to.append(reply_to)
        return self.calls.pop(0)


async def connected() -> tuple[ChannelServer, ChannelReceiver, IngressLink]:
    server = ChannelServer()
    await server.start(HOST)
    receiver = ChannelReceiver()
    receiver.connect(server.offer)
    for _ in range(200):
        link = server.sender(receiver.id)
        if link is not None:
            return server, receiver, link
        await asyncio.sleep(0.01)
    raise AssertionError("the receiver never joined")


async def test_a_request_whose_replica_has_no_connection_streams_over_serve_and_connects_for_the_next():
    server = ChannelServer()
    await server.start(HOST)
    receiver = ChannelReceiver()
    handle = ScriptedHandle(ServeCall([server.offer, delta("a", 1), delta("b", 2, "length")]))
    stream = ChannelHandle(handle, receiver).generate.remote("request")
    got = [d async for d in stream]
    assert [d.text for d in got] == ["a", "b"]
    assert handle.reply_to[0][0] == receiver.id
    for _ in range(200):
        if server.sender(receiver.id) is not None:
            break
        await asyncio.sleep(0.01)
    assert server.sender(receiver.id) is not None
    assert not receiver._inboxes  # a request over Serve keeps no inbox
    await receiver.aclose()
    await server.close()


async def test_deltas_on_the_channel_reach_their_own_streams_and_end_at_the_finishing_one():
    server, receiver, link = await connected()
    end_a, end_b = asyncio.Event(), asyncio.Event()
    handle = ScriptedHandle(ServeCall([ON_CHANNEL], end=end_a), ServeCall([ON_CHANNEL], end=end_b))
    channel_handle = ChannelHandle(handle, receiver)
    a, b = channel_handle.generate.remote("a"), channel_handle.generate.remote("b")
    (_, key_a), (_, key_b) = handle.reply_to
    link.send(key_a, delta("a1", 1))
    link.send(key_b, delta("b1", 1))
    assert (await anext(a)).text == "a1"
    assert (await anext(b)).text == "b1"
    link.send(key_b, delta("b2", 2, "stop"))
    link.send(key_a, delta("a2", 2, "length"))
    assert (await anext(a)).finish_reason == "length"
    assert (await anext(b)).text == "b2"
    end_a.set()
    end_b.set()
    with pytest.raises(StopAsyncIteration):
        await anext(a)
    assert not receiver._inboxes
    await receiver.aclose()
    await server.close()


async def test_what_one_loop_turn_queued_leaves_as_one_frame(monkeypatch):
    server, receiver, link = await connected()
    frames: list[int] = []
    deliver = receiver.deliver
    monkeypatch.setattr(receiver, "deliver", lambda lk, items: (frames.append(len(items)), deliver(lk, items)))
    inboxes = [receiver.open() for _ in range(5)]
    for key, _ in inboxes:
        link.send(key, delta("x", 1))
    for _, inbox in inboxes:
        assert (await inbox.next()).text == "x"
    assert frames == [5]
    await receiver.aclose()
    await server.close()


async def test_an_engine_error_on_serve_ends_the_channel_stream_with_it():
    server, receiver, _link = await connected()
    handle = ScriptedHandle(ServeCall([ON_CHANNEL, EngineDeadError("the engine died")]))
    stream = ChannelHandle(handle, receiver).generate.remote("r")
    with pytest.raises(EngineDeadError, match="the engine died"):
        await anext(stream)
    assert not receiver._inboxes
    await receiver.aclose()
    await server.close()


async def test_deltas_that_arrived_before_an_error_are_handed_over_first():
    inbox = Inbox()
    inbox.put(delta("a", 1))
    inbox.fail(EngineDeadError("gone"))
    assert (await inbox.next()).text == "a"
    with pytest.raises(EngineDeadError):
        await inbox.next()


async def test_a_connection_that_drops_ends_its_streams_with_an_engine_error():
    server, receiver, link = await connected()
    handle = ScriptedHandle(ServeCall([ON_CHANNEL], end=asyncio.Event()))
    stream = ChannelHandle(handle, receiver).generate.remote("r")
    key = handle.reply_to[0][1]
    link.send(key, delta("a", 1))
    assert (await anext(stream)).text == "a"
    link.close()
    with pytest.raises(EngineDeadError, match="stopped"):
        await asyncio.wait_for(anext(stream), 5)
    assert not link.send(key, delta("b", 2))  # the engine replica's side sees it gone: its request ends
    await receiver.aclose()
    await server.close()


async def test_cancel_cancels_serves_call_and_drops_later_deltas():
    server, receiver, link = await connected()
    call = ServeCall([ON_CHANNEL], end=asyncio.Event())
    handle = ScriptedHandle(call)
    stream = ChannelHandle(handle, receiver).generate.remote("r")
    key = handle.reply_to[0][1]
    link.send(key, delta("a", 1))
    await anext(stream)
    stream.cancel()
    assert call.cancelled and not receiver._inboxes
    link.send(key, delta("b", 2))  # arrives for nobody: dropped
    await asyncio.sleep(0.05)
    await receiver.aclose()
    await server.close()


async def test_a_serve_call_that_ends_without_the_finishing_delta_fails_after_the_grace(monkeypatch):
    monkeypatch.setattr(handle_module, "FINAL_GRACE_S", 0.05)
    server, receiver, link = await connected()
    handle = ScriptedHandle(ServeCall([ON_CHANNEL]))
    stream = ChannelHandle(handle, receiver).generate.remote("r")
    link.send(handle.reply_to[0][1], delta("a", 1))
    assert (await anext(stream)).text == "a"
    with pytest.raises(EngineDeadError, match="without its last tokens"):
        await asyncio.wait_for(anext(stream), 5)
    await receiver.aclose()
    await server.close()


async def test_a_hello_with_the_wrong_secret_is_refused():
    server = ChannelServer()
    await server.start(HOST)
    _, writer = await asyncio.open_connection(*server.offer.address)
    writer.write(hello(b"\0" * 16, "intruder"))
    await writer.drain()
    await asyncio.sleep(0.05)
    assert server.sender("intruder") is None
    writer.close()
    await server.close()


def test_a_connection_that_is_not_a_channel_is_refused_at_its_first_bytes():
    with pytest.raises(ValueError):
        read_hello(b"GET / HTTP/1.1\r\n")
    assert read_hello(hello(b"s" * 16, "ingress")[:10]) is None


async def test_deltas_that_pile_up_while_the_ingress_is_behind_leave_merged_per_stream():
    server, receiver, link = await connected()
    (key_a, inbox_a), (key_b, inbox_b) = receiver.open(), receiver.open()
    link.pause_writing()  # the socket's buffer is over its mark
    link.send(key_a, delta("a1", 1))
    link.send(key_b, delta("b1", 1))
    link.send(key_a, delta("a2", 2))
    await asyncio.sleep(0.02)
    assert not inbox_a._pending  # nothing left while paused
    link.resume_writing()
    merged = await inbox_a.next()
    assert (merged.text, merged.token_ids, merged.completion_tokens) == ("a1a2", [1, 2], 2)
    assert (await inbox_b.next()).text == "b1"
    await receiver.aclose()
    await server.close()


def test_frames_split_anywhere_are_read_whole():
    data = frame([(1, delta("a", 1))]) + frame([(2, delta("b", 1)), (3, delta("c", 1))])
    buffer, got = bytearray(), []
    for i in range(0, len(data), 7):
        buffer += data[i : i + 7]
        got += read_frames(buffer)
    assert [[key for key, _ in items] for items in got] == [[1], [2, 3]] and not buffer


async def test_an_address_that_refuses_is_not_tried_again_for_a_while(monkeypatch):
    server = ChannelServer()
    await server.start(HOST)
    offer = server.offer
    await server.close()  # nobody listens there now
    receiver = ChannelReceiver()
    attempts = []
    connect = receiver._connect
    monkeypatch.setattr(receiver, "_connect", lambda o: (attempts.append(o), connect(o))[1])
    receiver.connect(offer)
    for _ in range(100):
        if not receiver._connecting:
            break
        await asyncio.sleep(0.01)
    receiver.connect(offer)  # a request's offer right after: not tried again
    assert len(attempts) == 1 and not receiver._connecting


async def test_a_connection_that_says_nothing_is_dropped(monkeypatch):
    from serve_app.delta_channel import sender

    monkeypatch.setattr(sender, "HELLO_TIMEOUT_S", 0.05)
    server = ChannelServer()
    await server.start(HOST)
    reader, writer = await asyncio.open_connection(*server.offer.address)
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
    writer.close()
    await server.close()
