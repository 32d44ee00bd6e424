"""The router's rejections become the project's errors by their reason alone."""

from __future__ import annotations

import pytest

from core.error_table import TABLE, row_for
from core.errors import ContextTooLongError, InvalidRequestError, ModelNotFoundError, OverloadedError, UnavailableError
from router.rejections import CAPACITY_REASONS, REJECTIONS, error_for_rejection, rejection_class
from router.types import Decision, Reason


def _rejected(reason: Reason, **fields) -> Decision:
    return Decision(None, reason, {}, **fields)


def test_every_rejection_reason_has_an_error_with_a_row():
    rejecting = {reason for reason in Reason if reason.name.startswith(("REJECTED_", "SHED_"))}
    assert rejecting == REJECTIONS.keys()
    assert all(cls in TABLE for cls in REJECTIONS.values())


@pytest.mark.parametrize(
    ("reason", "cls", "status"),
    [
        (Reason.REJECTED_CONTEXT, ContextTooLongError, 400),
        (Reason.REJECTED_UNSUPPORTED_FIELD, InvalidRequestError, 400),
        (Reason.REJECTED_UNKNOWN_VARIANT, ModelNotFoundError, 404),
        (Reason.REJECTED_OVERLOADED, OverloadedError, 429),
        (Reason.REJECTED_SLO, OverloadedError, 429),
        (Reason.SHED_HOPELESS, OverloadedError, 429),
        (Reason.REJECTED_UNAVAILABLE, UnavailableError, 503),
    ],
)
def test_each_reason_is_its_error_and_status(reason, cls, status):
    error = error_for_rejection(_rejected(reason), 100, {"small": 64, "large": 128})
    assert type(error) is cls
    assert row_for(error).http_status == status


def test_the_error_carries_what_the_decision_says():
    too_long = error_for_rejection(_rejected(Reason.REJECTED_CONTEXT, detail="too long"), 900, {"a": 512, "b": 768})
    assert isinstance(too_long, ContextTooLongError)
    assert (too_long.message, too_long.prompt_tokens, too_long.context_length) == ("too long", 900, 768)
    field = error_for_rejection(_rejected(Reason.REJECTED_UNSUPPORTED_FIELD, param="min_p"), 1, {})
    assert field.param == "min_p"
    busy = error_for_rejection(_rejected(Reason.SHED_HOPELESS, retry_after_s=2.5), 1, {})
    assert isinstance(busy, OverloadedError) and busy.retry_after_s == 2.5
    assert "rejected_unavailable" in error_for_rejection(_rejected(Reason.REJECTED_UNAVAILABLE), 1, {}).message


def test_capacity_reasons_are_the_retry_later_ones():
    assert {Reason.REJECTED_OVERLOADED, Reason.REJECTED_SLO, Reason.SHED_HOPELESS, Reason.REJECTED_UNAVAILABLE} == (
        CAPACITY_REASONS
    )
    assert rejection_class(Reason.NO_LIVE_STATS) is UnavailableError  # not a rejection's reason: retry later
