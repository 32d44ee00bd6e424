"""What crosses a delta channel: length-prefixed pickled frames one way, one hello the other, and the two markers
an engine replica's Serve answer starts with."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

# A frame: 4 bytes of length (big-endian), then a pickled list of (key, Delta). Only the ingress unpickles, and
# only what the engine replica it connected to (an address Serve handed it) wrote; the engine replica never
# unpickles what arrives on its port.
LENGTH_BYTES = 4
MAGIC = b"VSC1"  # the hello's first bytes: a stray connection is dropped before anything else is read
SECRET_BYTES = 16
MAX_CHANNEL_ID_BYTES = 255


@dataclass(frozen=True, slots=True)
class ChannelOffer:
    """An engine replica's first item to a channel it has no connection from: where to connect, and the secret
    that proves to it that the connection comes from a caller Serve let through."""

    host: str
    port: int
    secret: bytes

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port


@dataclass(frozen=True, slots=True)
class OnChannel:
    """An engine replica's first item for a request whose deltas it sends on the caller's channel."""


ON_CHANNEL = OnChannel()


def frame(items: list[tuple[int, Any]]) -> bytes:
    payload = pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL)
    return len(payload).to_bytes(LENGTH_BYTES, "big") + payload


def hello(secret: bytes, channel_id: str) -> bytes:
    name = channel_id.encode()
    if len(secret) != SECRET_BYTES or len(name) > MAX_CHANNEL_ID_BYTES:
        raise ValueError("a channel hello takes a 16-byte secret and a channel id of at most 255 bytes")
    return MAGIC + secret + bytes([len(name)]) + name


def read_hello(buffer: bytes | bytearray) -> tuple[bytes, str, int] | None:
    """(secret, channel id, bytes read) from the start of ``buffer``; None while it is incomplete. Raises
    ValueError for anything that is not a hello."""
    head = len(MAGIC) + SECRET_BYTES + 1
    if len(buffer) >= len(MAGIC) and bytes(buffer[: len(MAGIC)]) != MAGIC:
        raise ValueError("not a delta channel hello")
    if len(buffer) < head:
        return None
    size = buffer[head - 1]
    if len(buffer) < head + size:
        return None
    secret = bytes(buffer[len(MAGIC) : len(MAGIC) + SECRET_BYTES])
    return secret, bytes(buffer[head : head + size]).decode(), head + size


def read_frames(buffer: bytearray) -> list[list[tuple[int, Any]]]:
    """Every whole frame at the start of ``buffer``, unpickled; removes them from it."""
    frames = []
    start = 0
    end = len(buffer)
    view = memoryview(buffer)
    try:
        while end - start >= LENGTH_BYTES:
            size = int.from_bytes(view[start : start + LENGTH_BYTES], "big")
            if end - start - LENGTH_BYTES < size:
                break
            body = start + LENGTH_BYTES
            frames.append(pickle.loads(view[body : body + size]))
            start = body + size
    finally:
        view.release()
    if start:
        del buffer[:start]
    return frames
