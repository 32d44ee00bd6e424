"""The project's errors onto gRPC statuses: one code per class, retry information where it applies."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from core.errors import (
    AuthenticationError,
    ContextTooLongError,
    EngineConfigError,
    EngineDeadError,
    InvalidRequestError,
    ModelNotFoundError,
    OverloadedError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RequestTimeoutError,
    UnavailableError,
)
from serve_app.grpc_errors import grpc_status
from tests.core.test_error_table import RETRY_CASES

CASES = [
    (InvalidRequestError("bad", param="top_p"), grpc.StatusCode.INVALID_ARGUMENT),
    (ContextTooLongError("long", prompt_tokens=9, context_length=8), grpc.StatusCode.INVALID_ARGUMENT),
    (PayloadTooLargeError("big"), grpc.StatusCode.INVALID_ARGUMENT),
    (ModelNotFoundError("who"), grpc.StatusCode.NOT_FOUND),
    (AuthenticationError("key"), grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDeniedError("admin"), grpc.StatusCode.PERMISSION_DENIED),
    (OverloadedError("busy", retry_after_s=2.5), grpc.StatusCode.RESOURCE_EXHAUSTED),
    (UnavailableError("none"), grpc.StatusCode.UNAVAILABLE),
    (EngineDeadError("dead"), grpc.StatusCode.UNAVAILABLE),
    (RequestTimeoutError("slow"), grpc.StatusCode.DEADLINE_EXCEEDED),
    (EngineConfigError("misconfigured"), grpc.StatusCode.INTERNAL),
]


@pytest.mark.parametrize(("error", "code"), CASES, ids=[type(e).__name__ for e, _ in CASES])
def test_each_error_class_has_its_code_and_message(error, code):
    status = grpc_status(error)
    assert status.code == code
    assert status.details == error.message


def test_errors_that_are_not_ours_are_internal_without_internals():
    status = grpc_status(KeyError("/secret/path"))
    assert status.code == grpc.StatusCode.INTERNAL
    assert "secret" not in status.details
    assert status.trailing_metadata == ()


def test_the_field_at_fault_is_named():
    assert dict(grpc_status(InvalidRequestError("bad", param="top_p")).trailing_metadata) == {"error-param": "top_p"}
    assert dict(grpc_status(ModelNotFoundError("who")).trailing_metadata) == {"error-param": "model"}


@pytest.mark.parametrize(("error", "seconds"), RETRY_CASES)
def test_retryable_errors_say_when_three_ways(error, seconds):
    status = grpc_status(error)
    metadata = dict(status.trailing_metadata)
    assert metadata["retry-after"] == str(seconds)
    assert metadata["grpc-retry-pushback-ms"] == str(seconds * 1000)
    rich = status_pb2.Status.FromString(metadata["grpc-status-details-bin"])
    assert (rich.code, rich.message) == (status.code.value[0], status.details)  # must agree with the call's
    retry = error_details_pb2.RetryInfo()
    assert rich.details[0].Unpack(retry)
    assert retry.retry_delay.seconds == seconds


def test_other_errors_carry_no_retry_information():
    for error in (InvalidRequestError("bad"), AuthenticationError("key"), RequestTimeoutError("slow")):
        assert "retry-after" not in dict(grpc_status(error).trailing_metadata)


class _Context:
    """What GrpcStatus.apply calls on grpc.ServicerContext and Serve's RayServegRPCContext alike."""

    def set_code(self, code):
        self.code = code

    def set_details(self, details):
        self.details = details

    def set_trailing_metadata(self, metadata):
        self.metadata = metadata


def test_apply_sets_code_details_and_trailing_metadata():
    context = _Context()
    grpc_status(OverloadedError("busy", retry_after_s=1)).apply(context)
    assert context.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert context.details == "busy"
    assert ("retry-after", "1") in context.metadata
