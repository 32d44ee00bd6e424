"""The front door: OpenAI routes over HTTP (SSE streaming) and the same API over gRPC, one pipeline for both.

Every generation request goes through one protocol-independent pipeline (``Ingress._start``, ``_deltas``,
``_finish``): auth, parse and validate the body, tokenize (the router needs the prompt length), pick a
variant, admit it against the key's limits, open the route ticket, wait for the first token, relay the
deltas, then the bookkeeping (route feedback, metrics, the key's slot, the engine stream) exactly once. The
protocols differ only in how they read the request and write the stream and errors:

* HTTP: an error before the first token is an HTTP error (``errors.py``); after it, an SSE error event
  followed by ``data: [DONE]``.
* gRPC (``Generate``, ``Models``; Serve's gRPC proxy calls them by RPC name): messages from
  ``grpc_format.py``, errors as gRPC statuses from ``grpc_errors.py``.

If the client goes away, Serve cancels this request and the pipeline cancels the engine stream, which aborts
the request inside the engine.
"""

# No `from __future__ import annotations` here: FastAPI must resolve the route parameters' annotations.
import asyncio
import dataclasses
import functools
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from fastapi import FastAPI, Request
from ray import serve
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError
from ray.serve.grpc_util import RayServegRPCContext
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response, StreamingResponse

from core.errors import (
    ContextTooLongError,
    EngineDeadError,
    InvalidRequestError,
    ModelNotFoundError,
    OverloadedError,
    PermissionDeniedError,
    RequestTimeoutError,
    ServingError,
    UnavailableError,
)
from engines.protocol import Delta, GenerationRequest, TokenLogprob
from router import Decision, Prediction, Reason, RequestFeatures, features_from_headers
from serve_app import openapi_doc
from serve_app.auth import KeyStore, Principal
from serve_app.config import AppConfig
from serve_app.errors import PayloadTooLargeError, describe, error_body, error_response
from serve_app.grpc_errors import grpc_status
from serve_app.limiter import Admission, SharedLimits
from serve_app.metrics import IngressMetrics, RequestRecorder
from serve_app.openai_api import ChatCompletionRequest, CompletionRequest, parse_request
from serve_app.openai_format import DONE, ResponseShape, openai_finish_reason, sse
from serve_app.prompting import PromptBuilder
from serve_app.routing import RouteTicket, RoutingTable

logger = logging.getLogger("ray.serve")

app = FastAPI(title="variant-serve", docs_url=None, redoc_url=None)


def _openapi() -> dict[str, Any]:
    # The generation routes validate their own bodies, so FastAPI cannot see them: openapi_doc.py describes them.
    if app.openapi_schema is None:
        app.openapi_schema = openapi_doc.build(app)
    return app.openapi_schema


app.openapi = _openapi  # type: ignore[method-assign]


def _request_id(headers: Mapping[str, str]) -> str:
    """The id Serve's proxy uses for this request (the client's x-request-id when sent), so logs line up.

    Over gRPC, Serve's id is the client's ``request_id`` metadata when sent."""
    from ray.serve.context import _get_serve_request_context  # private, but the only way to read Serve's id

    return headers.get("x-request-id") or _get_serve_request_context().request_id or f"req-{uuid.uuid4().hex}"


def _unwrap(exc: BaseException) -> BaseException:
    """Errors raised in an engine replica arrive wrapped by Ray; the boundary wants the original."""
    while isinstance(exc, RayTaskError) and getattr(exc, "cause", None) is not None:
        exc = exc.cause
    if isinstance(exc, RayActorError | ActorUnavailableError):
        return EngineDeadError("The engine replica serving this request stopped; retry the request.")
    return exc


