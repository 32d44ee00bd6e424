"""The request pipeline, the same for HTTP and gRPC: from an inbound request to the engine's deltas, and back.

One request: auth -> parse and validate the body -> tokenize (the router needs the prompt length) -> route ->
admit against the key's limits -> open the route ticket -> dispatch to the variant and wait for its first delta
-> the deltas, to the finishing one. Then, exactly once, its release (``Pipeline._releasing``): route feedback
(the latency models learn), metrics, the key's slot and, for anything but a success, the engine stream's cancel,
which aborts the request inside the engine.

``Pipeline.run`` is that whole life as one async generator of deltas. How the generator ends is how the request
ended: it returns (a success), it raises :class:`RequestFailed` (the error, translated once, already released: the
route tells its client), or it is closed or cancelled (the client went away: released as cancelled, unless a
sibling choice's failure or the route's own error ended it, ``Flight.ended_by``). A route (``http_routes.py``,
``grpc_routes.py``) does not iterate it itself: ``choices.py`` runs one per choice of the request (``n`` for each
prompt of a completions batch) and hands the route every choice's deltas, so that a route only reads its
protocol's request and writes its protocol's stream. The request's first choice tokenizes every prompt and admits
the whole request against the key's limits; each later choice is routed on its own prompt (:class:`Part`).

Nothing here needs Ray: the engine handles, the clock, the key store, the limits, the routing table and the
metrics are given to it (``ingress.py`` gives Serve's; ``tests/serve_app/test_pipeline.py`` fakes the engine).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.errors import (
    InvalidRequestError,
    ModelNotFoundError,
    RequestTimeoutError,
    ServingError,
)
from engines.protocol import Delta, GenerationRequest
from router import Prediction, RequestFeatures, features_from_headers
from router.explain import HEADER as CANDIDATES_HEADER
from router.explain import candidates_header
from router.rejections import error_for_rejection
from serve_app.auth import KeyStore, Principal
from serve_app.config import AppConfig
from serve_app.errors import describe
from serve_app.limiter import Admission, SharedLimits
from serve_app.metrics import IngressMetrics, RequestRecorder, count_request
from serve_app.openai_api import ChatCompletionRequest, CompletionRequest, parse_request
from serve_app.prompting import PromptBuilder
from serve_app.replica_router import replica_of
from serve_app.routing import PrefixLookup, RouteTicket, RoutingTable

SESSION_HEADER = "x-session-id"  # an affinity key for clients without prompt_cache_key (completions, older SDKs)

logger = logging.getLogger("ray.serve")

OK = 200
# What a request that the client abandoned is counted as (nginx's "client closed request"): it has no status of
# its own, since nobody is left to send one to.
CLIENT_CLOSED = 499


@dataclass(slots=True)
class Inbound:
    """What the pipeline reads from a request, whichever protocol carried it."""

    chat: bool
    authorization: str | None  # "Bearer <key>": the HTTP header or the gRPC metadata
    slo_headers: Mapping[str, str]  # x-slo-tier / x-slo-ttft-ms / x-slo-tpot-ms, as router.features_from_headers reads
    read_body: Callable[[], Awaitable[Any]]  # the body as the HTTP API's JSON (parsed, not yet validated)
    part: Part | None = None  # a choice after the request's first (choices.py); None: the first, or the only one

    def with_body(self, body: Any) -> Inbound:
        """This request with ``body`` in hand (an extra choice's, ``choices.py``): read when the pipeline asks."""

        async def read_body() -> Any:
            return body

        return dataclasses.replace(self, read_body=read_body)


@dataclass(frozen=True, slots=True)
class Part:
    """A choice of a request after its first (``choices.py``): the token ids of the prompt it completes, tokenized
    and checked with the request's first choice, and the request's admission, which holds a stream slot for it."""

    prompt_ids: list[int]
    admission: Admission | None


class RequestFailed(Exception):
    """A request ended by an error, translated once and already released; the route tells its client.

    ``error``: the project's error for it (anything else is answered as an opaque internal error);
    ``status``, ``body``, ``headers``: its HTTP answer (``serve_app/errors.py``; the status labels the metrics)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error
        self.status, self.body, self.headers = describe(error)


@dataclass(slots=True, eq=False)
class Flight:
    """Everything one request holds while it is in flight, released once when its ``Pipeline.run`` ends."""

    request_id: str
    deadline: float  # on the pipeline's clock
    arrived_at: float  # the ingress took the request (the pipeline's clock)
    request: Any = None  # the validated CompletionRequest / ChatCompletionRequest
    prompt_tokens: int = 0
    # The first choice's: every prompt of the request tokenized (one, or a completions batch), in order.
    prompts: list[list[int]] = field(default_factory=list)
    headers: dict[str, str] = field(
        default_factory=dict
    )  # x-route-*, server-timing (HTTP headers; gRPC's last message)
    variant: str = ""
    reason: str = ""  # the route decision's reason; empty until routed
    principal: Principal | None = None
    admission: Admission | None = None  # what the request holds of its key's limits
    ticket: RouteTicket | None = None
    recorder: RequestRecorder | None = None  # once routed
    stream: Any = None  # the variant's stream of deltas (Serve's DeploymentResponseGenerator)
    last: Delta | None = None  # the latest delta the pipeline handed on
    # The failure that ended this request from outside its run (a sibling choice's, n > 1, or the route's own
    # error; choices.py): it is then released with that status, not as abandoned by the client.
    ended_by: RequestFailed | None = None
    grpc: bool = False  # carried by gRPC: counted in the metrics by its gRPC status (serve_app/metrics.py)


def server_timing(arrived_at: float, dispatched_at: float, first_token_at: float) -> str:
    """The W3C ``Server-Timing`` header of a request's start: ``ingress`` from the ingress taking the request to
    dispatching it (auth, parsing, tokenizing, routing), ``engine`` from dispatch to the first token back at the
    ingress. Their sum is what the router's TTFT model learns and predicts; a client's TTFT less it is the path
    outside the ingress: the Serve proxy both ways and the network."""
    ingress_ms = (dispatched_at - arrived_at) * 1e3
    engine_ms = (first_token_at - dispatched_at) * 1e3
    return f"ingress;dur={ingress_ms:.1f}, engine;dur={engine_ms:.1f}"


def _same(exc: BaseException) -> BaseException:
    return exc


class Pipeline:
    """The protocol-independent request pipeline of one ingress replica (see the module's docstring)."""

    def __init__(
        self,
        config: AppConfig,
        *,
        engines: Mapping[str, Any],
        routing: RoutingTable,
        keys: KeyStore,
        limits: SharedLimits,
        prompts: PromptBuilder,
        metrics: IngressMetrics,
        clock: Callable[[], float] = time.monotonic,
        unwrap: Callable[[BaseException], BaseException] = _same,
        replica_lost: tuple[type[BaseException], ...] = (),
        ingress_id: str | None = None,
    ) -> None:
        """``engines``: variant name -> streaming handle, ``handle.generate.remote(GenerationRequest)`` an async
        iterator of :class:`Delta` with ``cancel()`` (Serve's ``DeploymentHandle.options(stream=True)``).
        ``clock``: monotonic seconds, the routing table's clock too. ``unwrap``: the error an engine raised, from
        what its transport wrapped it in. ``replica_lost``: errors that mean the replica died before the first
        token, so that the request goes once more to the variant. ``ingress_id``: this ingress replica's name in
        responses (x-route-ingress), beside the engine replica's (x-route-replica)."""
        self.config = config
        self.keys = keys
        self.routing = routing
        self._engines = engines
        self._book = routing.book
        self._limits = limits
        self._prompts = prompts
        self._metrics = metrics
        self._clock = clock
        self._unwrap = unwrap
        self._replica_lost = replica_lost
        self._ingress_id = ingress_id
        self.created = int(time.time())  # the models' "created" time

    def model_names(self) -> list[str]:
        """The public model (routed), then every variant (a variant's name pins it)."""
        return [self.config.model_name] + [v.name for v in self.config.variants]

    def prompt_text(self, prompt: str | list[int]) -> str:
        """A completion prompt as text (``echo``)."""
        return self._prompts.text(prompt)

    def flight(self, request_id: str, *, grpc: bool = False) -> Flight:
        """A request that has just arrived, its time limit counted from now; ``grpc``: carried by gRPC."""
        now = self._clock()
        deadline = now + self.config.limits.request_timeout_s
        return Flight(request_id=request_id, deadline=deadline, arrived_at=now, grpc=grpc)

    def failure(self, exc: BaseException) -> RequestFailed:
        """``exc`` translated once: an engine's error unwrapped from its transport, a timeout as the project's."""
        if isinstance(exc, RequestFailed):
            return exc
        error = self._unwrap(exc)
        if isinstance(error, TimeoutError):
            error = RequestTimeoutError("The request ran past this endpoint's time limit and was stopped.")
        return RequestFailed(error)

    # ------------------------------------------------------------------ one request's life

    async def run(self, flight: Flight, inbound: Inbound) -> AsyncGenerator[Delta, None]:
        """The request's deltas, first to finishing; ``flight.request`` is set by the first. Raises
        :class:`RequestFailed` for an error, before the first delta or after it. The request is released when
        this generator ends, whichever way (the module's docstring)."""
        with self._releasing(flight):
            first = await self._start(flight, inbound)
            ticket, recorder, stream = flight.ticket, flight.recorder, flight.stream
            assert ticket is not None and recorder is not None
            # The token count at which the router learns TPOT midway (once); 0 after it, so that the per-message
            # cost is one comparison.
            checkpoint = ticket.checkpoint
            yield first
            if first.finish_reason:
                return
            # Entered here, not before the first yield: a timeout cancels the task that entered it, and the route
            # may iterate the rest in another task than the one that waited for the first delta.
            async with asyncio.timeout(self._remaining(flight)):
                while True:
                    delta = await anext(stream, None)
                    if delta is None:
                        return
                    recorder.chunk(delta.completion_tokens)
                    if checkpoint and delta.completion_tokens >= checkpoint:
                        self._book.progress(ticket, delta.completion_tokens, self._clock())
                        checkpoint = 0
                    flight.last = delta
                    yield delta
                    if delta.finish_reason:
                        return

    @contextlib.contextmanager
    def _releasing(self, flight: Flight) -> Iterator[None]:
        """The one place a request is released: as a success when the block ends, with its error's status when it
        raises (re-raised as :class:`RequestFailed`), as cancelled when the client went away."""
        try:
            yield
        except Exception as exc:
            failure = self.failure(exc)
            self._release(flight, failure.status, failure.error)
            raise failure from None if failure is exc else exc
        except BaseException:  # cancelled, or the route closed the stream
            ended_by = flight.ended_by
            if ended_by is not None:
                self._release(flight, ended_by.status, ended_by.error)
            else:
                self._release(flight, CLIENT_CLOSED, None)
            raise
        else:
            self._release(flight, OK, None)

    def _release(self, flight: Flight, status: int, error: BaseException | None) -> None:
        completion = flight.last.completion_tokens if flight.last is not None else 0
        if flight.ticket is not None:
            self._book.close(flight.ticket, completion, self._clock(), ok=status == OK)
        if flight.recorder is not None:
            flight.recorder.finish(
                flight.prompt_tokens,
                completion,
                status,
                cancelled=status == CLIENT_CLOSED,
                error=error,
                grpc=flight.grpc,
            )
        else:
            count_request(self._metrics, {"variant": flight.variant or "none"}, status, error, grpc=flight.grpc)
        if flight.admission is not None:
            flight.admission.release()
        if status != OK and flight.stream is not None:
            flight.stream.cancel()  # client gone, failed or timed out: abort inside the engine

    async def _start(self, flight: Flight, inbound: Inbound) -> Delta:
        """auth -> parse -> tokenize -> route -> admit -> open the route ticket -> first delta.

        The request's first choice tokenizes and checks every prompt of the request and admits the whole request
        against the key's limits; a later choice (``inbound.part``) takes its prompt and its stream slot from it."""
        part = inbound.part
        if part is not None:
            flight.admission = part.admission  # released with this choice, whichever way it ends
        flight.principal = self.keys.authenticate(inbound.authorization)
        body = await inbound.read_body()
        req = flight.request = parse_request(ChatCompletionRequest if inbound.chat else CompletionRequest, body)
        pinned = self._check_model(req.model)
        if part is None:
            flight.prompts = self._tokenize(req, inbound.chat)
        prompt_ids = part.prompt_ids if part is not None else flight.prompts[0]
        max_tokens = self._check_max_tokens(req.effective_max_tokens() if inbound.chat else req.max_tokens)
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
        # OpenAI's prompt_cache_key, or a session header: requests that share one go where the last one went.
        affinity_key = getattr(req, "prompt_cache_key", None) or inbound.slo_headers.get(SESSION_HEADER)
        prefix = self.routing.prefix_lookup(prompt_ids, affinity_key)
        variant, reason, predictions, refused = await self._route(features, prefix)
        prediction = predictions.get(variant)
        flight.reason = reason
        flight.headers["x-route-reason"] = reason
        if predictions:
            flight.headers[CANDIDATES_HEADER] = candidates_header(predictions)
        self._metrics.route_decisions.inc(1, {"variant": variant or "none", "reason": reason})
        if refused is not None:
            raise refused
        flight.variant = variant
        flight.headers["x-route-variant"] = variant
        if part is None:
            flight.admission = await self._admit(flight, max_tokens, req.n)
        flight.ticket = self.routing.open(
            variant,
            len(prompt_ids),
            prediction,
            max_tokens=max_tokens,
            arrived_at=flight.arrived_at,
            cached_tokens=0 if prediction is None else prediction.cached_tokens,
        )
        flight.headers.update(flight.ticket.headers())  # x-route-predicted-ttft-ms / -tpot-ms
        flight.recorder = RequestRecorder(
            self._metrics, variant, features.slo.ttft_ms, features.slo.tpot_ms, prediction
        )
        dispatched_at = self._clock()
        request = GenerationRequest(
            flight.request_id, prompt_ids, sampling, cached_by_replica=prefix.cached.get(variant, {})
        )
        first = await self._first_delta(flight, variant, request)
        if first is None:
            first = Delta(text="", token_ids=[], finish_reason="stop", prompt_tokens=len(prompt_ids))
        now = self._clock()
        self._book.first_token(flight.ticket, now)
        flight.headers["server-timing"] = server_timing(flight.arrived_at, dispatched_at, now)
        replica = replica_of(flight.request_id)  # the replica that served it, where our request router chose it
        if replica is not None:
            flight.headers["x-route-replica"] = replica
            self.routing.note_routed(variant, replica, prefix, affinity_key)
        if self._ingress_id is not None:
            flight.headers["x-route-ingress"] = self._ingress_id
        flight.recorder.chunk(first.completion_tokens)
        flight.last = first
        logger.info("request %s -> %s (%s, %d prompt tokens)", flight.request_id, variant, reason, len(prompt_ids))
        return first

    def _tokenize(self, req: Any, chat: bool) -> list[list[int]]:
        """Every prompt of the request as token ids, each within the prompt limit; a batch within its cap."""
        if chat:
            prompts = [self._prompts.chat(req.messages, req.template_tools())]
        else:
            texts = req.prompts()
            cap = self.config.limits.max_batch_prompts
            if len(texts) > cap:
                raise InvalidRequestError(
                    f"The request batches {len(texts)} prompts; this endpoint accepts at most {cap} per request.",
                    param="prompt",
                )
            prompts = [self._prompts.completion(text) for text in texts]
        for ids in prompts:
            self._check_prompt_limit(len(ids))
        return prompts

    async def _admit(self, flight: Flight, max_tokens: int, n: int) -> Admission:
        """The whole request admitted against its key's limits at once: one request; every prompt's tokens once and
        ``max_tokens`` for each of its ``n`` choices; a stream slot per choice. A batch is one request, as OpenAI
        counts it (the OpenAI cookbook's "How to handle rate limits", "Batching requests": several prompts in one
        request to stay under requests per minute), and it is charged or refused whole, before any of its choices
        reaches an engine."""
        prompts = flight.prompts
        tokens = sum(len(ids) for ids in prompts) + len(prompts) * n * max_tokens
        return await self._limits.admit(flight.principal, tokens, streams=len(prompts) * n)

    def _remaining(self, flight: Flight) -> float:
        return max(0.0, flight.deadline - self._clock())

    async def _first_delta(self, flight: Flight, variant: str, request: GenerationRequest) -> Delta | None:
        """Dispatches the request and waits for its first delta, within the request's time limit.

        A replica that dies before the first token has sent the client nothing, so the request goes once more to
        the variant: Serve's handle drops a replica whose actor died and picks another (or waits for the one it
        starts in its place). After the first token a replica's death is the stream's error instead."""
        for attempt in (1, 2):
            flight.stream = self._engines[variant].generate.remote(request)
            try:
                async with asyncio.timeout(self._remaining(flight)):
                    return await anext(flight.stream, None)
            except self._replica_lost as exc:
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

    async def _route(
        self, features: RequestFeatures, prefix: PrefixLookup
    ) -> tuple[str, str, Mapping[str, Prediction], ServingError | None]:
        """(variant, reason, every candidate's prediction, refusal): where the request goes, or the error that
        refuses it."""
        if not self.routing.has_live_stats():
            await self.routing.refresh()  # right after a deploy the background refresh may not have run
        no_stats = not self.routing.has_live_stats()
        decision = self.routing.fallback(features) if no_stats else self.routing.decide(features, prefix)
        if decision.rejected:
            error = error_for_rejection(decision, features.prompt_tokens, self.routing.context_lengths())
            return "", str(decision.reason), {}, error
        return decision.variant or "", str(decision.reason), decision.predictions, None

    # ------------------------------------------------------------------ checks

    def _check_model(self, model: str) -> str | None:
        """The pinned variant for ``model``, None for the public (routed) model; unknown names are 404."""
        if model in self._engines:
            return model
        if model == self.config.model_name:
            return None
        known = ", ".join([self.config.model_name, *self._engines])
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
