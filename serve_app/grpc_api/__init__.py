"""The gRPC API (``llm.proto``): its generated messages and stubs, generated on first import when missing.

Serve's config names the servicer function by this path, which every gRPC proxy imports:

    grpc_options:
      grpc_servicer_functions: [serve_app.grpc_api.add_LLMServiceServicer_to_server]

Clients use ``llm_pb2`` (messages) and ``llm_pb2_grpc.LLMServiceStub``.
"""

from serve_app.grpc_api.codegen import ensure_generated

ensure_generated()

from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import grpc  # noqa: E402
from google.protobuf.message import DecodeError  # noqa: E402

from serve_app.grpc_api import llm_pb2, llm_pb2_grpc  # noqa: E402  (generated just above when missing)
from serve_app.grpc_api.llm_pb2_grpc import LLMServiceStub  # noqa: E402
from serve_app.ray_compat import RAY_2_60, ray_version  # noqa: E402

__all__ = ["LLMServiceStub", "UndecodableRequest", "add_LLMServiceServicer_to_server", "llm_pb2", "llm_pb2_grpc"]


@dataclass(frozen=True, slots=True)
class UndecodableRequest:
    """What a call's bytes become when they are not its request message (wire format corrupt, a string field that is
    not UTF-8): the route answers INVALID_ARGUMENT with ``error``. grpcio's own answer would be UNKNOWN, with the
    parser's exception as its details (``grpc.aio``: an exception in the request deserializer)."""

    error: str


def _tolerant(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(raw: bytes) -> Any:
        try:
            return parse(raw)
        except DecodeError as e:
            return UndecodableRequest(str(e))

    return deserialize


class _Handlers:
    """Takes the generated code's method handlers (it registers them both ways: generic and registered)."""

    def __init__(self) -> None:
        self.service = ""
        self.handlers: dict[str, Any] = {}

    def add_generic_rpc_handlers(self, generic_rpc_handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service_name: str, method_handlers: dict[str, Any]) -> None:
        self.service, self.handlers = service_name, method_handlers


def add_LLMServiceServicer_to_server(servicer: Any, server: Any) -> None:  # the generated name
    """The generated ``add_LLMServiceServicer_to_server``, each method's request parsed by :func:`_tolerant`.

    Serve's gRPC server routes every handler it is given to the ingress replicas (keeping each one's request
    deserializer). Ray 2.55's routes only generic handlers (``_private/grpc_util.py``
    ``gRPCGenericServer.add_generic_rpc_handlers``; 2.60 also overrides ``add_registered_method_handlers``), so the
    registered ones, which grpcio prefers, would call Serve's placeholder servicer (a Mock) instead: before 2.60 only
    the generic ones are given."""
    taken = _Handlers()
    llm_pb2_grpc.add_LLMServiceServicer_to_server(servicer, taken)
    handlers = {
        name: handler._replace(request_deserializer=_tolerant(handler.request_deserializer))
        for name, handler in taken.handlers.items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(taken.service, handlers),))
    if ray_version() >= RAY_2_60:
        server.add_registered_method_handlers(taken.service, handlers)
