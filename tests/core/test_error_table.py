"""Every error class has its own row in the one table, and the boundaries answer with it."""

from __future__ import annotations

import grpc
import pytest

from core import errors
from core.error_table import TABLE, UNKNOWN, retry_after_seconds, row_for
from core.errors import (
    ConfigError,
    ContextTooLongError,
    EngineConfigError,
    InvalidRequestError,
    ModelNotFoundError,
    OverloadedError,
    PayloadTooLargeError,
    ServingError,
    UnavailableError,
)
from serve_app.errors import describe
from serve_app.grpc_errors import grpc_status


def _error_classes() -> list[type[ServingError]]:
    found: list[type[ServingError]] = []
    pending: list[type[ServingError]] = [ServingError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def _instance(cls: type[ServingError]) -> ServingError:
    if cls is ContextTooLongError:
        return cls("long", prompt_tokens=9, context_length=8)
    if cls is ModelNotFoundError:
        return cls("who")
    return cls("message")


def test_every_error_class_has_a_row_of_its_own():
    classes = _error_classes()
    # The walk finds the hierarchy core.errors defines (and any subclass defined elsewhere, which needs a row too).
    assert set(errors.__all__) <= {cls.__name__ for cls in classes}
    assert [cls.__name__ for cls in classes if cls not in TABLE] == []


def test_each_class_is_answered_with_its_row_over_both_protocols():
    for cls in _error_classes():
        row = TABLE[cls]
        status, body, _ = describe(_instance(cls))
        assert (status, body["error"]["type"], body["error"]["code"]) == (row.http_status, row.openai_type, row.code)
        assert grpc_status(_instance(cls)).code == grpc.StatusCode[row.grpc_code]


def test_rows_name_real_grpc_codes():
    for row in TABLE.values():
        assert row.grpc_code in grpc.StatusCode.__members__


def test_the_most_specific_class_decides():
    assert row_for(ModelNotFoundError("who")).http_status == 404  # an InvalidRequestError, but not a 400
    assert row_for(PayloadTooLargeError("big")).http_status == 413
    assert row_for(EngineConfigError("x")).code == "engine_misconfigured"
    assert row_for(ConfigError("x")).code == "misconfigured"
    assert row_for(InvalidRequestError("x")).code is None


def test_a_config_error_is_not_an_engine_error_but_an_engine_config_error_is_a_config_error():
    assert issubclass(EngineConfigError, ConfigError)
    assert not issubclass(ConfigError, EngineConfigError)


def test_errors_that_are_not_ours_get_the_opaque_row():
    assert row_for(KeyError("/secret")) is UNKNOWN
    status, body, headers = describe(KeyError("/secret"))
    assert (status, headers) == (500, {})
    assert "secret" not in body["error"]["message"]


# (error, whole seconds until a retry): the retryable errors; the gRPC boundary's tests use them too.
RETRY_CASES = [
    (OverloadedError("busy", retry_after_s=2.5), 3),
    (OverloadedError("busy", retry_after_s=0.01), 1),
    (UnavailableError("none", retry_after_s=5), 5),
    (OverloadedError("busy", retry_after_s=float("inf")), 60),
]


@pytest.mark.parametrize(("error", "seconds"), [*RETRY_CASES, (InvalidRequestError("bad"), None)])
def test_retry_after_is_whole_seconds_for_retryable_errors_only(error, seconds):
    assert retry_after_seconds(error) == seconds
    _, _, headers = describe(error)
    assert headers.get("Retry-After") == (None if seconds is None else str(seconds))
