"""The project's one error hierarchy.

Engines, the router, the app's config and auth raise these; the boundaries translate them with one table
(``core/error_table.py``): HTTP statuses and OpenAI error JSON in ``serve_app/errors.py``, gRPC statuses in
``serve_app/grpc_errors.py``. Nothing here knows about a protocol: each error only says *what* went wrong, with
a message meant for the client, in the spirit of ``httpx/_exceptions.py``::

    ServingError
    ├── InvalidRequestError          the request itself is wrong (fix it, then retry)
    │   ├── ContextTooLongError      prompt (+ max_tokens) does not fit any context
    │   ├── ModelNotFoundError       an unknown model / variant / builtin name
    │   └── PayloadTooLargeError     the body is over the configured limit
    ├── AuthenticationError          missing or wrong API key
    ├── PermissionDeniedError        a valid key without the right to this endpoint
    ├── OverloadedError              no capacity now: retry after ``retry_after_s``
    ├── UnavailableError             no replica can serve now (starting, scaled to zero): retry later
    ├── RequestTimeoutError          the request ran past the configured time limit
    ├── EngineDeadError              the engine cannot serve (crashed, stopped, unhealthy)
    └── ConfigError                  a configuration that cannot work (the app's, the cluster's, auth's)
        └── EngineConfigError        an engine's: a missing package, a bad model path, a mismatch
"""

from __future__ import annotations

__all__ = [
    "AuthenticationError",
    "ConfigError",
    "ContextTooLongError",
    "EngineConfigError",
    "EngineDeadError",
    "InvalidRequestError",
    "ModelNotFoundError",
    "OverloadedError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RequestTimeoutError",
    "ServingError",
    "UnavailableError",
]


class ServingError(Exception):
    """Base class of every error this project raises on purpose."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        # The request field the error is about, when there is one (OpenAI's error.param).
        self.param = param

    def __reduce__(self):  # errors cross Ray process boundaries: keep keyword fields when pickled
        return (_rebuild, (type(self), self.message, dict(self.__dict__)))


def _rebuild(cls: type[ServingError], message: str, state: dict) -> ServingError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


class InvalidRequestError(ServingError):
    """The request is malformed or asks for something impossible."""


class ContextTooLongError(InvalidRequestError):
    """The prompt, or the prompt plus the requested output, exceeds the model's context length."""

    def __init__(self, message: str, *, prompt_tokens: int, context_length: int) -> None:
        super().__init__(message, param="prompt")
        self.prompt_tokens = prompt_tokens
        self.context_length = context_length


class ModelNotFoundError(InvalidRequestError):
    """The named model, variant or builtin model does not exist."""

    def __init__(self, message: str) -> None:
        super().__init__(message, param="model")


class PayloadTooLargeError(InvalidRequestError):
    """The request body exceeds the configured limit."""


class AuthenticationError(ServingError):
    """The request carries no valid credentials."""


class PermissionDeniedError(ServingError):
    """The caller is known but may not use this endpoint."""


class OverloadedError(ServingError):
    """No capacity right now; the client should retry after ``retry_after_s`` seconds."""

    def __init__(self, message: str, *, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class UnavailableError(ServingError):
    """Nothing can serve the request right now (no ready replica); retry after ``retry_after_s`` seconds."""

    def __init__(self, message: str, *, retry_after_s: float = 5.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RequestTimeoutError(ServingError):
    """The request ran longer than the configured limit; its engine request was aborted."""


class EngineDeadError(ServingError):
    """The engine cannot serve requests any more (its loop died, it was shut down, it hangs)."""


class ConfigError(ServingError):
    """A configuration that cannot work: the app's config file, its auth keys, a cluster shape or manifest.

    Raised at start or deploy time, not for a request; not an engine error, although an engine's own
    configuration problem (:class:`EngineConfigError`) is one of these.
    """


class EngineConfigError(ConfigError):
    """An engine configuration that cannot work: a missing package, a bad model path, a mismatch."""
