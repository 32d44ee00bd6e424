"""The gRPC routes (``grpc_api/llm.proto``): ``Generate`` and ``Models`` over the same request pipeline as HTTP.

Serve's gRPC proxy calls an ingress replica's methods by RPC name, so these are methods of the ingress
(``ingress.py`` mixes :class:`GrpcRoutes` in). Messages come from ``grpc_format.py``; errors become gRPC statuses
in ``grpc_errors.py``; a request's choices (``n``) are started, merged and ended by ``choices.py``, as for HTTP.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable, Mapping
from types import ModuleType
from typing import Any

from engines.protocol import Delta
from serve_app import choices
from serve_app.choices import Choices, Usage
from serve_app.grpc_errors import grpc_status
from serve_app.http_routes import header_request_id
from serve_app.pipeline import Flight, Inbound, Pipeline

logger = logging.getLogger("ray.serve")


def _grpc_format() -> ModuleType:
    """The gRPC message helpers, imported at the first gRPC call: an HTTP-only deployment (one without
    grpc_options) then never generates the gRPC code, nor needs grpcio-tools where it runs."""
    from serve_app import grpc_format

    return grpc_format


async def _body(fmt: ModuleType, request: Any) -> Any:
    # Read when the pipeline asks for it, after auth: a request without a prompt is a 400 only for a known caller.
    return fmt.request_body(request)


class GrpcRoutes:
    """``LLMService`` of one ingress replica over its pipeline."""

    def __init__(self, pipeline: Pipeline, request_id: Callable[[Mapping[str, str]], str] = header_request_id) -> None:
        """``request_id``: the id a request is logged and answered under, from its metadata."""
        self._pipeline = pipeline
        self._request_id = request_id

    async def Generate(self, request: Any, grpc_context: Any) -> AsyncGenerator[Any, None]:
        """Server streaming ``LLMService/Generate``: the deltas as messages, the last one with usage and route;
        with ``n`` > 1 every choice's, each marked with its index (``choices.py``, as HTTP does).

        An error ends the stream with one message (finish_reason "error") carrying the status: Serve 2.60
        forwards a status's trailing metadata (retry-after, ...) only together with a message; an exception
        would arrive as code and details alone."""
        fmt = _grpc_format()
        pipe = self._pipeline
        metadata = dict(grpc_context.invocation_metadata())
        flight = pipe.flight(self._request_id(metadata), grpc=True)
        inbound = Inbound(
            chat=fmt.is_chat(request),
            authorization=metadata.get("authorization"),
            slo_headers=fmt.slo_headers(request),
            read_body=lambda: _body(fmt, request),
        )
        started: Choices | None = None
        try:
            started = await choices.start(pipe, flight, inbound)
            # The stream's last message is the finish of the last choice to finish: it carries the request's usage
            # and route. A choice whose variant's stream ended without saying why finishes after the others.
            unfinished = len(started)
            async for index, delta in started.deltas():
                if delta.text or delta.token_ids or delta.finish_reason:
                    message = fmt.delta_message(delta, index)
                    if delta.finish_reason:
                        unfinished -= 1
                        if not unfinished:
                            self._finish_message(message, flight, started.usage())
                    yield message
            for index, last in enumerate(started.lasts()):
                if not last.finish_reason:
                    message = fmt.delta_message(Delta("", [], "stop"), index)
                    unfinished -= 1
                    yield self._finish_message(message, flight, started.usage()) if not unfinished else message
        except Exception as exc:
            failure = await started.fail(exc) if started is not None else pipe.failure(exc)
            error = fmt.field_error(failure.error)
            status = grpc_status(error)
            logger.info("gRPC request %s failed: %s %s", flight.request_id, status.code.name, error)
            status.apply(grpc_context)
            usage = started.usage() if started is not None else None
            yield self._finish_message(fmt.delta_message(Delta("", [], "error")), flight, usage)
        finally:
            if started is not None:
                await started.close()

    async def Models(self, request: Any, grpc_context: Any) -> Any:
        """Unary ``LLMService/Models``: the public model and every variant."""
        fmt = _grpc_format()
        pipe = self._pipeline
        try:
            pipe.keys.authenticate(dict(grpc_context.invocation_metadata()).get("authorization"))
            fmt.decoded(request)
        except Exception as exc:
            grpc_status(exc).apply(grpc_context)
            return fmt.no_models()  # gRPC sends the status alone, without this message
        return fmt.models_message(pipe.model_names(), pipe.created)

    def _finish_message(self, message: Any, flight: Flight, usage: Usage | None) -> Any:
        """``message`` as the stream's last: the request's ``usage``, and the route and id of ``flight`` (choice
        0's)."""
        prediction = flight.ticket.prediction if flight.ticket is not None else None
        return _grpc_format().finish(message, flight.request_id, usage, flight.variant, flight.reason, prediction)
