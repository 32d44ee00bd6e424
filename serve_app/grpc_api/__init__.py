"""The gRPC API (``llm.proto``): its generated messages and stubs, generated on first import when missing.

Serve's config names the servicer function by this path, which every gRPC proxy imports:

    grpc_options:
      grpc_servicer_functions: [serve_app.grpc_api.add_LLMServiceServicer_to_server]

Clients use ``llm_pb2`` (messages) and ``llm_pb2_grpc.LLMServiceStub``.
"""

from serve_app.grpc_api.codegen import ensure_generated

ensure_generated()

from serve_app.grpc_api import llm_pb2, llm_pb2_grpc  # noqa: E402  (generated just above when missing)
from serve_app.grpc_api.llm_pb2_grpc import LLMServiceStub, add_LLMServiceServicer_to_server  # noqa: E402

__all__ = ["LLMServiceStub", "add_LLMServiceServicer_to_server", "llm_pb2", "llm_pb2_grpc"]
