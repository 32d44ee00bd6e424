"""The front door on Ray Serve: the HTTP and gRPC routes over one request pipeline, wired to Serve's handles.

The routes (``http_routes.py``, ``grpc_routes.py``) and the pipeline they share (``pipeline.py``) need no Ray; this
module gives them Serve's parts: the variants' streaming handles, the stats board behind the routing table, the
key limiter, Serve's request ids, and what Ray wraps an engine's error in. If the client goes away, Serve cancels
the request and the pipeline cancels the engine stream, which aborts the request inside the engine.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from ray import serve
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError

from core.errors import EngineDeadError
from serve_app import openapi_doc
from serve_app.auth import KeyStore
from serve_app.config import AppConfig
from serve_app.delta_channel import ChannelHandle, ChannelReceiver
from serve_app.grpc_routes import GrpcRoutes
from serve_app.header_guard import guard_direct_ingress
from serve_app.http_routes import HttpRoutes, mount, new_app
from serve_app.limiter import SharedLimits
from serve_app.metrics import IngressMetrics
from serve_app.pipeline import Pipeline, server_timing
from serve_app.prompting import PromptBuilder
from serve_app.ray_compat import stream_handle_options
from serve_app.routing import RoutingTable

__all__ = ["Ingress", "app", "server_timing"]

app = new_app()
mount(app, HttpRoutes)


def serve_request_id(headers: Mapping[str, str]) -> str:
    """The id Serve's proxy uses for this request (the client's x-request-id when sent), so logs line up.

    Over gRPC, Serve's id is the client's ``request_id`` metadata when sent."""
    from ray.serve.context import _get_serve_request_context  # private, but the only way to read Serve's id

    return headers.get("x-request-id") or _get_serve_request_context().request_id or f"req-{uuid.uuid4().hex}"


def unwrap_ray_error(exc: BaseException) -> BaseException:
    """Errors raised in an engine replica arrive wrapped by Ray; the boundary wants the original."""
    while isinstance(exc, RayTaskError) and getattr(exc, "cause", None) is not None:
        exc = exc.cause
    if isinstance(exc, RayActorError | ActorUnavailableError):
        return EngineDeadError("The engine replica serving this request stopped; retry the request.")
    return exc


# Serve pickles the class when it is decorated: module-level helpers it uses must be defined above it.
@serve.deployment
@serve.ingress(app)
class Ingress(HttpRoutes, GrpcRoutes):
    async def __init__(  # type: ignore[misc]
        self, config: dict, variants: dict[str, Any], board: Any, limiter: Any = None
    ) -> None:
        parsed = AppConfig.model_validate(config)
        guard_direct_ingress()  # Serve's entry point before the app: headers it cannot decode are a 400, not its 500
        # _by_reference=False: Serve's inter-deployment gRPC (every replica runs its server), one stream per
        # request instead of one Ray object per delta; the per-object bookkeeping was most of the ingress's CPU
        # per token. Errors arrive the same way (RayTaskError; ActorUnavailableError for a replica gone).
        transport = parsed.ingress.engine_transport
        by_reference = transport == "ray"
        handles: dict[str, Any] = {
            name: h.options(**stream_handle_options(by_reference, h.options)) for name, h in variants.items()
        }
        if transport == "channel":  # every stream's deltas on one connection per engine replica (delta_channel)
            self._channel = ChannelReceiver()
            handles = {name: ChannelHandle(h, self._channel) for name, h in handles.items()}
        metrics = IngressMetrics()
        routing = RoutingTable(  # publish: the demand it redirects, for the variants' autoscalers
            parsed,
            lambda: board.snapshot.remote(),
            publish=lambda source, levels: board.redirected.remote(source, levels),
            wake=lambda name: variants[name].info.remote(),  # a variant at zero replicas: Serve's cold start
            kv_changes=lambda cursors: board.kv_changes.remote(cursors),  # the engines' prefix caches
            index_size=metrics.prefix_index,
        )
        routing.start()
        keys = KeyStore(parsed.auth)
        # Per-key limits for the whole endpoint: budget leased from the app's KeyLimiter (limiter.py), spent here.
        limits = SharedLimits(keys, limiter)
        limits.start()
        pipeline = Pipeline(
            parsed,
            engines=handles,
            routing=routing,
            keys=keys,
            limits=limits,
            prompts=PromptBuilder(parsed.tokenizer_ref),
            metrics=metrics,
            unwrap=unwrap_ray_error,
            replica_lost=(RayActorError, ActorUnavailableError),
            ingress_id=serve.get_replica_context().replica_id.unique_id,  # x-route-ingress
        )
        HttpRoutes.__init__(self, pipeline, lambda: board.snapshot.remote(), serve_request_id)
        GrpcRoutes.__init__(self, pipeline, serve_request_id)
        # This replica's /openapi.json names the models it serves. Through openapi_doc's module, not `app`: Serve
        # pickles this class by value, so a module global read here is a copy, not the app that answers.
        openapi_doc.serve_models(pipeline.model_names())
