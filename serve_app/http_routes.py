"""The HTTP routes: OpenAI's API (SSE streaming) over the request pipeline, and the small endpoints beside it.

A generation route reads the request (headers, the JSON body within its size and nesting limits:
:func:`parse_json_body`), runs it through the pipeline, one ``Pipeline.run`` per choice (``choices.py``, as gRPC
does; a completions batch's prompts each have their own), and writes what comes back in OpenAI's shapes
(``openai_format.py``): before the first token an error is an HTTP error (``errors.py``); after it, an SSE error
event followed by ``data: [DONE]``. Everything else (auth, validation, routing, limits, the engine, the
release; starting, merging and ending a request's choices) is the pipeline's and ``choices.py``'s.

The routes are methods of :class:`HttpRoutes`, mounted on a FastAPI app by :func:`mount`: on the class, for Serve
(``ingress.py``: Serve's class-based view binds ``self`` to the replica), or on an instance, for an app that runs
anywhere (:func:`standalone_app`: the tests, with a fake engine).
"""

# No `from __future__ import annotations` here: FastAPI must resolve the route parameters' annotations.
import json
import logging
import math
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response, StreamingResponse

from core.errors import InvalidRequestError, PayloadTooLargeError, PermissionDeniedError, ServingError
from engines.protocol import TokenLogprob
from serve_app import choices, openapi_doc
from serve_app.choices import Choices
from serve_app.errors import error_body, error_response
from serve_app.openai_format import DONE, ResponseShape, openai_finish_reason, sse
from serve_app.pipeline import Inbound, Pipeline, RequestFailed
from serve_app.stats_board import ReplicaReport

logger = logging.getLogger("ray.serve")


