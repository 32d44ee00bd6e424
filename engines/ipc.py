"""The wire between an engine and its own process: framed pickle messages over one stream socket.

Both ends (``engines/process.py`` in the replica, ``engines/engine_core.py`` in the engine's process) read and
write without ever blocking their asyncio loop: the socket is non-blocking, reads come from ``loop.add_reader``
(no polling thread), and a write the kernel cannot take at once waits in a buffer for ``loop.add_writer``.
A frame is a 4-byte big-endian length and a pickle. End of file means the other process is gone.

Deltas travel as plain tuples (their fields in order): pickling a tuple of builtins is several times cheaper
than pickling a dataclass, and the relay pays it for every chunk of every stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import operator
import pickle
import socket
import struct
from collections.abc import Callable
from typing import Any

from core.errors import EngineDeadError
from engines.protocol import Delta

logger = logging.getLogger(__name__)

_HEADER = struct.Struct("!I")
_READ_SIZE = 1 << 18

# ---------------------------------------------------------------------------------------------- deltas

_delta_fields = operator.attrgetter(*(f.name for f in dataclasses.fields(Delta)))


def delta_to_wire(delta: Delta) -> tuple:
    """``delta``'s fields in declaration order (``Delta(*t)`` rebuilds it)."""
    return _delta_fields(delta)


def delta_from_wire(fields: tuple) -> Delta:
    return Delta(*fields)


def portable_error(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else an ``EngineDeadError`` naming it (the other side must get *an* error).

    The project's errors keep their type and fields (``ServingError.__reduce__``); anything else that pickles
    keeps its type and message. Tracebacks never cross.
    """
    try:
        pickle.loads(pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:
        return EngineDeadError(f"The engine failed: {type(exc).__name__}: {exc}")
    return exc


# ---------------------------------------------------------------------------------------------- frames


def pack_frame(message: Any) -> bytes:
    """``message`` as one frame: its pickle's length (4 bytes, big-endian), then the pickle."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(payload)) + payload


def unpack_frames(buffer: bytearray) -> list[Any]:
    """Every whole frame at the start of ``buffer``, unpickled, in order; removes them from it (a partial frame
    stays for the next read)."""
    offset, size = 0, len(buffer)
    messages = []
    with memoryview(buffer) as view:
        while size - offset >= _HEADER.size:
            (length,) = _HEADER.unpack_from(view, offset)
            end = offset + _HEADER.size + length
            if end > size:
                break
            messages.append(pickle.loads(view[offset + _HEADER.size : end]))
            offset = end
    del buffer[:offset]
    return messages


# ---------------------------------------------------------------------------------------------- channel


class Channel:
    """One end of the socket: ``send(message)`` from the loop's thread; ``on_message`` for every message received.

    ``on_close`` runs once, when the other end has closed (its process exited) or on a broken connection;
    messages sent after that are dropped.
    """

    def __init__(
        self,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        on_message: Callable[[Any], None],
        on_close: Callable[[], None],
    ) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._fd = sock.fileno()
        self._loop = loop
        self._on_message = on_message
        self._on_close = on_close
        self._inbuf = bytearray()
        self._outbuf = bytearray()
        self._writing = False
        self._drained: asyncio.Future[None] | None = None
        self.closed = False
        loop.add_reader(self._fd, self._on_readable)

    def send(self, message: Any) -> None:
        if self.closed:
            return
        frame = pack_frame(message)
        if self._outbuf:  # earlier frames still wait for the socket: keep the order
            self._outbuf += frame
            return
        try:
            sent = self._sock.send(frame)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close()
            return
        if sent < len(frame):
            self._outbuf += frame[sent:]
            self._loop.add_writer(self._fd, self._on_writable)
            self._writing = True

    async def drain(self) -> None:
        """Returns when every frame sent so far is in the kernel's hands (or the channel closed)."""
        if not self._outbuf or self.closed:
            return
        if self._drained is None:
            self._drained = self._loop.create_future()
        await asyncio.shield(self._drained)

    def close(self) -> None:
        """Closes this end without calling ``on_close`` (the owner knows)."""
        self._close(notify=False)

    # ---------------------------------------------------------------- loop callbacks

    def _on_readable(self) -> None:
        try:
            data = self._sock.recv(_READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close()
            return
        self._inbuf += data
        for message in unpack_frames(self._inbuf):
            if self.closed:
                return
            self._on_message(message)

    def _on_writable(self) -> None:
        try:
            sent = self._sock.send(self._outbuf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close()
            return
        del self._outbuf[:sent]
        if not self._outbuf:
            self._loop.remove_writer(self._fd)
            self._writing = False
            self._resolve_drained()

    def _resolve_drained(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    def _close(self, notify: bool = True) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            self._loop.remove_reader(self._fd)
        if self._writing:
            with contextlib.suppress(Exception):
                self._loop.remove_writer(self._fd)
        self._outbuf.clear()
        self._resolve_drained()
        self._sock.close()
        if notify:
            self._on_close()
