"""The HTTP boundary: the project's errors as HTTP statuses and OpenAI error JSON, by ``core/error_table.py``.

Before the first token an error is an HTTP response with the row's status; after it, the same body is sent as
an SSE event followed by ``data: [DONE]`` (framed by ``sse`` and ``DONE`` in ``serve_app/openai_format.py``).
"""

from __future__ import annotations

import logging

from starlette.responses import JSONResponse

from core.error_table import UNKNOWN, retry_after_seconds, row_for
from core.errors import ServingError

logger = logging.getLogger(__name__)


def error_body(message: str, err_type: str, *, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def describe(exc: BaseException) -> tuple[int, dict, dict[str, str]]:
    """(status, OpenAI error body, extra headers) for any exception; unknown ones become an opaque 500."""
    if not isinstance(exc, ServingError):
        # Not one of ours: do not leak internals to the client; the log has the traceback.
        logger.error("unhandled error while serving a request", exc_info=exc)
        return UNKNOWN.http_status, error_body("Internal server error.", UNKNOWN.openai_type, code=UNKNOWN.code), {}
    row = row_for(exc)
    headers = {}
    seconds = retry_after_seconds(exc)
    if seconds is not None:
        headers["Retry-After"] = str(seconds)
    return row.http_status, error_body(exc.message, row.openai_type, param=exc.param, code=row.code), headers


def error_response(exc: BaseException) -> JSONResponse:
    status, body, headers = describe(exc)
    return JSONResponse(body, status_code=status, headers=headers)
