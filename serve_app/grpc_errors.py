"""The gRPC boundary: the project's errors as gRPC statuses, by ``core/error_table.py`` (``errors.py`` is its
HTTP twin).

Each error class has its row's status code; anything that is not one of ours is an opaque INTERNAL (the log has
the traceback, via ``errors.describe``). Errors that say "retry later" carry when, three ways, so that every
kind of client finds it: ``retry-after`` (seconds, as HTTP's header), ``grpc-retry-pushback-ms`` (what gRPC's
own retry policy reads) and a ``google.rpc.RetryInfo`` in ``grpc-status-details-bin`` (the rich error model:
``grpc_status.rpc_status.from_call``). An error about one request field names it in ``error-param`` (OpenAI's
``error.param``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc

from core.error_table import retry_after_seconds, row_for
from core.errors import ServingError

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
    code = grpc.StatusCode[row_for(exc).grpc_code]
    metadata: list[tuple[str, str | bytes]] = []
    if exc.param:
        metadata.append((ERROR_PARAM, exc.param))
    seconds = retry_after_seconds(exc)
    if seconds is not None:
        metadata.extend(_retry_metadata(code, exc.message, seconds))
    return GrpcStatus(code, exc.message, tuple(metadata))


def _retry_metadata(code: grpc.StatusCode, message: str, seconds: int) -> list[tuple[str, str | bytes]]:
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
