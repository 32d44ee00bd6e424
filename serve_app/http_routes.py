"""The HTTP routes: OpenAI's API (SSE streaming) over the request pipeline, and the small endpoints beside it.

A generation route reads the request (headers, the JSON body within its size limit), runs it through
``Pipeline.run`` and writes what comes back in OpenAI's shapes (``openai_format.py``): before the first token an
error is an HTTP error (``errors.py``); after it, an SSE error event followed by ``data: [DONE]``. Everything else
(auth, validation, routing, limits, the engine, the release) is the pipeline's.

The routes are methods of :class:`HttpRoutes`, mounted on a FastAPI app by :func:`mount`: on the class, for Serve
(``ingress.py``: Serve's class-based view binds ``self`` to the replica), or on an instance, for an app that runs
anywhere (:func:`standalone_app`: the tests, with a fake engine).
"""

# No `from __future__ import annotations` here: FastAPI must resolve the route parameters' annotations.
import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from typing import Any

from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response, StreamingResponse

from core.errors import InvalidRequestError, PayloadTooLargeError, PermissionDeniedError, ServingError
from engines.protocol import Delta, TokenLogprob
from serve_app import openapi_doc
from serve_app.errors import error_body, error_response
from serve_app.openai_format import DONE, ResponseShape, openai_finish_reason, sse
from serve_app.pipeline import Flight, Inbound, Pipeline, RequestFailed
from serve_app.stats_board import ReplicaReport

logger = logging.getLogger("ray.serve")

