"""The gRPC API (``llm.proto``): its generated messages and stubs, generated on first import when missing.

Serve's config names the servicer function by this path, which every gRPC proxy imports:

    grpc_options:
      grpc_servicer_functions: [serve_app.grpc_api.add_LLMServiceServicer_to_server]

Clients use ``llm_pb2`` (messages) and ``llm_pb2_grpc.LLMServiceStub``.
"""

from serve_app.grpc_api.codegen import ensure_generated

ensure_generated()

from typing import Any  # noqa: E402

from serve_app.grpc_api import llm_pb2, llm_pb2_grpc  # noqa: E402  (generated just above when missing)
from serve_app.grpc_api.llm_pb2_grpc import LLMServiceStub  # noqa: E402
from serve_app.ray_compat import RAY_2_60, ray_version  # noqa: E402

__all__ = ["LLMServiceStub", "add_LLMServiceServicer_to_server", "llm_pb2", "llm_pb2_grpc"]


class _GenericHandlersOnly:
    """A server that takes the generated code's generic handlers but not its registered-method ones.

    Serve's gRPC server routes every handler it is given to the ingress replicas; Ray 2.55's routes only generic
    handlers (``_private/grpc_util.py`` ``gRPCGenericServer.add_generic_rpc_handlers``; 2.60 also overrides
    ``add_registered_method_handlers``), so the registered ones, which grpcio prefers, would call Serve's
    placeholder servicer (a Mock) instead. The generated code registers both, the generic ones as grpcio's
    compatibility path."""

    def __init__(self, server: Any) -> None:
        self._server = server

    def add_registered_method_handlers(self, service_name: str, method_handlers: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


def add_LLMServiceServicer_to_server(servicer: Any, server: Any) -> None:  # the generated name
    """The generated ``add_LLMServiceServicer_to_server``, with only generic handlers on a Ray before 2.60."""
    llm_pb2_grpc.add_LLMServiceServicer_to_server(
        servicer, server if ray_version() >= RAY_2_60 else _GenericHandlersOnly(server)
    )
