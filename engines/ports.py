"""A free TCP port, for the servers this project starts beside others on one machine."""

from __future__ import annotations

import random
import socket
from collections.abc import Container


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the server binds it a moment later; a clash fails its start)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_port_between(first: int, last: int, host: str = "127.0.0.1", *, avoid: Container[int] = ()) -> int | None:
    """A port in ``[first, last)`` nobody listens on right now, other than those to ``avoid``; None when no try of
    a few hundred at random found one. For a port a server binds again later (``bind(0)`` hands out ephemeral
    ports, which an outgoing connection may hold by then)."""
    for _ in range(200):
        port = random.randrange(first, last)
        if port in avoid:
            continue
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        return port
    return None
