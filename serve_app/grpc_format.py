"""The gRPC API's messages (``grpc_api/llm.proto``) onto the HTTP API's request body and back.

A ``GenerateRequest`` becomes exactly the JSON body ``/v1/completions`` or ``/v1/chat/completions`` takes,
so the same pydantic models validate it with the same messages and ``param`` names (the proto's fields are
named like the body's); its SLO fields become the ``x-slo-*`` headers the router reads. Unset optional
fields are left out of the body, so the HTTP defaults apply. Bytes that were no message at all
(``grpc_api.UndecodableRequest``) are an ``InvalidRequestError`` when the body is read, after auth, as HTTP's
bodies that are not JSON.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from core.errors import InvalidRequestError
from engines.protocol import Delta
from router.headers import TIER_HEADER, TPOT_HEADER, TTFT_HEADER
from serve_app.grpc_api import UndecodableRequest, llm_pb2
from serve_app.openai_format import openai_finish_reason

if TYPE_CHECKING:
    from serve_app.choices import Usage

_OPTIONAL = ("max_tokens", "temperature", "top_p", "top_k", "seed", "n", "priority")
# The router reads the SLO from headers; its errors name the header, a gRPC client knows the field.
_SLO_FIELDS = {TIER_HEADER: "tier", TTFT_HEADER: "ttft_ms", TPOT_HEADER: "tpot_ms"}


def decoded(request: Any) -> Any:
    """``request``, or an ``InvalidRequestError`` when its bytes were not its message (:class:`UndecodableRequest`)."""
    if isinstance(request, UndecodableRequest):
        raise InvalidRequestError(f"The request is not a valid message of this method: {request.error}")
    return request


def is_chat(request: Any) -> bool:
    return not isinstance(request, UndecodableRequest) and len(request.messages) > 0


def request_body(request: Any) -> dict[str, Any]:
    """The HTTP body equivalent to ``request``; raises when it has no prompt or more than one kind of one, or was
    no ``GenerateRequest`` at all."""
    decoded(request)
    given = [name for name, set_ in _prompt_kinds(request) if set_]
    if len(given) != 1:
        raise InvalidRequestError(
            "Send exactly one of 'prompt', 'prompt_token_ids' or 'messages'"
            + (f" (got {', '.join(given)})." if given else "."),
            param="prompt",
        )
    body: dict[str, Any] = {"model": request.model}
    if request.messages:
        body["messages"] = [{"role": m.role, "content": m.content} for m in request.messages]
    elif request.prompt_token_ids:
        body["prompt"] = list(request.prompt_token_ids)
    else:
        body["prompt"] = request.prompt
    for name in _OPTIONAL:
        if request.HasField(name):
            body[name] = getattr(request, name)
    if request.stop:
        body["stop"] = list(request.stop)
    if request.stop_token_ids:
        body["stop_token_ids"] = list(request.stop_token_ids)
    if request.ignore_eos:
        body["ignore_eos"] = True
    return body


def _prompt_kinds(request: Any) -> Iterable[tuple[str, bool]]:
    yield "prompt", bool(request.prompt)
    yield "prompt_token_ids", len(request.prompt_token_ids) > 0
    yield "messages", len(request.messages) > 0


def slo_headers(request: Any) -> dict[str, str]:
    """The request's SLO fields as the headers ``router.features_from_headers`` reads."""
    headers: dict[str, str] = {}
    if isinstance(request, UndecodableRequest):  # refused once the body is read (request_body)
        return headers
    if request.tier:
        headers[TIER_HEADER] = request.tier
    if request.HasField("ttft_ms"):
        headers[TTFT_HEADER] = repr(request.ttft_ms)
    if request.HasField("tpot_ms"):
        headers[TPOT_HEADER] = repr(request.tpot_ms)
    return headers


def field_error(exc: BaseException) -> BaseException:
    """An error about an SLO header, reworded for the request field it came from."""
    if isinstance(exc, InvalidRequestError) and exc.param in _SLO_FIELDS:
        field = _SLO_FIELDS[exc.param]
        return InvalidRequestError(exc.message.replace(f"Header {exc.param}", f"Field '{field}'"), param=field)
    return exc


def delta_message(delta: Delta, index: int = 0) -> Any:
    """``delta`` of choice ``index`` as a message."""
    return llm_pb2.GenerateResponse(
        text=delta.text,
        token_ids=delta.token_ids,
        finish_reason=openai_finish_reason(delta.finish_reason) or "",
        index=index,
    )


def finish(message: Any, request_id: str, usage: Usage | None, variant: str, reason: str, prediction: Any) -> Any:
    """Completes the last message of a stream: the request's usage (when it has one: every choice's completion
    tokens), the route decision (when there was one), the request id."""
    message.request_id = request_id
    if usage is not None:
        message.usage.prompt_tokens = usage.prompt_tokens
        message.usage.completion_tokens = usage.completion_tokens
        message.usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
    if reason:
        message.route.variant = variant
        message.route.reason = reason
        if prediction is not None:
            message.route.predicted_ttft_ms = prediction.ttft_ms
            message.route.predicted_tpot_ms = prediction.tpot_ms
    return message


def models_message(names: Iterable[str], created: int) -> Any:
    """``names``: the public model first (requests for it are routed), then the variants (pinned)."""
    models = [
        llm_pb2.Model(id=name, created=created, owned_by="variant-serve", routed=i == 0) for i, name in enumerate(names)
    ]
    return llm_pb2.ModelsResponse(models=models)


def no_models() -> Any:
    return llm_pb2.ModelsResponse()
