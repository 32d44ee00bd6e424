"""Serve's code in front of the app reads a few request headers as UTF-8: one that is not is a 400 here, not its 500.

With Serve's fast path (``fast_path.py``: HAProxy, then direct ingress) each ingress replica serves HTTP itself, and
Serve's entry point there decodes some headers as strict UTF-8 before the app sees the request (Ray 2.60
``serve/_private/replica.py`` ``Replica._direct_ingress_asgi``: ``x-request-id``; ``serve/_private/http_util.py``: the
session-id header, ``x-request-timeout-seconds``, ``x-request-disconnect-disabled``; the multiplexed model id). HTTP
lets a header value carry any byte from 0x80 up (obs-text, RFC 9110 section 5.5), and one that is not UTF-8 raises
there: uvicorn answers a plain-text ``500 Internal Server Error`` (found by ``tests/serve_app/test_fuzz_http.py``).

:func:`guard_direct_ingress` wraps that entry point in the ingress replica's process: a request with such a header is
answered 400 in OpenAI's error shape, naming the header; every other request goes on to Serve untouched. Serve's
Python proxy (HAProxy off) decodes the same headers in its own process, where the app runs no code: there Serve's 500
remains (docs/operating.md).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from core.errors import InvalidRequestError
from serve_app.errors import describe

# The headers Serve decodes, as it matches them: lowercased, '-' and '_' alike. Its session-id header (x-session-id)
# is configurable (RAY_SERVE_SESSION_ID_HEADER_KEY): the one configured is added when the guard is installed.
SERVE_DECODED = frozenset(
    {
        "x_request_id",
        "x_request_timeout_seconds",
        "x_request_disconnect_disabled",
        "serve_multiplexed_model_id",
        "x_session_id",
    }
)

Send = Callable[[dict[str, Any]], Awaitable[None]]


def _normalized(name: str) -> str:
    return name.lower().replace("-", "_")


def undecodable_header(headers: Iterable[tuple[bytes, bytes]], decoded: frozenset[str]) -> str | None:
    """The name of the first header of ``decoded`` (normalized names) whose value is not UTF-8; None if none."""
    for name, value in headers:
        text = name.decode("latin-1")
        if _normalized(text) in decoded:
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                return text
    return None


async def refuse(send: Send, header: str) -> None:
    """Answers the request: a 400 in OpenAI's error shape, naming ``header``."""
    status, body, _ = describe(InvalidRequestError(f"Header {header} is not UTF-8 text.", param=header))
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def guard_direct_ingress(replica_class: Any = None) -> bool:
    """Wraps Serve's direct-ingress entry point (``replica_class``: Serve's ``Replica`` unless given), once per
    process. Returns whether this Ray has one to wrap. Called from the ingress replica's constructor: Serve starts
    the replica's HTTP server only after it, and looks the entry point up then."""
    decoded = SERVE_DECODED
    if replica_class is None:
        try:
            from ray.serve._private.constants import SERVE_SESSION_ID
            from ray.serve._private.replica import Replica
        except ImportError:  # a Ray that moved them: nothing known to guard
            return False
        replica_class, decoded = Replica, SERVE_DECODED | {_normalized(SERVE_SESSION_ID)}
    entry = getattr(replica_class, "_direct_ingress_asgi", None)
    if entry is None:
        return False
    if getattr(entry, "__wrapped__", None) is not None:  # guarded already
        return True

    @functools.wraps(entry)
    async def guarded(self: Any, scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope.get("type") == "http":
            header = undecodable_header(scope.get("headers", ()), decoded)
            if header is not None:
                await refuse(send, header)
                return
        await entry(self, scope, receive, send)

    replica_class._direct_ingress_asgi = guarded
    return True