Run = AsyncGenerator[Delta, None]  # one request's Pipeline.run


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
        body_once: list[Any] = []  # the body, read once: every choice of an n > 1 request starts from it

        async def read_body() -> Any:
            if not body_once:
                body_once.append(await self._read_json(request))
            return body_once[0]

        inbound = Inbound(
            chat=chat,
            authorization=request.headers.get("authorization"),
            slo_headers=request.headers,
            read_body=read_body,
        )
        flights, runs = [flight], [pipe.run(flight, inbound)]
        try:
            firsts = [await anext(runs[0])]
            req = flight.request
            if req.n > 1:
                more = await self._more_choices(flight, inbound, body_once[0], req.n)
                flights += [f for f, _, _ in more]
                runs += [r for _, r, _ in more]
                firsts += [d for _, _, d in more]
        except RequestFailed as failure:
            await _end(flights, runs, failure)
            logger.info("request %s rejected: %s %s", flight.request_id, failure.status, failure.error)
            return JSONResponse(failure.body, status_code=failure.status, headers={**failure.headers, **flight.headers})
        except BaseException:  # cancelled: the client went away
            await _end(flights, runs, None)
            raise

        shape = ResponseShape(
            id=("chatcmpl-" if chat else "cmpl-") + flight.request_id.removeprefix("req-"),
            model=req.model,
            created=int(time.time()),
            chat=chat,
            logprobs=req.requested_logprobs() is not None,
            tool_names=req.parsed_tool_names() if chat else None,  # tool_calls read back (serve_app/tool_calls.py)
        )
        echo = pipe.prompt_text(req.prompt) if not chat and req.echo else ""  # the prompt, before the completion
        if len(flights) > 1:
            if req.stream:
                return StreamingResponse(
                    self._relay_choices(flights, runs, firsts, shape, req.include_usage, echo),
                    media_type="text/event-stream",
                    headers={**flight.headers, "cache-control": "no-cache"},
                )
            return await self._collect_choices(flights, runs, firsts, shape, echo)
        if req.stream:
            return StreamingResponse(
                self._relay(flight, runs[0], firsts[0], shape, req.include_usage, echo),
                media_type="text/event-stream",
                headers={**flight.headers, "cache-control": "no-cache"},
            )
        return await self._collect(flight, runs[0], firsts[0], shape, echo)

    async def _more_choices(
        self, flight: Flight, inbound: Inbound, body: dict, n: int
    ) -> list[tuple[Flight, Run, Delta]]:
        """Choices 1..n-1 of a request whose choice 0 has its first token: each its own request through the
        pipeline (routed, admitted against the key's limits, its own engine request), started together. A seed is
        offset by the choice's index, or every choice would be the same text. All of them, or the first failure
        (the ones started are ended by it)."""
        pipe = self._pipeline
        extra = [pipe.flight(f"{flight.request_id}-{i}") for i in range(1, n)]

        def body_of(i: int) -> dict:
            seed = body.get("seed")
            return {**body, "seed": seed + i} if type(seed) is int else body

        runs = [pipe.run(f, inbound.with_body(body_of(i))) for i, f in enumerate(extra, start=1)]
        try:
            firsts = await asyncio.gather(*(_first(r) for r in runs), return_exceptions=True)
        except BaseException:  # cancelled: the client went away
            await _end(extra, runs, None)
            raise
        failure = next((r for r in firsts if isinstance(r, BaseException)), None)
        if failure is not None:
            await _end(extra, runs, failure if isinstance(failure, RequestFailed) else None)
            raise failure
        return list(zip(extra, runs, firsts, strict=True))  # type: ignore[arg-type]

    async def _relay(
        self, flight: Flight, run: Run, first: Delta, shape: ResponseShape, include_usage: bool, echo: str
    ) -> AsyncIterator[bytes]:
        async with aclosing(run):
            try:
                if echo:
                    yield shape.sse_chunk(echo, None)
                if first.readable:
                    yield shape.sse_chunk(first.text, openai_finish_reason(first.finish_reason), first.logprobs)
                # The finishing delta's chunk waits for the run to end (it returns right after yielding it) and
                # leaves with the usage chunk and [DONE] as one write: each message costs the ingress a send and
                # a loop turn whatever its size, and a stream of ~30 messages had three at its end.
                tail = b""
                async for delta in run:
                    if delta.readable:
                        chunk = shape.sse_chunk(delta.text, openai_finish_reason(delta.finish_reason), delta.logprobs)
                        if delta.finish_reason is None:
                            yield chunk
                        else:
                            tail = chunk
                last = flight.last or first
                if include_usage:
                    tail += sse(shape.usage_chunk(last.prompt_tokens, last.completion_tokens, last.cached_tokens))
                yield tail + DONE
            except Exception as exc:  # after the first token: an error event, then [DONE]
                failure = await self._pipeline.fail(flight, run, exc)  # aborted in the engine before the client is told
                logger.warning("request %s failed mid-stream: %s", flight.request_id, failure.error)
                yield sse(failure.body)
                yield DONE

    async def _collect(self, flight: Flight, run: Run, first: Delta, shape: ResponseShape, echo: str) -> Response:
        parts = [echo, first.text]
        logprobs: list[TokenLogprob] = list(first.logprobs or ())
        try:
            async with aclosing(run):
                async for delta in run:
                    parts.append(delta.text)
                    logprobs.extend(delta.logprobs or ())
        except RequestFailed as failure:
            return JSONResponse(failure.body, status_code=failure.status, headers=failure.headers)
        last = flight.last or first
        body = shape.full(
            "".join(parts),
            openai_finish_reason(last.finish_reason),
            last.prompt_tokens,
            last.completion_tokens,
            logprobs,
            last.cached_tokens,
        )
        return JSONResponse(body, headers=flight.headers)

    async def _relay_choices(
        self,
        flights: list[Flight],
        runs: list[Run],
        firsts: list[Delta],
        shape: ResponseShape,
        include_usage: bool,
        echo: str,
    ) -> AsyncIterator[bytes]:
        """``_relay`` for n > 1: every choice's chunks as they come, each with its index; one error ends them all."""
        queue: asyncio.Queue[tuple[int, Delta | RequestFailed | None]] = asyncio.Queue()

        async def pump(index: int) -> None:
            try:
                async with aclosing(runs[index]) as run:
                    async for delta in run:
                        await queue.put((index, delta))
                await queue.put((index, None))
            except RequestFailed as failure:
                await queue.put((index, failure))

        for index, first in enumerate(firsts):
            queue.put_nowait((index, first))
        tasks = [asyncio.ensure_future(pump(i)) for i in range(len(flights))]
        try:
            if echo:
                for index in range(len(flights)):
                    yield shape.sse_chunk(echo, None, None, index)
            running = len(flights)
            while running:
                index, item = await queue.get()
                if item is None:
                    running -= 1
                    continue
                if isinstance(item, RequestFailed):
                    raise item
                if item.readable:
                    yield shape.sse_chunk(item.text, openai_finish_reason(item.finish_reason), item.logprobs, index)
            tail = b""  # one write, as in _relay
            if include_usage:
                lasts = [f.last or d for f, d in zip(flights, firsts, strict=True)]
                completion = sum(d.completion_tokens for d in lasts)
                tail = sse(shape.usage_chunk(lasts[0].prompt_tokens, completion, lasts[0].cached_tokens))
            yield tail + DONE
        except Exception as exc:  # after the first token: an error event, then [DONE]
            failure = exc if isinstance(exc, RequestFailed) else self._pipeline.failure(exc)
            await _stop(flights, tasks, failure)  # every choice aborted in its engine before the client is told
            logger.warning("request %s failed mid-stream: %s", flights[0].request_id, failure.error)
            yield sse(failure.body)
            yield DONE
        finally:
            await _stop(flights, tasks, None)

    async def _collect_choices(
        self, flights: list[Flight], runs: list[Run], firsts: list[Delta], shape: ResponseShape, echo: str
    ) -> Response:
        """``_collect`` for n > 1: every choice whole, in one response."""

        async def one(index: int) -> tuple[str, Delta, list[TokenLogprob]]:
            first = firsts[index]
            parts, logprobs = [echo, first.text], list(first.logprobs or ())
            async with aclosing(runs[index]) as run:
                async for delta in run:
                    parts.append(delta.text)
                    logprobs.extend(delta.logprobs or ())
            return "".join(parts), flights[index].last or first, logprobs

        tasks = [asyncio.ensure_future(one(i)) for i in range(len(flights))]
        try:
            results = list(await asyncio.gather(*tasks))
        except RequestFailed as failure:
            await _stop(flights, tasks, failure)  # gather leaves the others running
            return JSONResponse(failure.body, status_code=failure.status, headers=failure.headers)
        finally:
            await _stop(flights, tasks, None)
        body = shape.full_choices(
            [(text, openai_finish_reason(last.finish_reason), logprobs) for text, last, logprobs in results],
            results[0][1].prompt_tokens,
            sum(last.completion_tokens for _, last, _ in results),
            results[0][1].cached_tokens,
        )
        return JSONResponse(body, headers=flights[0].headers)

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
        try:
            return json.loads(b"".join(chunks))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InvalidRequestError(f"The request body is not valid JSON: {e}") from None


async def _first(run: Run) -> Delta:
    return await anext(run)


async def _end(flights: list[Flight], runs: list[Run], failure: RequestFailed | None) -> None:
    """Ends runs still held (suspended at a delta): by ``failure`` (a sibling's), else as abandoned by the client.
    A run that has already ended is left as it ended."""
    for flight, run in zip(flights, runs, strict=True):
        flight.ended_by = failure
        await run.aclose()


async def _stop(flights: list[Flight], tasks: Sequence[asyncio.Future], failure: RequestFailed | None) -> None:
    """Cancels the tasks iterating the choices' runs and waits until they are released (``_end``'s rule)."""
    for flight, task in zip(flights, tasks, strict=True):
        if not task.done():
            if flight.ended_by is None:
                flight.ended_by = failure
            task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


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
