"""A free TCP port, for the servers this project starts beside others on one machine."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the server binds it a moment later; a clash fails its start)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
