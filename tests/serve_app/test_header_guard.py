"""serve_app.header_guard: headers Serve's direct ingress decodes as UTF-8, refused with OpenAI's 400 when they are
not, before Serve's entry point (here a stand-in; the served app end to end: test_fuzz_http.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from serve_app.header_guard import SERVE_DECODED, guard_direct_ingress, undecodable_header


class _Replica:
    """Serve's ``Replica`` as the guard sees it: an ASGI entry point."""

    def __init__(self) -> None:
        self.served: list[dict[str, Any]] = []

    async def _direct_ingress_asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.served.append(scope)


async def _call(replica: _Replica, headers: list[tuple[bytes, bytes]], kind: str = "http") -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await replica._direct_ingress_asgi({"type": kind, "headers": headers}, None, send)
    return sent


@pytest.mark.parametrize(
    "name", [b"x-request-id", b"X-Session-Id", b"x_request_timeout_seconds", b"serve-multiplexed-model-id"]
)
async def test_a_header_serve_decodes_that_is_not_utf8_is_openais_400_naming_it(name):
    assert guard_direct_ingress(_Replica) is True
    assert guard_direct_ingress(_Replica) is True  # once: a second call wraps nothing more
    replica = _Replica()
    sent = await _call(replica, [(b"accept", b"*/*"), (name, b"a\x80b")])
    assert replica.served == []
    assert sent[0]["status"] == 400
    error = json.loads(sent[1]["body"])["error"]
    assert error["param"] == name.decode() and error["type"] == "invalid_request_error" and "UTF-8" in error["message"]


async def test_everything_else_goes_on_to_serve_untouched():
    guard_direct_ingress(_Replica)
    replica = _Replica()
    fine = [(b"x-request-id", "é".encode()), (b"authorization", b"Bearer \xff"), (b"x-other", b"\x80")]
    assert await _call(replica, fine) == []
    assert await _call(replica, [(b"x-request-id", b"\x80")], kind="websocket") == []
    assert len(replica.served) == 2


def test_only_the_headers_serve_decodes_are_checked():
    assert undecodable_header([(b"x-slo-tier", b"\xff"), (b"X-REQUEST-ID", b"\xff")], SERVE_DECODED) == "X-REQUEST-ID"
    assert undecodable_header([(b"x-slo-tier", b"\xff")], SERVE_DECODED) is None


def test_this_ray_has_the_entry_point_the_guard_wraps():
    from ray.serve._private.replica import Replica

    entry = Replica._direct_ingress_asgi
    assert guard_direct_ingress() is True
    assert Replica._direct_ingress_asgi.__wrapped__ is entry  # type: ignore[attr-defined]
    Replica._direct_ingress_asgi = entry  # type: ignore[method-assign]  # this process serves nothing: put it back