def new_app() -> FastAPI:
    """A FastAPI app that answers errors in OpenAI's shape and documents the generation routes; no routes yet."""
    app = FastAPI(title="variant-serve", docs_url=None, redoc_url=None)

    def openapi() -> dict[str, Any]:
        # The generation routes validate their own bodies, so FastAPI cannot see them: openapi_doc.py describes them.
        if app.openapi_schema is None:
            app.openapi_schema = openapi_doc.build(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(ServingError)
    async def serving_error(request: Request, exc: ServingError) -> Response:
        # Errors raised by the small routes (auth on /v1/models, /variants); generation answers its own.
        return error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Unknown routes and wrong methods still answer in OpenAI's error format.
        return JSONResponse(
            error_body(str(exc.detail), "invalid_request_error", code=str(exc.status_code)),
            status_code=exc.status_code,
        )

    return app


def header_request_id(headers: Mapping[str, str]) -> str:
    """The client's ``x-request-id`` when it sent one, else a new id."""
    return headers.get("x-request-id") or f"req-{uuid.uuid4().hex}"


class HttpRoutes:
    """The HTTP API of one ingress replica over its pipeline."""

    def __init__(
        self,
        pipeline: Pipeline,
        variant_stats: Callable[[], Awaitable[dict[str, list[ReplicaReport]]]],
        request_id: Callable[[Mapping[str, str]], str] = header_request_id,
    ) -> None:
        """``variant_stats``: the stats board's replicas per variant (``GET /variants``); ``request_id``: the id a
        request is logged and answered under."""
        self._pipeline = pipeline
        self._variant_stats = variant_stats
        self._request_id = request_id

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self._generate(request, chat=True)

    async def models(self, request: Request) -> dict:
        pipe = self._pipeline
        pipe.keys.authenticate(request.headers.get("authorization"))
        return {
            "object": "list",
            "data": [
                {"id": n, "object": "model", "created": pipe.created, "owned_by": "variant-serve"}
                for n in pipe.model_names()
            ],
        }

    async def health(self) -> dict:
        return {"status": "ok"}

    async def variants(self, request: Request) -> dict:
        config = self._pipeline.config
        caller = self._pipeline.keys.authenticate(request.headers.get("authorization"))
        if caller is not None and config.auth.restrict_variants_endpoint and not caller.admin:
            raise PermissionDeniedError(f"Key '{caller.name}' is not an admin key; /variants needs one.")
        snapshot = await self._variant_stats()
        out = []
        for v in config.variants:
            posted = snapshot.get(v.name, [])
            # A starting replica posts once, with no context length yet (EngineStats.starting_ready_in_s).
            replicas = [r for r in posted if r.stats.context_length]
            out.append(
                {
                    "name": v.name,
                    "backend": v.engine.backend,
                    "model": v.engine.model,
                    "sampling_fields": sorted(v.engine.sampling_fields()),  # docs/openai-api.md
                    "replicas": len(replicas),
                    "starting_replicas": len(posted) - len(replicas),
                    "running_requests": sum(r.stats.running_requests for r in replicas),
                    "queued_requests": sum(r.stats.queued_requests for r in replicas),
                    "tokens_per_s": round(sum(r.stats.tokens_per_s for r in replicas), 1),
                    "replica_stats": [r.as_json() for r in posted],
                }
            )
        return {"model": config.model_name, "variants": out}

    # ------------------------------------------------------------------ generation

    async def _generate(self, request: Request, *, chat: bool) -> Response:
        pipe = self._pipeline
        flight = pipe.flight(self._request_id(request.headers))
        inbound = Inbound(
            chat=chat,
            authorization=request.headers.get("authorization"),
            slo_headers=request.headers,
            read_body=lambda: self._read_json(request),
        )
        try:
            started = await choices.start(pipe, flight, inbound)
        except RequestFailed as failure:
            logger.info("request %s rejected: %s %s", flight.request_id, failure.status, failure.error)
            return JSONResponse(failure.body, status_code=failure.status, headers={**failure.headers, **flight.headers})
        req = flight.request
        shape = ResponseShape(
            id=("chatcmpl-" if chat else "cmpl-") + flight.request_id.removeprefix("req-"),
            model=req.model,
            created=int(time.time()),
            chat=chat,
            logprobs=req.requested_logprobs() is not None,
            tool_names=req.parsed_tool_names() if chat else None,  # tool_calls read back (serve_app/tool_calls.py)
        )
        # Completions' echo: each choice's prompt, before its completion.
        echoes = [pipe.prompt_text(p) for p in req.prompts()] if not chat and req.echo else []
        echo = [echoes[index // started.n] for index in range(len(started))] if echoes else [""] * len(started)
        if req.stream:
            return StreamingResponse(
                self._relay(started, shape, req.include_usage, echo),
                media_type="text/event-stream",
                headers={**flight.headers, "cache-control": "no-cache"},
            )
        return await self._collect(started, shape, echo)

    async def _relay(
        self, started: Choices, shape: ResponseShape, include_usage: bool, echo: list[str]
    ) -> AsyncIterator[bytes]:
        """The SSE stream: every choice's chunks as they come, each with its index (``echo``: each choice's text
        before them); an error after the first token is an error event, then [DONE]."""
        try:
            for index, text in enumerate(echo):
                if text:
                    yield shape.sse_chunk(text, None, None, index)
            # The finishing chunk of the last choice to finish waits for the runs to end (each returns right after
            # yielding it) and leaves with the usage chunk and [DONE] as one write: each message costs the ingress a
            # send and a loop turn whatever its size, and a stream of ~30 messages had three at its end.
            tail, unfinished = b"", len(started)
            async for index, delta in started.deltas():
                if not delta.readable:
                    continue
                chunk = shape.sse_chunk(delta.text, openai_finish_reason(delta.finish_reason), delta.logprobs, index)
                if delta.finish_reason is not None:
                    unfinished -= 1
                    if not unfinished:
                        tail = chunk
                        continue
                yield chunk
            if include_usage:
                usage = started.usage()
                tail += sse(shape.usage_chunk(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens))
            yield tail + DONE
        except Exception as exc:  # after the first token: an error event, then [DONE]
            failure = await started.fail(exc)  # every choice aborted in its engine before the client is told
            logger.warning("request %s failed mid-stream: %s", started.flight.request_id, failure.error)
            yield sse(failure.body)
            yield DONE
        finally:
            await started.close()

    async def _collect(self, started: Choices, shape: ResponseShape, echo: list[str]) -> Response:
        """The whole response: every choice's text (after its ``echo``) in one body."""
        texts: list[list[str]] = [[text] for text in echo]
        logprobs: list[list[TokenLogprob]] = [[] for _ in range(len(started))]
        try:
            async for index, delta in started.deltas():
                texts[index].append(delta.text)
                logprobs[index].extend(delta.logprobs or ())
        except RequestFailed as failure:
            return JSONResponse(failure.body, status_code=failure.status, headers=failure.headers)
        finally:
            await started.close()
        usage = started.usage()
        body = shape.full_choices(
            [
                ("".join(parts), openai_finish_reason(last.finish_reason), lps)
                for parts, last, lps in zip(texts, started.lasts(), logprobs, strict=True)
            ],
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_tokens,
        )
        return JSONResponse(body, headers=started.flight.headers)

    # ------------------------------------------------------------------ checks

    async def _read_json(self, request: Request) -> Any:
        limit = self._pipeline.config.limits.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise PayloadTooLargeError(f"The request body is {declared} bytes; the limit is {limit}.")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLargeError(f"The request body exceeds the limit of {limit} bytes.")
            chunks.append(chunk)
        return parse_json_body(b"".join(chunks))


# Deeper JSON is refused: no OpenAI body nests more than a handful of levels (a tool's JSON schema, a few more), and
# every layer after parsing (validation, chat templates, guided decoding's schemas) recurses over it.
MAX_JSON_DEPTH = 64


def parse_json_body(raw: bytes) -> Any:
    """A request body as JSON, or an ``InvalidRequestError`` for anything else a client can send: bytes that are not
    JSON or not UTF-8 (or UTF-16/32, which JSON allows), NaN and Infinity (not JSON, though Python's parser takes
    them), a number beyond a double's range, an integer longer than Python converts (4,300 digits), nesting
    deeper than :data:`MAX_JSON_DEPTH`. A key sent twice keeps its last value, as in most parsers (RFC 8259,
    section 4, leaves it to them)."""
    try:
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")  # as json.loads decodes bytes
        body = json.loads(text, parse_constant=_not_json, parse_float=_finite)
    except RecursionError:  # the parser's own recursion, far beyond MAX_JSON_DEPTH
        raise InvalidRequestError(f"The request body nests deeper than {MAX_JSON_DEPTH} levels.") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an integer over the digit limit, _not_json
        raise InvalidRequestError(f"The request body is not valid JSON: {e}") from None
    if not _nests_within(text, MAX_JSON_DEPTH):
        raise InvalidRequestError(f"The request body nests deeper than {MAX_JSON_DEPTH} levels.")
    return body


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is beyond a double's range")
    return value


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")
_INNERMOST = re.compile(r"\[\]|\{\}")


def _nests_within(text: str, limit: int) -> bool:
    """Whether the JSON ``text`` (valid: parsed already) nests arrays and objects at most ``limit`` deep.

    On the text, at C speed whatever its shape: a walk over the parsed value costs a Python step per list (a
    megabyte of ``[[1],[2],...]`` takes a second). With strings taken out, the brackets are left; each pass takes
    out the innermost pairs, one level."""
    if text.count("[") + text.count("{") <= limit:  # most bodies, whatever their size
        return True
    brackets = _NOT_A_BRACKET.sub("", _JSON_STRING.sub("", text))
    for _ in range(limit):
        if not brackets:
            return True
        brackets = _INNERMOST.sub("", brackets)
    return not brackets


# The routes, as (HTTP method, path, HttpRoutes method name).
ROUTES: tuple[tuple[str, str, str], ...] = (
    ("POST", "/v1/completions", "completions"),
    ("POST", "/v1/chat/completions", "chat_completions"),
    ("GET", "/v1/models", "models"),
    ("GET", "/health", "health"),
    ("GET", "/variants", "variants"),
)


def mount(app: FastAPI, routes: type[HttpRoutes] | HttpRoutes) -> None:
    """Adds the routes to ``app``: the class's methods (Serve binds ``self``) or an instance's bound methods."""
    for method, path, name in ROUTES:
        app.add_api_route(path, getattr(routes, name), methods=[method])


def standalone_app(routes: HttpRoutes) -> FastAPI:
    """An app serving ``routes`` without Serve (any ASGI server, or Starlette's TestClient)."""
    app = new_app()
    mount(app, routes)
    return app
