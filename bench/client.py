"""One streamed request against an OpenAI-compatible endpoint, measured into a :class:`RequestRecord`.

The request streams (``stream: true``) and asks for a final usage chunk
(``stream_options.include_usage``), so token counts come from the server when it reports them.
Every outcome becomes a record, never an exception: an HTTP error keeps its status and the OpenAI
error's type, an error event inside the stream keeps status 200 and its type, a connection
failure or the hard per-request timeout has no status. A request whose spec says
``cancel_after_chunks`` is abandoned after that many text chunks and recorded as ``cancelled``, not
as an error.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import httpx
from httpx_sse import SSEError, aconnect_sse
from pydantic import BaseModel, Field, model_validator

from traffic.records import RequestRecord, slo_met, time_per_output_token
from traffic.workload import RequestSpec


class Clock(Protocol):
    """Where the load generator reads time and waits; tests inject one they drive themselves."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    def now(self) -> float:
        return time.perf_counter()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def is_loopback(url: str) -> bool:
    host = httpx.URL(url).host
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # any other name could resolve anywhere


class TargetConfig(BaseModel):
    url: str = Field(description="Base URL of the OpenAI-compatible server, e.g. http://127.0.0.1:8000.")
    model: str = Field(description="The request's model field.")
    api: Literal["completions", "chat"] = Field(
        "completions", description="POST /v1/completions or /v1/chat/completions."
    )
    api_key: str | None = Field(None, description="Sent as 'Authorization: Bearer KEY' when set.")
    ignore_eos: bool = Field(True, description="Send ignore_eos so outputs are exactly max_tokens long.")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Merged into every request body.")
    request_timeout_s: float = Field(300.0, gt=0, description="Hard limit on one request, send to last byte.")
    allow_remote: bool = Field(False, description="Allow a target that is not a loopback address.")

    @model_validator(mode="after")
    def _check(self) -> TargetConfig:
        if not self.allow_remote and not is_loopback(self.url):
            raise ValueError(f"{self.url} is not a loopback address; pass allow_remote to load a remote server")
        return self

    @property
    def endpoint(self) -> str:
        base = self.url.rstrip("/")
        if not base.endswith("/v1"):
            base += "/v1"
        return f"{base}/{'chat/completions' if self.api == 'chat' else 'completions'}"

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": spec.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.api == "chat":
            if not isinstance(spec.prompt, str):
                raise ValueError("the chat API takes text prompts: use prompt_mode 'text'")
            body["messages"] = [{"role": "user", "content": spec.prompt}]
        else:
            body["prompt"] = spec.prompt
        if self.ignore_eos:
            body["ignore_eos"] = True
        return body | self.extra_body

    def headers(self, spec: RequestSpec, request_id: str) -> dict[str, str]:
        headers = {"x-request-id": request_id, **spec.slo.headers()}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        return headers


@dataclass(slots=True)
class _Stream:
    """What the SSE events of one response said, timed on the load generator's clock."""

    chunk_times: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, where the server says
    error_type: str | None = None
    error_message: str | None = None

    def take(self, payload: dict[str, Any], now: float, api: str) -> None:
        if "error" in payload:
            error = payload["error"] if isinstance(payload["error"], dict) else {"message": str(payload["error"])}
            self.error_type = str(error.get("type") or "stream_error")
            self.error_message = str(error.get("message") or "")
            return
        for choice in payload.get("choices") or []:
            text = (choice.get("delta") or {}).get("content") if api == "chat" else choice.get("text")
            if text:
                self.chunk_times.append(now)
                break
        usage = payload.get("usage")
        if usage:
            self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
            self.completion_tokens = usage.get("completion_tokens", self.completion_tokens)
            details = usage.get("prompt_tokens_details") or {}
            self.cached_tokens = details.get("cached_tokens", self.cached_tokens)


def _http_error(response: httpx.Response) -> tuple[str, str]:
    """(type, message) of an error response: the OpenAI error JSON's, else the status and body."""
    fallback = (f"http_{response.status_code}", response.text[:500])
    try:
        error = response.json().get("error")
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError):
        return fallback
    if isinstance(error, dict):
        return str(error.get("type") or fallback[0]), str(error.get("message") or "")
    if isinstance(error, str):
        return fallback[0], error
    return fallback