def _rejection(decision: Decision, prompt_tokens: int, contexts: dict[str, int]) -> ServingError:
    """The router's rejection as the project's error, so the one boundary in errors.py translates it."""
    detail = decision.detail or f"The request was not routed ({decision.reason})."
    status = decision.reject_status
    if decision.reason == Reason.REJECTED_UNSUPPORTED_FIELD:
        return InvalidRequestError(detail, param=decision.param)
    if status == 400:
        longest = max(contexts.values(), default=0)
        return ContextTooLongError(detail, prompt_tokens=prompt_tokens, context_length=longest)
    if status == 404:
        return ModelNotFoundError(detail)
    if status == 429:
        return OverloadedError(detail, retry_after_s=decision.retry_after_s or 1.0)
    return UnavailableError(detail, retry_after_s=decision.retry_after_s or 5.0)


@app.exception_handler(ServingError)
async def _serving_error(request: Request, exc: ServingError) -> Response:
    # Errors raised by the small routes (auth on /v1/models, /variants); generation handles its own.
    return error_response(exc)


@app.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    # Unknown routes and wrong methods still answer in OpenAI's error format.
    return JSONResponse(
        error_body(str(exc.detail), "invalid_request_error", code=str(exc.status_code)),
        status_code=exc.status_code,
    )


@dataclass(slots=True)
class _Inbound:
    """What the pipeline reads from a request, whichever protocol carried it."""

    chat: bool
    authorization: str | None  # "Bearer <key>": the HTTP header or the gRPC metadata
    slo_headers: Mapping[str, str]  # x-slo-tier / x-slo-ttft-ms / x-slo-tpot-ms, as router.features_from_headers reads
    read_body: Callable[[], Awaitable[Any]]  # the body as the HTTP API's JSON (parsed, not yet validated)


@dataclass(slots=True)
class _Flight:
    """Everything one request holds while it is in flight, released once by ``Ingress._finish``."""

    request_id: str
    deadline: float
    arrived_at: float = field(default_factory=time.monotonic)  # the ingress took the request
    prompt_tokens: int = 0
    headers: dict[str, str] = field(default_factory=dict)  # x-route-* (HTTP headers; gRPC's last message)
    variant: str = ""
    reason: str = ""  # the route decision's reason; empty until routed
    principal: Principal | None = None
    admission: Admission | None = None  # what the request holds of its key's limits
    ticket: RouteTicket | None = None
    recorder: Any = None  # RequestRecorder once routed
    stream: Any = None  # the variant's DeploymentResponseGenerator
    finished: bool = False

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


def server_timing(arrived_at: float, dispatched_at: float, first_token_at: float) -> str:
    """The W3C ``Server-Timing`` header of a request's start: ``ingress`` from the ingress taking the request to
    dispatching it (auth, parsing, tokenizing, routing), ``engine`` from dispatch to the first token back at the
    ingress. Their sum is what the router's TTFT model learns and predicts; a client's TTFT less it is the path
    outside the ingress: the Serve proxy both ways and the network."""
    ingress_ms = (dispatched_at - arrived_at) * 1e3
    engine_ms = (first_token_at - dispatched_at) * 1e3
    return f"ingress;dur={ingress_ms:.1f}, engine;dur={engine_ms:.1f}"


async def _ready(value: Any) -> Any:
    """``value`` as an awaitable: a gRPC request's body is in hand when the pipeline asks for it."""
    return value


def _grpc_format() -> ModuleType:
    """The gRPC message helpers, imported at the first gRPC call: an HTTP-only deployment (one without
    grpc_options) then never generates the gRPC code, nor needs grpcio-tools where it runs."""
    from serve_app import grpc_format

    return grpc_format


def _timeout_or(error: BaseException) -> BaseException:
    if isinstance(error, TimeoutError):
        return RequestTimeoutError("The request ran past this endpoint's time limit and was stopped.")
    return error


