"""The router's rejections as the project's errors: the policy says why (a :class:`~router.types.Reason`), this
table says which error that is; ``core/error_table.py`` then says what each protocol answers for the error.

The ingress raises :func:`error_for_rejection`'s error; the simulator records the same error's row. Pure: no
protocol, no Ray.
"""

from __future__ import annotations

from collections.abc import Mapping

from core.errors import (
    ContextTooLongError,
    InvalidRequestError,
    ModelNotFoundError,
    OverloadedError,
    ServingError,
    UnavailableError,
)
from router.types import Decision, Reason

REJECTIONS: dict[Reason, type[ServingError]] = {
    Reason.REJECTED_CONTEXT: ContextTooLongError,
    Reason.REJECTED_UNSUPPORTED_FIELD: InvalidRequestError,
    Reason.REJECTED_UNKNOWN_VARIANT: ModelNotFoundError,
    Reason.REJECTED_OVERLOADED: OverloadedError,
    Reason.REJECTED_SLO: OverloadedError,
    Reason.SHED_HOPELESS: OverloadedError,
    Reason.REJECTED_UNAVAILABLE: UnavailableError,
}

# Refused for want of capacity now, not for what the request asks: more replicas would have served them.
CAPACITY_REASONS = frozenset(
    reason for reason, cls in REJECTIONS.items() if issubclass(cls, OverloadedError | UnavailableError)
)


def rejection_class(reason: Reason) -> type[ServingError]:
    """The error class of a rejection for ``reason``; UnavailableError for a reason that is no rejection's."""
    return REJECTIONS.get(reason, UnavailableError)


def error_for_rejection(decision: Decision, prompt_tokens: int, context_lengths: Mapping[str, int]) -> ServingError:
    """The error that answers a rejected ``decision`` of a ``prompt_tokens`` request; ``context_lengths`` are the
    variants' (the longest one is what a too-long prompt is told)."""
    detail = decision.detail or f"The request was not routed ({decision.reason})."
    cls = rejection_class(decision.reason)
    if cls is ContextTooLongError:
        longest = max(context_lengths.values(), default=0)
        return ContextTooLongError(detail, prompt_tokens=prompt_tokens, context_length=longest)
    if cls is ModelNotFoundError:
        return ModelNotFoundError(detail)
    if cls is OverloadedError:
        return OverloadedError(detail, retry_after_s=decision.retry_after_s or 1.0)
    if cls is UnavailableError:
        return UnavailableError(detail, retry_after_s=decision.retry_after_s or 5.0)
    return cls(detail, param=decision.param)
