"""The gRPC routes (``grpc_api/llm.proto``): ``Generate`` and ``Models`` over the same request pipeline as HTTP.

Serve's gRPC proxy calls an ingress replica's methods by RPC name, so these are methods of the ingress
(``ingress.py`` mixes :class:`GrpcRoutes` in). Messages come from ``grpc_format.py``; errors become gRPC statuses
in ``grpc_errors.py``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from types import ModuleType
from typing import Any

from engines.protocol import Delta
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

    async def Generate(self, request: Any, grpc_context: Any) -> AsyncIterator[Any]:
        """Server streaming ``LLMService/Generate``: the deltas as messages, the last one with usage and route.

        An error ends the stream with one message (finish_reason "error") carrying the status: Serve 2.60
        forwards a status's trailing metadata (retry-after, ...) only together with a message; an exception
        would arrive as code and details alone."""
        fmt = _grpc_format()
        pipe = self._pipeline
        metadata = dict(grpc_context.invocation_metadata())
        flight = pipe.flight(self._request_id(metadata))
        flight.grpc = True
        inbound = Inbound(
            chat=fmt.is_chat(request),
            authorization=metadata.get("authorization"),
            slo_headers=fmt.slo_headers(request),
            read_body=lambda: _body(fmt, request),
        )
        async with aclosing(pipe.run(flight, inbound)) as run:
            try:
                async for delta in run:
                    if delta.text or delta.token_ids or delta.finish_reason:
                        message = fmt.delta_message(delta)
                        if delta.finish_reason:
                            self._finish_message(message, flight)
                        yield message
                last = flight.last
                if last is not None and not last.finish_reason:  # the variant's stream ended without saying why
                    yield self._finish_message(fmt.delta_message(Delta("", [], "stop")), flight)
            except Exception as exc:
                failure = await pipe.fail(flight, run, exc)
                error = fmt.field_error(failure.error)
                status = grpc_status(error)
                logger.info("gRPC request %s failed: %s %s", flight.request_id, status.code.name, error)
                status.apply(grpc_context)
                yield self._finish_message(fmt.delta_message(Delta("", [], "error")), flight)

    async def Models(self, request: Any, grpc_context: Any) -> Any:
        """Unary ``LLMService/Models``: the public model and every variant."""
        fmt = _grpc_format()
        pipe = self._pipeline
        try:
            pipe.keys.authenticate(dict(grpc_context.invocation_metadata()).get("authorization"))
        except Exception as exc:
            grpc_status(exc).apply(grpc_context)
            return fmt.no_models()  # gRPC sends the status alone, without this message
        return fmt.models_message(pipe.model_names(), pipe.created)

    def _finish_message(self, message: Any, flight: Flight) -> Any:
        prediction = flight.ticket.prediction if flight.ticket is not None else None
        return _grpc_format().finish(message, flight.request_id, flight.last, flight.variant, flight.reason, prediction)