# Serve pickles the class when it is decorated: module-level helpers it uses must be defined above it.
@serve.deployment
@serve.ingress(app)
class Ingress:
    async def __init__(  # type: ignore[misc]
        self, config: dict, variants: dict[str, Any], board: Any, limiter: Any = None
    ) -> None:
        self.config = AppConfig.model_validate(config)
        self._variants = variants  # variant name -> DeploymentHandle
        # _by_reference=False: Serve's inter-deployment gRPC (every replica runs its server), one stream per
        # request instead of one Ray object per delta; the per-object bookkeeping was most of the ingress's CPU
        # per token. Errors arrive the same way (RayTaskError; ActorUnavailableError for a replica gone).
        by_reference = self.config.ingress.engine_transport == "ray"
        self._stream_handles = {
            name: h.options(stream=True, _by_reference=by_reference) for name, h in variants.items()
        }
        self._board = board
        self._prompts = PromptBuilder(self.config.tokenizer_ref)
        self._routing = RoutingTable(  # publish: the demand it redirects, for the variants' autoscalers
            self.config,
            lambda: board.snapshot.remote(),
            publish=lambda source, levels: board.redirected.remote(source, levels),
            wake=lambda name: variants[name].info.remote(),  # a variant at zero replicas: Serve's cold start
        )
        self._routing.start()
        self._metrics = IngressMetrics()
        self._keys = KeyStore(self.config.auth)
        # Per-key limits for the whole endpoint: budget leased from the app's KeyLimiter (limiter.py), spent here.
        self._limits = SharedLimits(self._keys, limiter)
        self._limits.start()
        self._created = int(time.time())
        # This replica's /openapi.json names the models it serves. Through openapi_doc's module, not `app`: Serve
        # pickles this class by value, so a module global read here is a copy, not the app that answers.
        openapi_doc.serve_models(self._model_names())

    # ------------------------------------------------------------------ routes

    @app.post("/v1/completions")
    async def completions(self, request: Request) -> Response:
        return await self._generate(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> Response:
        return await self._generate(request, chat=True)

    @app.get("/v1/models")
    async def models(self, request: Request) -> dict:
        self._keys.authenticate(request.headers.get("authorization"))
        names = self._model_names()
        return {
            "object": "list",
            "data": [
                {"id": n, "object": "model", "created": self._created, "owned_by": "variant-serve"} for n in names
            ],
        }

    def _model_names(self) -> list[str]:
        """The public model (routed), then every variant (a variant's name pins it)."""
        return [self.config.model_name] + [v.name for v in self.config.variants]

    @app.get("/health")
    async def health(self) -> dict:
        return {"status": "ok"}

    @app.get("/variants")
    async def variants(self, request: Request) -> dict:
        caller = self._keys.authenticate(request.headers.get("authorization"))
        if caller is not None and self.config.auth.restrict_variants_endpoint and not caller.admin:
            raise PermissionDeniedError(f"Key '{caller.name}' is not an admin key; /variants needs one.")
        snapshot = await self._board.snapshot.remote()
        out = []
        for v in self.config.variants:
            replicas = snapshot.get(v.name, [])
            out.append(
                {
                    "name": v.name,
                    "backend": v.engine.backend,
                    "model": v.engine.model,
                    "sampling_fields": sorted(v.engine.sampling_fields()),  # docs/openai-api.md
                    "replicas": len(replicas),
                    "running_requests": sum(r["running_requests"] for r in replicas),
                    "queued_requests": sum(r["queued_requests"] for r in replicas),
                    "tokens_per_s": round(sum(r["tokens_per_s"] for r in replicas), 1),
                    "replica_stats": replicas,
                }
            )
        return {"model": self.config.model_name, "variants": out}

    # ------------------------------------------------------------------ generation

    async def _generate(self, request: Request, *, chat: bool) -> Response:
        flight = self._new_flight(_request_id(request.headers))
        body_once: list[Any] = []  # the body, read once: every choice of an n > 1 request starts from it

        async def read_body() -> Any:
            if not body_once:
                body_once.append(await self._read_json(request))
            return body_once[0]

        inbound = _Inbound(
            chat=chat,
            authorization=request.headers.get("authorization"),
            slo_headers=request.headers,
            read_body=read_body,
        )
        flights = [flight]
        try:
            req, first = await self._start(flight, inbound)
            firsts = [first]
            if req.n > 1:
                more = await self._more_choices(flight, inbound, body_once[0], req.n)
                flights += [f for f, _ in more]
                firsts += [d for _, d in more]
        except Exception as exc:
            for other in flights[1:]:
                self._fail(other, exc, None)
            error, (status, body, headers) = self._fail(flight, exc, None)
            logger.info("request %s rejected: %s %s", flight.request_id, status, error)
            response = JSONResponse(body, status_code=status, headers=headers)
            response.headers.update(flight.headers)
            return response
        except BaseException:
            for each in flights:
                self._finish(each, None, 499)
            raise

        shape = ResponseShape(
            id=("chatcmpl-" if chat else "cmpl-") + flight.request_id.removeprefix("req-"),
            model=req.model,
            created=int(time.time()),
            chat=chat,
            logprobs=req.requested_logprobs() is not None,
            tool_names=req.parsed_tool_names() if chat else None,  # tool_calls read back (serve_app/tool_calls.py)
        )
        echo = self._prompts.text(req.prompt) if not chat and req.echo else ""  # the prompt, before the completion
        if len(flights) > 1:
            if req.stream:
                return StreamingResponse(
                    self._relay_choices(flights, firsts, shape, req.include_usage, echo),
                    media_type="text/event-stream",
                    headers={**flight.headers, "cache-control": "no-cache"},
                )
            return await self._collect_choices(flights, firsts, shape, echo)
        if req.stream:
            return StreamingResponse(
                self._relay(flight, first, shape, req.include_usage, echo),
                media_type="text/event-stream",
                headers={**flight.headers, "cache-control": "no-cache"},
            )
        return await self._collect(flight, first, shape, echo)

    async def _more_choices(
        self, flight: _Flight, inbound: _Inbound, body: dict, n: int
    ) -> list[tuple[_Flight, Delta]]:
        """Choices 1..n-1 of a request whose choice 0 has its first token: each its own request through the
        pipeline (routed, admitted against the key's limits, its own engine request), started together. A seed is
        offset by the choice's index, or every choice would be the same text. All of them, or an error (the ones
        started are ended)."""
        extra = [self._new_flight(f"{flight.request_id}-{i}") for i in range(1, n)]

        def body_of(i: int) -> dict:
            seed = body.get("seed")
            return {**body, "seed": seed + i} if type(seed) is int else body

        starts = [
            self._start(f, dataclasses.replace(inbound, read_body=functools.partial(_ready, body_of(i))))
            for i, f in enumerate(extra, start=1)
        ]
        results = await asyncio.gather(*starts, return_exceptions=True)
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            for f in extra:
                if isinstance(failure, Exception):
                    self._fail(f, failure, None)
                else:  # cancelled: the client went away
                    self._finish(f, None, 499)
            raise failure
        return [(f, r[1]) for f, r in zip(extra, results, strict=True)]  # type: ignore[index]

    async def _relay_choices(
        self, flights: list[_Flight], firsts: list[Delta], shape: ResponseShape, include_usage: bool, echo: str
    ) -> AsyncIterator[bytes]:
        """``_relay`` for n > 1: every choice's chunks as they come, each with its index; one error ends them all."""
        queue: asyncio.Queue[tuple[int, Delta | Exception | None]] = asyncio.Queue()
        lasts = list(firsts)

        async def pump(index: int) -> None:
            try:
                async with aclosing(self._deltas(flights[index], firsts[index])) as deltas:
                    async for delta in deltas:
                        await queue.put((index, delta))
                await queue.put((index, None))
            except Exception as exc:
                await queue.put((index, exc))

        tasks = [asyncio.ensure_future(pump(i)) for i in range(len(flights))]
        status = 499
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
                if isinstance(item, Exception):
                    raise item
                lasts[index] = item
                if item.text or item.finish_reason or item.logprobs:
                    yield shape.sse_chunk(item.text, openai_finish_reason(item.finish_reason), item.logprobs, index)
            status = 200
            if include_usage:
                yield sse(shape.usage_chunk(lasts[0].prompt_tokens, sum(d.completion_tokens for d in lasts)))
            yield DONE
        except Exception as exc:  # after the first token: an error event, then [DONE]
            for f, last in zip(flights[1:], lasts[1:], strict=True):
                self._fail(f, exc, last)
            error, (status, body, _) = self._fail(flights[0], exc, lasts[0])
            logger.warning("request %s failed mid-stream: %s", flights[0].request_id, error)
            yield sse(body)
            yield DONE
        finally:
            for task in tasks:
                task.cancel()
            for f, last in zip(flights, lasts, strict=True):
                self._finish(f, last, status)

    async def _collect_choices(
        self, flights: list[_Flight], firsts: list[Delta], shape: ResponseShape, echo: str
    ) -> Response:
        """``_collect`` for n > 1: every choice whole, in one response."""

        async def one(index: int) -> tuple[str, Delta, list[TokenLogprob]]:
            parts, last = [echo], firsts[index]
            logprobs: list[TokenLogprob] = []
            async with aclosing(self._deltas(flights[index], firsts[index])) as deltas:
                async for delta in deltas:
                    parts.append(delta.text)
                    logprobs.extend(delta.logprobs or ())
                    last = delta
            return "".join(parts), last, logprobs

        status = 499
        results: list[tuple[str, Delta, list[TokenLogprob]]] = []
        tasks = [asyncio.ensure_future(one(i)) for i in range(len(flights))]
        try:
            results = list(await asyncio.gather(*tasks))
            status = 200
        except Exception as exc:
            for task in tasks:  # gather leaves the others running
                task.cancel()
            for f in flights[1:]:
                self._fail(f, exc, None)
            _, (status, body, headers) = self._fail(flights[0], exc, None)
            return JSONResponse(body, status_code=status, headers=headers)
        finally:
            lasts = [r[1] for r in results] if results else [None] * len(flights)
            for f, last in zip(flights, lasts, strict=True):
                self._finish(f, last, status)
        body = shape.full_choices(
            [(text, openai_finish_reason(last.finish_reason), logprobs) for text, last, logprobs in results],
            results[0][1].prompt_tokens,
            sum(last.completion_tokens for _, last, _ in results),
        )
        return JSONResponse(body, headers=flights[0].headers)

    async def _relay(
        self, flight: _Flight, first: Delta, shape: ResponseShape, include_usage: bool, echo: str = ""
    ) -> AsyncIterator[bytes]:
        last = first
        status = 499  # the client went away, unless the stream ends another way
        try:
            if echo:
                yield shape.sse_chunk(echo, None)
            async with aclosing(self._deltas(flight, first)) as deltas:
                async for delta in deltas:
                    last = delta
                    if delta.text or delta.finish_reason or delta.logprobs:
                        yield shape.sse_chunk(delta.text, openai_finish_reason(delta.finish_reason), delta.logprobs)
            status = 200
            if include_usage:
                yield sse(shape.usage_chunk(last.prompt_tokens, last.completion_tokens))
            yield DONE
        except Exception as exc:  # after the first token: an error event, then [DONE]
            error, (status, body, _) = self._fail(flight, exc, last)  # abort in the engine before telling the client
            logger.warning("request %s failed mid-stream: %s", flight.request_id, error)
            yield sse(body)
            yield DONE
        finally:
            self._finish(flight, last, status)

    async def _collect(self, flight: _Flight, first: Delta, shape: ResponseShape, echo: str = "") -> Response:
        parts = [echo]
        logprobs: list[TokenLogprob] = []
        last = first
        status = 499  # the client went away, unless the request ends another way
        try:
            async with aclosing(self._deltas(flight, first)) as deltas:
                async for delta in deltas:
                    parts.append(delta.text)
                    logprobs.extend(delta.logprobs or ())
                    last = delta
            status = 200
        except Exception as exc:
            _, (status, body, headers) = self._fail(flight, exc, last)
            return JSONResponse(body, status_code=status, headers=headers)
        finally:
            self._finish(flight, last, status)
        body = shape.full(
            "".join(parts),
            openai_finish_reason(last.finish_reason),
            last.prompt_tokens,
            last.completion_tokens,
            logprobs,
        )
        return JSONResponse(body, headers=flight.headers)

    # ------------------------------------------------------------------ gRPC (grpc_api/llm.proto)

    async def Generate(self, request: Any, grpc_context: RayServegRPCContext) -> AsyncIterator[Any]:
        """Server streaming ``LLMService/Generate``: the deltas as messages, the last one with usage and route.

        An error ends the stream with one message (finish_reason "error") carrying the status: Serve 2.60
        forwards a status's trailing metadata (retry-after, ...) only together with a message; an exception
        would arrive as code and details alone."""
        fmt = _grpc_format()
        metadata = dict(grpc_context.invocation_metadata())
        flight = self._new_flight(_request_id(metadata))
        inbound = _Inbound(
            chat=fmt.is_chat(request),
            authorization=metadata.get("authorization"),
            slo_headers=fmt.slo_headers(request),
            read_body=lambda: _ready(fmt.request_body(request)),
        )
        last: Delta | None = None
        status = 499  # the client cancelled, unless the stream ends another way
        try:
            _, first = await self._start(flight, inbound)
            async with aclosing(self._deltas(flight, first)) as deltas:
                async for delta in deltas:
                    last = delta
                    if delta.text or delta.token_ids or delta.finish_reason:
                        message = fmt.delta_message(delta)
                        if delta.finish_reason:
                            self._finish_message(message, flight, delta)
                        yield message
            status = 200
            if last is not None and not last.finish_reason:  # the variant's stream ended without saying why
                yield self._finish_message(fmt.delta_message(Delta("", [], "stop")), flight, last)
        except Exception as exc:
            error, (status, _, _) = self._fail(flight, fmt.field_error(exc), last)
            logger.info("gRPC request %s failed: %s %s", flight.request_id, status, error)
            grpc_status(error).apply(grpc_context)
            yield self._finish_message(fmt.delta_message(Delta("", [], "error")), flight, last)
        finally:
            self._finish(flight, last, status)

    async def Models(self, request: Any, grpc_context: RayServegRPCContext) -> Any:
        """Unary ``LLMService/Models``: the public model and every variant."""
        fmt = _grpc_format()
        try:
            self._keys.authenticate(dict(grpc_context.invocation_metadata()).get("authorization"))
        except Exception as exc:
            grpc_status(exc).apply(grpc_context)
            return fmt.no_models()  # gRPC sends the status alone, without this message
        return fmt.models_message(self._model_names(), self._created)

    def _finish_message(self, message: Any, flight: _Flight, last: Delta | None) -> Any:
        prediction = flight.ticket.prediction if flight.ticket is not None else None
        fmt = _grpc_format()
        return fmt.finish(message, flight.request_id, last, flight.variant, flight.reason, prediction)

    # ------------------------------------------------------------------ the pipeline, protocol-independent

    def _new_flight(self, request_id: str) -> _Flight:
        return _Flight(request_id=request_id, deadline=time.monotonic() + self.config.limits.request_timeout_s)

    async def _start(self, flight: _Flight, inbound: _Inbound) -> tuple[Any, Delta]:
        """auth -> parse -> tokenize -> route -> admit -> open the route ticket -> first token.

        Returns the validated request and its first delta. Raises whatever stopped it; the caller ends the
        flight (``_fail`` / ``_finish``), which releases what this took."""
        flight.principal = self._keys.authenticate(inbound.authorization)
        body = await inbound.read_body()
        req = parse_request(ChatCompletionRequest if inbound.chat else CompletionRequest, body)
        pinned = self._check_model(req.model)
        if inbound.chat:
            prompt_ids = self._prompts.chat(req.messages, req.template_tools())
            max_tokens = req.effective_max_tokens()
        else:
            prompt_ids = self._prompts.completion(req.prompt)
            max_tokens = req.max_tokens
        max_tokens = self._check_max_tokens(max_tokens)
        self._check_prompt_limit(len(prompt_ids))
        flight.prompt_tokens = len(prompt_ids)
        sampling = req.sampling(max_tokens)
        features = features_from_headers(
            inbound.slo_headers,
            len(prompt_ids),
            max_tokens,
            req.priority,
            pinned,
            self.config.router,
            sampling.requested_fields(),
        )
        variant, reason, prediction, rejection = await self._route(features)
        flight.reason = reason
        flight.headers["x-route-reason"] = reason
        self._metrics.route_decisions.inc(1, {"variant": variant or "none", "reason": reason})
        if rejection is not None:
            raise rejection
        flight.variant = variant
        flight.headers["x-route-variant"] = variant
        flight.admission = await self._limits.admit(flight.principal, len(prompt_ids) + max_tokens)
        flight.ticket = self._routing.open(
            variant, len(prompt_ids), prediction, max_tokens=max_tokens, arrived_at=flight.arrived_at
        )
        flight.headers.update(flight.ticket.headers())  # x-route-predicted-ttft-ms / -tpot-ms
        flight.recorder = RequestRecorder(
            self._metrics, variant, features.slo.ttft_ms, features.slo.tpot_ms, prediction
        )
        gen_request = GenerationRequest(flight.request_id, prompt_ids, sampling)
        dispatched_at = time.monotonic()
        first = await self._first_delta(flight, variant, gen_request)
        if first is None:
            first = Delta(text="", token_ids=[], finish_reason="stop", prompt_tokens=len(prompt_ids))
        self._routing.first_token(flight.ticket)
        flight.headers["server-timing"] = server_timing(flight.arrived_at, dispatched_at, time.monotonic())
        flight.recorder.chunk(first.completion_tokens)
        logger.info("request %s -> %s (%s, %d prompt tokens)", flight.request_id, variant, reason, len(prompt_ids))
        return req, first

    async def _first_delta(self, flight: _Flight, variant: str, request: GenerationRequest) -> Delta | None:
        """Dispatches the request and waits for its first delta, within the request's time limit.

        A replica that dies before the first token has sent the client nothing, so the request goes once more to
        the variant: Serve's handle drops a replica whose actor died and picks another (or waits for the one it
        starts in its place). After the first token a replica's death is the stream's error event instead."""
        for attempt in (1, 2):
            flight.stream = self._stream_handles[variant].generate.remote(request)
            try:
                async with asyncio.timeout(flight.remaining()):
                    return await anext(flight.stream, None)
            except (RayActorError, ActorUnavailableError) as exc:
                if attempt == 2:
                    raise
                flight.stream.cancel()
                self._metrics.retries.inc(1, {"variant": variant})
                logger.warning(
                    "request %s: a replica of %s stopped before the first token (%s); sending it again",
                    flight.request_id,
                    variant,
                    type(exc).__name__,
                )
        raise AssertionError("unreachable")

    async def _deltas(self, flight: _Flight, first: Delta) -> AsyncGenerator[Delta, None]:
        """``first``, then the variant's deltas up to the finishing one, within the request's time limit."""
        delta = first
        ticket = flight.ticket
        # The token count at which the router learns TPOT midway (once); 0 after it, so that the per-chunk cost
        # is one comparison.
        checkpoint = ticket.checkpoint if ticket is not None else 0
        async with asyncio.timeout(flight.remaining()):
            while True:
                yield delta
                if delta.finish_reason:
                    return
                following = await anext(flight.stream, None)
                if following is None:
                    return
                flight.recorder.chunk(following.completion_tokens)
                if checkpoint and following.completion_tokens >= checkpoint and ticket is not None:
                    self._routing.progress(ticket, following.completion_tokens)
                    checkpoint = 0
                delta = following

    def _fail(
        self, flight: _Flight, exc: BaseException, last: Delta | None
    ) -> tuple[BaseException, tuple[int, dict, dict[str, str]]]:
        """The error to report for ``exc`` and its HTTP description (status, body, headers; the status also
        labels the metrics of either protocol). Ends the flight first, which aborts the engine request."""
        error = _timeout_or(_unwrap(exc))
        described = describe(error)
        self._finish(flight, last, described[0])
        return error, described

    def _finish(self, flight: _Flight, last: Delta | None, status: int) -> None:
        """Ends a request's bookkeeping exactly once: route feedback, metrics, the key's slot, the engine stream."""
        if flight.finished:
            return
        flight.finished = True
        completion = last.completion_tokens if last is not None else 0
        if flight.ticket is not None:
            self._routing.close(flight.ticket, completion, ok=status == 200)
        if flight.recorder is not None:
            flight.recorder.finish(flight.prompt_tokens, completion, status, cancelled=status == 499)
        else:
            variant = flight.headers.get("x-route-variant", "none")
            self._metrics.requests.inc(1, {"variant": variant, "status": str(status)})
        if flight.admission is not None:
            flight.admission.release()
        if status != 200 and flight.stream is not None:
            flight.stream.cancel()  # client gone, failed or timed out: abort inside the engine

    async def _route(self, features: RequestFeatures) -> tuple[str, str, Prediction | None, ServingError | None]:
        """(variant, reason, prediction, rejection): where the request goes, or the error that refuses it."""
        if not self._routing.has_live_stats():
            await self._routing.refresh()  # right after a deploy the background refresh may not have run
        no_stats = not self._routing.has_live_stats()
        decision = self._routing.fallback(features) if no_stats else self._routing.decide(features)
        if decision.rejected:
            error = _rejection(decision, features.prompt_tokens, self._routing.context_lengths())
            return "", str(decision.reason), None, error
        variant = decision.variant or ""
        return variant, str(decision.reason), decision.predictions.get(variant), None

    # ------------------------------------------------------------------ checks

    async def _read_json(self, request: Request) -> Any:
        limit = self.config.limits.max_body_bytes
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

    def _check_model(self, model: str) -> str | None:
        """The pinned variant for ``model``, None for the public (routed) model; unknown names are 404."""
        if model in self._variants:
            return model
        if model == self.config.model_name:
            return None
        known = ", ".join([self.config.model_name, *self._variants])
        raise ModelNotFoundError(f"The model '{model}' does not exist. Known models: {known}.")

    def _check_max_tokens(self, max_tokens: int | None) -> int:
        limits = self.config.limits
        if max_tokens is None:
            return limits.default_max_tokens
        if max_tokens <= 0 or max_tokens > limits.max_tokens_limit:
            raise InvalidRequestError(
                f"max_tokens must be between 1 and {limits.max_tokens_limit}, got {max_tokens}.",
                param="max_tokens",
            )
        return max_tokens

    def _check_prompt_limit(self, prompt_tokens: int) -> None:
        limit = self.config.limits.max_prompt_tokens
        if limit is not None and prompt_tokens > limit:
            raise InvalidRequestError(
                f"The prompt has {prompt_tokens} tokens; this endpoint accepts at most {limit}.",
                param="prompt",
            )
