"""OpenAI request bodies: what is implemented is validated, what is not is refused by name, never dropped."""

from __future__ import annotations

import pytest

from engines.errors import InvalidRequestError
from serve_app.openai_api import (
    UNSUPPORTED_CHAT,
    UNSUPPORTED_COMPLETION,
    ChatCompletionRequest,
    CompletionRequest,
    parse_request,
)

COMPLETION = {"model": "m", "prompt": "hi"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

ASKING = {  # a value of each unsupported field that asks for something
    "frequency_penalty": 0.5,
    "presence_penalty": -1,
    "best_of": 3,
    "echo": True,
    "logit_bias": {"50256": -100},
    "logprobs": 2,
    "suffix": "end",
    "audio": {"voice": "alloy", "format": "wav"},
    "function_call": {"name": "f"},
    "functions": [{"name": "f"}],
    "top_logprobs": 3,
    "modalities": ["text", "audio"],
    "moderation": {"mode": "block"},
    "prediction": {"type": "content", "content": "x"},
    "response_format": {"type": "json_object"},
    "tool_choice": "required",
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "web_search_options": {},
}


@pytest.mark.parametrize("field", sorted(UNSUPPORTED_COMPLETION))
def test_completions_refuse_each_unsupported_field_by_name(field):
    with pytest.raises(InvalidRequestError, match="not supported") as err:
        parse_request(CompletionRequest, {**COMPLETION, field: ASKING[field]})
    assert err.value.param == field


@pytest.mark.parametrize("field", sorted(UNSUPPORTED_CHAT))
def test_chat_refuses_each_unsupported_field_by_name(field):
    value = True if field == "logprobs" else ASKING[field]
    with pytest.raises(InvalidRequestError, match="not supported") as err:
        parse_request(ChatCompletionRequest, {**CHAT, field: value})
    assert err.value.param == field


@pytest.mark.parametrize(
    "neutral",
    [
        {"frequency_penalty": 0, "presence_penalty": 0.0, "logit_bias": {}, "echo": False, "logprobs": None},
        {"best_of": 1, "suffix": ""},
        {"user": "u-1", "metadata": {"k": "v"}, "store": False, "service_tier": "auto"},  # change nothing returned
    ],
)
def test_neutral_values_and_fields_that_change_nothing_are_accepted(neutral):
    parse_request(CompletionRequest, {**COMPLETION, **neutral})


def test_chat_accepts_the_neutral_values_the_openai_sdk_and_frameworks_send():
    parse_request(
        ChatCompletionRequest,
        {**CHAT, "logprobs": False, "tools": [], "tool_choice": "none", "response_format": {"type": "text"}},
    )


def test_a_zero_is_not_false_and_false_is_not_zero():
    with pytest.raises(InvalidRequestError):
        parse_request(CompletionRequest, {**COMPLETION, "echo": 0})
    with pytest.raises(InvalidRequestError):
        parse_request(CompletionRequest, {**COMPLETION, "frequency_penalty": False})
