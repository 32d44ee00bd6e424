"""The one place where the project's errors become HTTP statuses and OpenAI error JSON.

Before the first token an error is an HTTP response with the right status; after it, the same body is sent
as an SSE event followed by ``data: [DONE]`` (see ``sse.py``).
"""

from __future__ import annotations

import logging
import math

from starlette.responses import JSONResponse

from engines.errors import (
    AuthenticationError,
    ContextTooLongError,
    EngineConfigError,
    EngineDeadError,
    InvalidRequestError,
    ModelNotFoundError,
    OverloadedError,
    PermissionDeniedError,
    RequestTimeoutError,
    ServingError,
    UnavailableError,
)

logger = logging.getLogger(__name__)

# Most specific first: the first matching class decides.
_STATUS: list[tuple[type[ServingError], int, str, str | None]] = [
    (ModelNotFoundError, 404, "invalid_request_error", "model_not_found"),
    (ContextTooLongError, 400, "invalid_request_error", "context_length_exceeded"),
    (InvalidRequestError, 400, "invalid_request_error", None),
    (AuthenticationError, 401, "authentication_error", "invalid_api_key"),
    (PermissionDeniedError, 403, "permission_error", "admin_key_required"),
    (OverloadedError, 429, "rate_limit_error", "overloaded"),
    (UnavailableError, 503, "server_error", "no_replica_available"),
    (RequestTimeoutError, 504, "server_error", "timeout"),
    (EngineDeadError, 503, "server_error", "engine_unavailable"),
    (EngineConfigError, 500, "server_error", "engine_misconfigured"),
]


class PayloadTooLargeError(InvalidRequestError):
    """The request body exceeds the configured limit (HTTP 413)."""


def error_body(message: str, err_type: str, *, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def describe(exc: BaseException) -> tuple[int, dict, dict[str, str]]:
    """(status, OpenAI error body, extra headers) for any exception; unknown ones become an opaque 500."""
    if isinstance(exc, PayloadTooLargeError):
        return 413, error_body(exc.message, "invalid_request_error", code="payload_too_large"), {}
    if isinstance(exc, ServingError):
        for cls, status, err_type, code in _STATUS:
            if isinstance(exc, cls):
                headers = {}
                if isinstance(exc, OverloadedError | UnavailableError):
                    headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
                return status, error_body(exc.message, err_type, param=exc.param, code=code), headers
    # Not one of ours: do not leak internals to the client; the log has the traceback.
    logger.error("unhandled error while serving a request", exc_info=exc)
    return 500, error_body("Internal server error.", "server_error", code="internal_error"), {}


def error_response(exc: BaseException) -> JSONResponse:
    status, body, headers = describe(exc)
    return JSONResponse(body, status_code=status, headers=headers)
