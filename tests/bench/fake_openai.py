"""A tiny OpenAI-compatible streaming server whose timing is known exactly, for the bench tests.

Each completion streams ``max_tokens`` one-token chunks: the first ``first_delay_s`` after the
request, each next one ``gap_s`` later (defaults 0.2 s and 0.05 s, overridable per request by
body fields of those names), then a usage chunk and ``data: [DONE]``. The model name picks a
failure instead: ``overloaded`` (429 + OpenAI error JSON), ``plain-500`` (500, text body),
``midstream`` (an error event after two chunks), ``stall`` (sleeps 30 s before the first chunk),
``no-usage`` (no usage chunk).

The event schedule is one pure function, :func:`schedule`, played two ways: over real HTTP by
:func:`make_app` (sleeping), and through an ``httpx.MockTransport`` by :class:`ClockedStream`,
which advances a :class:`ManualClock` instead of sleeping so the measured times are exact.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

FIRST_DELAY_S = 0.2
GAP_S = 0.05
VARIANT = "tiny"


def _sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n".encode()


def _chunk(api: str, text: str) -> dict[str, Any]:
    if api == "chat":
        return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]}
    return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": None}]}


def _prompt_tokens(body: dict[str, Any]) -> int:
    if "messages" in body:
        return sum(len(m["content"].split()) for m in body["messages"])
    prompt = body.get("prompt", "")
    return len(prompt) if isinstance(prompt, list) else len(prompt.split())


def schedule(body: dict[str, Any], api: str) -> list[tuple[float, bytes]]:
    """(delay before it, bytes) for each SSE event of one streamed response."""
    first = float(body.get("first_delay_s", FIRST_DELAY_S))
    gap = float(body.get("gap_s", GAP_S))
    n = int(body["max_tokens"])
    model = body["model"]
    if model == "midstream":
        n = 2
    events = [(first if i == 0 else gap, _sse(_chunk(api, "a"))) for i in range(n)]
    if model == "midstream":
        events.append((gap, _sse({"error": {"message": "engine died", "type": "engine_error", "code": 500}})))
    elif model != "no-usage":
        usage = {"prompt_tokens": _prompt_tokens(body), "completion_tokens": n, "total_tokens": 0}
        events.append((0.0, _sse({"object": "text_completion", "choices": [], "usage": usage})))
    events.append((0.0, _sse("[DONE]")))
    return events


def error_response(body: dict[str, Any]) -> Response | None:
    """The failure the model name asks for, or None to stream normally."""
    if body["model"] == "overloaded":
        error = {"message": "too many requests", "type": "overloaded", "code": 429}
        return JSONResponse({"error": error}, status_code=429, headers={"retry-after": "1"})
    if body["model"] == "plain-500":
        return PlainTextResponse("boom", status_code=500)
    return None


def response_headers(request_id: str | None) -> dict[str, str]:
    return {
        "x-route-variant": VARIANT,
        "x-request-id": f"srv-{request_id}",
        "x-route-predicted-ttft-ms": "180",
        "x-route-predicted-tpot-ms": "52.5",
        "server-timing": "ingress;dur=1.5, engine;dur=150.0",
    }


def make_app(variants: list[dict[str, Any]] | None = None) -> Starlette:
    """The server; ``app.state.seen`` keeps (headers, body) of every completion request, ``app.state.peers`` the
    client address (host, port: one per connection) each came on."""

    async def completions(request: Request) -> Response:
        api = "chat" if request.url.path.endswith("/chat/completions") else "completions"
        body = await request.json()
        request.app.state.seen.append((dict(request.headers), body))
        request.app.state.peers.append(request.client)
        failure = error_response(body)
        if failure is not None:
            return failure

        async def events() -> AsyncIterator[bytes]:
            if body["model"] == "stall":
                await asyncio.sleep(30)
            for delay, data in schedule(body, api):
                if delay:
                    await asyncio.sleep(delay)
                yield data

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers=response_headers(request.headers.get("x-request-id")),
        )

    async def list_variants(request: Request) -> Response:
        return JSONResponse({"variants": variants})

    routes = [
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", completions, methods=["POST"]),
    ]
    if variants is not None:
        routes.append(Route("/variants", list_variants))
    app = Starlette(routes=routes)
    app.state.seen = []
    app.state.peers = []
    return app


class ServerThread:
    """uvicorn serving ``app`` on a free loopback port, in a daemon thread."""

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


class ManualClock:
    """A clock that moves only when told: sleeping advances it at once."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds

    async def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)
        await asyncio.sleep(0)  # still let other tasks run, as a real sleep would


class ClockedStream(httpx.AsyncByteStream):
    """A response body that advances ``clock`` by each event's delay just before handing it over.

    The client pulls each event when it is ready for it, so the clock reads exactly the scheduled
    time when the client sees the event: measured latencies equal the schedule, on any machine.
    """

    def __init__(self, clock: ManualClock, events: list[tuple[float, bytes]]) -> None:
        self.clock = clock
        self.events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for delay, data in self.events:
            self.clock.advance(delay)
            yield data


def clocked_transport(clock: ManualClock) -> httpx.MockTransport:
    """The fake server's behaviour, timed by ``clock``, without a socket."""

    async def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        api = "chat" if request.url.path.endswith("/chat/completions") else "completions"
        failure = error_response(body)
        if failure is not None:
            return httpx.Response(failure.status_code, headers=dict(failure.headers), content=bytes(failure.body))
        return httpx.Response(
            200,
            headers={
                "content-type": "text/event-stream",
                **response_headers(request.headers.get("x-request-id")),
            },
            stream=ClockedStream(clock, schedule(body, api)),
        )

    return httpx.MockTransport(handle)
