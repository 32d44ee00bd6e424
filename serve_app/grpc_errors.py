"""The one place where the project's errors become gRPC statuses (``errors.py`` is its HTTP twin).

Each error class maps to one status code, most specific class first; anything that is not one of ours is an
opaque INTERNAL (the log has the traceback, via ``errors.describe``). Errors that say "retry later" carry
when, three ways, so that every kind of client finds it: ``retry-after`` (seconds, as HTTP's header),
``grpc-retry-pushback-ms`` (what gRPC's own retry policy reads) and a ``google.rpc.RetryInfo`` in
``grpc-status-details-bin`` (the rich error model: ``grpc_status.rpc_status.from_call``). An error about one
request field names it in ``error-param`` (OpenAI's ``error.param``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import grpc

from engines.errors import (
    AuthenticationError,
    EngineDeadError,
    InvalidRequestError,
    ModelNotFoundError,
    OverloadedError,
    PermissionDeniedError,
    RequestTimeoutError,
    ServingError,
    UnavailableError,
)

# Most specific first: the first matching class decides (ModelNotFoundError is an InvalidRequestError).
_CODES: list[tuple[type[ServingError], grpc.StatusCode]] = [
    (ModelNotFoundError, grpc.StatusCode.NOT_FOUND),
    (InvalidRequestError, grpc.StatusCode.INVALID_ARGUMENT),
    (AuthenticationError, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDeniedError, grpc.StatusCode.PERMISSION_DENIED),
    (OverloadedError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (UnavailableError, grpc.StatusCode.UNAVAILABLE),
    (EngineDeadError, grpc.StatusCode.UNAVAILABLE),
    (RequestTimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED),
]

RETRY_AFTER = "retry-after"
RETRY_PUSHBACK_MS = "grpc-retry-pushback-ms"
STATUS_DETAILS_BIN = "grpc-status-details-bin"
ERROR_PARAM = "error-param"


@dataclass(frozen=True, slots=True)
class GrpcStatus:
    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, str | bytes], ...] = ()

    def apply(self, context: Any) -> None:
        """Sets this status on a ``grpc.ServicerContext`` or Serve's ``RayServegRPCContext``."""
        context.set_code(self.code)
        context.set_details(self.details)
        if self.trailing_metadata:
            context.set_trailing_metadata(list(self.trailing_metadata))


def grpc_status(exc: BaseException) -> GrpcStatus:
    """The status for any exception: ours by class, anything else INTERNAL without internals."""
    if not isinstance(exc, ServingError):
        return GrpcStatus(grpc.StatusCode.INTERNAL, "Internal server error.")
    code = next((code for cls, code in _CODES if isinstance(exc, cls)), grpc.StatusCode.INTERNAL)
    metadata: list[tuple[str, str | bytes]] = []
    if exc.param:
        metadata.append((ERROR_PARAM, exc.param))
    if isinstance(exc, OverloadedError | UnavailableError):
        metadata.extend(_retry_metadata(code, exc.message, exc.retry_after_s))
    return GrpcStatus(code, exc.message, tuple(metadata))


def _retry_metadata(code: grpc.StatusCode, message: str, retry_after_s: float) -> list[tuple[str, str | bytes]]:
    seconds = max(1, math.ceil(retry_after_s)) if math.isfinite(retry_after_s) else 60
    # Imported here: the protobuf modules load only when a retryable error is first answered.
    from google.protobuf import any_pb2, duration_pb2
    from google.rpc import error_details_pb2, status_pb2

    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds)))
    # The rich status must repeat the call's code and message: clients check that they agree.
    rich = status_pb2.Status(code=code.value[0], message=message, details=[detail])
    return [
        (RETRY_AFTER, str(seconds)),
        (RETRY_PUSHBACK_MS, str(seconds * 1000)),
        (STATUS_DETAILS_BIN, rich.SerializeToString()),
    ]
