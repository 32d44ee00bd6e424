"""One table: each error class of ``core/errors.py`` and what every boundary says for it.

The HTTP boundary (``serve_app/errors.py``) answers with the row's status and an OpenAI error of its type and
code; the gRPC boundary (``serve_app/grpc_errors.py``) with its gRPC status; the simulator (``sim/``) records
the same status and type for the router's rejections. A class without a row would fall back to its parent's,
so ``tests/core/test_error_table.py`` walks the hierarchy and requires a row for each one.

gRPC codes are named (``grpc.StatusCode[row.grpc_code]``) so that this module imports nothing but the errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.errors import (
    AuthenticationError,
    ConfigError,
    ContextTooLongError,
    EngineConfigError,
    EngineDeadError,
    InvalidRequestError,
    ModelNotFoundError,
    OverloadedError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RequestTimeoutError,
    ServingError,
    UnavailableError,
)


@dataclass(frozen=True, slots=True)
class ErrorRow:
    """What the boundaries answer for one error class."""

    http_status: int
    openai_type: str  # OpenAI's error.type
    code: str | None  # OpenAI's error.code: a short stable name the client can branch on
    grpc_code: str  # a grpc.StatusCode name


TABLE: dict[type[ServingError], ErrorRow] = {
    ServingError: ErrorRow(500, "server_error", "internal_error", "INTERNAL"),
    InvalidRequestError: ErrorRow(400, "invalid_request_error", None, "INVALID_ARGUMENT"),
    ContextTooLongError: ErrorRow(400, "invalid_request_error", "context_length_exceeded", "INVALID_ARGUMENT"),
    ModelNotFoundError: ErrorRow(404, "invalid_request_error", "model_not_found", "NOT_FOUND"),
    PayloadTooLargeError: ErrorRow(413, "invalid_request_error", "payload_too_large", "INVALID_ARGUMENT"),
    AuthenticationError: ErrorRow(401, "authentication_error", "invalid_api_key", "UNAUTHENTICATED"),
    PermissionDeniedError: ErrorRow(403, "permission_error", "admin_key_required", "PERMISSION_DENIED"),
    OverloadedError: ErrorRow(429, "rate_limit_error", "overloaded", "RESOURCE_EXHAUSTED"),
    UnavailableError: ErrorRow(503, "server_error", "no_replica_available", "UNAVAILABLE"),
    RequestTimeoutError: ErrorRow(504, "server_error", "timeout", "DEADLINE_EXCEEDED"),
    EngineDeadError: ErrorRow(503, "server_error", "engine_unavailable", "UNAVAILABLE"),
    ConfigError: ErrorRow(500, "server_error", "misconfigured", "INTERNAL"),
    EngineConfigError: ErrorRow(500, "server_error", "engine_misconfigured", "INTERNAL"),
}

# Anything that is not one of ours: an opaque 500 / INTERNAL (its message is not shown to the client).
UNKNOWN = ErrorRow(500, "server_error", "internal_error", "INTERNAL")


def row_for(exc: BaseException) -> ErrorRow:
    """The row of ``exc``'s most specific class in the table; :data:`UNKNOWN` for an error that is not ours."""
    for cls in type(exc).__mro__:
        row = TABLE.get(cls)
        if row is not None:
            return row
    return UNKNOWN


def retry_after_seconds(exc: BaseException) -> int | None:
    """Whole seconds until the client may retry, for the errors that say "retry later"; None for the others.

    At least 1 (0 would invite a retry storm); a minute when the wait is unbounded (nothing may ever free up).
    """
    if not isinstance(exc, OverloadedError | UnavailableError):
        return None
    seconds = exc.retry_after_s
    return max(1, math.ceil(seconds)) if math.isfinite(seconds) else 60
