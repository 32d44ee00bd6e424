"""What crosses a delta channel: length-prefixed pickled frames one way, one hello the other, and the two markers
an engine replica's Serve answer starts with."""

from __future__ import annotations

from dataclasses import dataclass

from engines.ipc import delta_from_wire, delta_to_wire, pack_frame, unpack_frames
from engines.protocol import Delta

# A frame is engines/ipc.py's (4 bytes of length, big-endian, then a pickle) of a list of (key, Delta's fields). Only
# the ingress unpickles, and only what the engine replica it connected to (an address Serve handed it) wrote; the
# engine replica never unpickles what arrives on its port.
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


def frame(items: list[tuple[int, Delta]]) -> bytes:
    """One frame of ``(key, delta)`` pairs. A delta travels as the tuple of its fields, as over the engine's own
    pipe (``engines/ipc.py``): a tuple of builtins pickles and unpickles at about half a dataclass's cost."""
    return pack_frame([(key, delta_to_wire(delta)) for key, delta in items])


def hello(secret: bytes, channel_id: str) -> bytes:
    name = channel_id.encode()
    if len(secret) != SECRET_BYTES or len(name) > MAX_CHANNEL_ID_BYTES:
        raise ValueError("a channel hello takes a 16-byte secret and a channel id of at most 255 bytes")
    return MAGIC + secret + bytes([len(name)]) + name


def read_hello(buffer: bytes | bytearray) -> tuple[bytes, str] | None:
    """(secret, channel id) from the start of ``buffer``; None while it is incomplete. Raises ValueError for
    anything that is not a hello."""
    head = len(MAGIC) + SECRET_BYTES + 1
    if len(buffer) >= len(MAGIC) and bytes(buffer[: len(MAGIC)]) != MAGIC:
        raise ValueError("not a delta channel hello")
    if len(buffer) < head:
        return None
    size = buffer[head - 1]
    if len(buffer) < head + size:
        return None
    secret = bytes(buffer[len(MAGIC) : len(MAGIC) + SECRET_BYTES])
    return secret, bytes(buffer[head : head + size]).decode()


def read_frames(buffer: bytearray) -> list[list[tuple[int, Delta]]]:
    """Every whole frame at the start of ``buffer``, its deltas rebuilt; removes them from it."""
    return [[(key, delta_from_wire(fields)) for key, fields in items] for items in unpack_frames(buffer)]