async def send_request(
    client: httpx.AsyncClient,
    target: TargetConfig,
    spec: RequestSpec,
    *,
    request_id: str,
    clock: Clock,
    start: float,
    run_start: float,
    wall_start: float,
) -> RequestRecord:
    """Send ``spec`` and measure it from ``start`` (a reading of ``clock``, taken by the caller)."""
    record = RequestRecord(
        request_id=request_id,
        index=spec.index,
        start_time=wall_start + (start - run_start),
        start_s=start - run_start,
        arrival_s=spec.send_at,
        prompt_tokens=spec.prompt_tokens,
        max_tokens=spec.max_tokens,
        slo_tier=spec.slo.tier,
        slo_ttft_ms=spec.slo.ttft_ms,
        slo_tpot_ms=spec.slo.tpot_ms,
        turn=spec.turn,
    )
    stream = _Stream()
    try:
        async with (
            asyncio.timeout(target.request_timeout_s),
            aconnect_sse(
                client,
                "POST",
                target.endpoint,
                json=target.body(spec),
                headers=target.headers(spec, request_id),
                timeout=target.request_timeout_s,
            ) as source,
        ):
            response = source.response
            record.status = response.status_code
            record.variant = response.headers.get("x-route-variant")
            record.route_reason = response.headers.get("x-route-reason")
            record.predicted_ttft_ms = _float_header(response.headers.get("x-route-predicted-ttft-ms"))
            record.predicted_tpot_ms = _float_header(response.headers.get("x-route-predicted-tpot-ms"))
            record.route_candidates = response.headers.get("x-route-candidates")
            timing = server_timing(response.headers.get("server-timing"))
            record.server_ingress_ms, record.server_engine_ms = timing.get("ingress"), timing.get("engine")
            record.server_request_id = response.headers.get("x-request-id")
            record.replica = response.headers.get("x-route-replica")
            record.ingress = response.headers.get("x-route-ingress")
            if response.status_code != 200:
                await response.aread()
                record.error_type, record.error_message = _http_error(response)
            else:
                async for event in source.aiter_sse():
                    if event.data.strip() == "[DONE]":
                        # Read on to the body's end, as the openai SDK does: a response left half-read closes its
                        # connection, and the next request would pay for a new one inside its TTFT.
                        record.done = True
                        continue
                    stream.take(json.loads(event.data), clock.now(), target.api)
                    if stream.error_type is not None:
                        break  # the server ends the stream after an error event
                    if spec.cancel_after_chunks is not None and len(stream.chunk_times) >= spec.cancel_after_chunks:
                        # Leaving the block closes the half-read response, which drops the connection: the
                        # server sees a client that went away, which is what a cancellation is.
                        record.cancelled = True
                        break
                record.error_type, record.error_message = stream.error_type, stream.error_message
    except TimeoutError:
        record.error_type = "timeout"
        record.error_message = f"no complete response within {target.request_timeout_s:g} s"
    except httpx.HTTPError as exc:
        record.error_type = type(exc).__name__
        record.error_message = str(exc) or repr(exc)
    except (SSEError, json.JSONDecodeError) as exc:
        record.error_type = "protocol_error"
        record.error_message = str(exc)
    end = clock.now()

    record.e2e_s = end - start
    record.chunks = len(stream.chunk_times)
    if stream.chunk_times:
        record.ttft_s = stream.chunk_times[0] - start
        record.itl_s = [b - a for a, b in zip(stream.chunk_times, stream.chunk_times[1:], strict=False)]
    if stream.prompt_tokens is not None:
        record.prompt_tokens = stream.prompt_tokens
    record.cached_tokens = stream.cached_tokens
    record.output_tokens = stream.completion_tokens if stream.completion_tokens is not None else record.chunks
    if record.ok:
        record.tpot_s = time_per_output_token(record.e2e_s, record.ttft_s, record.output_tokens)
    record.slo_met = slo_met(record)
    return record


def _float_header(value: str | None) -> float | None:
    """A numeric response header, or None when absent or not a number (an older server, a proxy's edit)."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def server_timing(value: str | None) -> dict[str, float]:
    """The durations of a W3C ``Server-Timing`` header (``name;dur=ms, ...``); entries without one are left out."""
    out: dict[str, float] = {}
    for entry in (value or "").split(","):
        name, *params = (part.strip() for part in entry.split(";"))
        for param in params:
            key, _, dur = param.partition("=")
            if key.strip() == "dur" and name:
                parsed = _float_header(dur.strip().strip('"'))
                if parsed is not None:
                    out[name] = parsed
    return out
