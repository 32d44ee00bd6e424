"""OpenAI request bodies: what is implemented is validated, what is not is refused by name, never dropped."""

from __future__ import annotations

import pytest

from core.errors import InvalidRequestError
from serve_app.openai_api import (
    MAX_CHOICES,
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


@pytest.mark.parametrize("parse", [(CompletionRequest, COMPLETION), (ChatCompletionRequest, CHAT)])
def test_the_optional_sampling_fields_map_onto_the_engines_sampling_params(parse):
    model, base = parse
    body = {
        **base,
        "presence_penalty": 0.5,
        "frequency_penalty": -1,
        "repetition_penalty": 1.2,
        "min_tokens": 4,
        "logit_bias": {"7": -100, "12": 2.5},
        "seed": 3,
    }
    sampling = parse_request(model, body).sampling(16)
    assert (sampling.presence_penalty, sampling.frequency_penalty, sampling.repetition_penalty) == (0.5, -1.0, 1.2)
    assert (sampling.min_tokens, sampling.logit_bias, sampling.seed) == (4, {7: -100.0, 12: 2.5}, 3)
    assert sampling.requested_fields() == {
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "min_tokens",
        "logit_bias",
        "seed",
    }


def test_neutral_sampling_values_ask_for_no_field():
    body = {
        **COMPLETION,
        "presence_penalty": 0,
        "frequency_penalty": None,
        "repetition_penalty": 1,
        "min_tokens": 0,
        "logit_bias": {"7": 0},
        "top_k": 1,
        "seed": 5,
        "temperature": 0,  # greedy: a seed changes nothing
    }
    assert parse_request(CompletionRequest, body).sampling(16).requested_fields() == frozenset()


@pytest.mark.parametrize(
    ("field", "value", "param"),
    [
        ("presence_penalty", 2.5, "presence_penalty"),
        ("frequency_penalty", False, "frequency_penalty"),
        ("repetition_penalty", 0, "repetition_penalty"),
        ("min_tokens", -1, "min_tokens"),
        ("min_tokens", True, "min_tokens"),
        ("logit_bias", {"x": 1}, "logit_bias"),
        ("logit_bias", {"7": 101}, "logit_bias"),
        ("logit_bias", {"7": True}, "logit_bias.7"),
    ],
)
def test_sampling_fields_out_of_range_are_refused_by_name(field, value, param):
    with pytest.raises(InvalidRequestError) as err:
        parse_request(CompletionRequest, {**COMPLETION, field: value})
    assert err.value.param == param


def test_min_tokens_above_max_tokens_is_refused_before_routing():
    request = parse_request(CompletionRequest, {**COMPLETION, "min_tokens": 20})
    with pytest.raises(InvalidRequestError) as err:
        request.sampling(16)
    assert err.value.param == "min_tokens"


def test_logprobs_map_onto_the_engines_sampling_params():
    completion = parse_request(CompletionRequest, {**COMPLETION, "logprobs": 2}).sampling(16)
    assert completion.logprobs == 2 and "logprobs" in completion.requested_fields()
    assert parse_request(CompletionRequest, {**COMPLETION, "logprobs": 0}).sampling(16).logprobs == 0
    chat = parse_request(ChatCompletionRequest, {**CHAT, "logprobs": True, "top_logprobs": 3}).sampling(16)
    assert chat.logprobs == 3
    assert parse_request(ChatCompletionRequest, {**CHAT, "logprobs": True}).sampling(16).logprobs == 0
    neutral = parse_request(ChatCompletionRequest, {**CHAT, "logprobs": False, "top_logprobs": 0}).sampling(16)
    assert neutral.logprobs is None and "logprobs" not in neutral.requested_fields()


@pytest.mark.parametrize(
    ("model", "body", "param"),
    [
        (CompletionRequest, {**COMPLETION, "logprobs": 21}, "logprobs"),
        (CompletionRequest, {**COMPLETION, "logprobs": True}, "logprobs"),  # a bool is not a count
        (CompletionRequest, {**COMPLETION, "logprobs": 1, "echo": True}, "echo"),  # would need prompt logprobs
        (ChatCompletionRequest, {**CHAT, "top_logprobs": 2}, "top_logprobs"),  # OpenAI: needs logprobs true
        (ChatCompletionRequest, {**CHAT, "logprobs": 1}, "logprobs"),
        (ChatCompletionRequest, {**CHAT, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ],
)
def test_bad_logprobs_are_a_400_naming_the_field(model, body, param):
    with pytest.raises(InvalidRequestError) as err:
        parse_request(model, body).sampling(16)
    assert err.value.param == param


def test_n_choices_are_bounded():
    assert parse_request(CompletionRequest, {**COMPLETION, "n": MAX_CHOICES}).n == MAX_CHOICES
    for n in (0, MAX_CHOICES + 1):
        with pytest.raises(InvalidRequestError) as err:
            parse_request(ChatCompletionRequest, {**CHAT, "n": n})
        assert err.value.param == "n"


@pytest.mark.parametrize("temperature", [9.157182573981537e-121, 1e-6])
def test_a_vanishing_temperature_is_greedy_not_an_overflow(temperature):
    # Logits divided by 1e-120 are inf: the sampler then fails the request (found by the schema fuzz run).
    sampling = parse_request(CompletionRequest, {**COMPLETION, "temperature": temperature}).sampling(4)
    assert (sampling.temperature, sampling.greedy) == (0.0, True)
    assert parse_request(CompletionRequest, {**COMPLETION, "temperature": 0.01}).sampling(4).temperature == 0.01


def test_best_of_is_a_sampling_field_of_its_own_when_sampling():
    sampling = parse_request(CompletionRequest, {**COMPLETION, "best_of": 3, "temperature": 0.7}).sampling(8)
    assert (sampling.best_of, sampling.requested_fields()) == (3, {"best_of"})
    greedy = parse_request(CompletionRequest, {**COMPLETION, "best_of": 3, "temperature": 0}).sampling(8)
    assert greedy.requested_fields() == frozenset()  # every sequence would be the same one


@pytest.mark.parametrize("fields", [{"best_of": 2, "stream": True}, {"best_of": 2, "n": 3}, {"best_of": 9}])
def test_best_of_that_cannot_be_served_is_refused_naming_it(fields):
    with pytest.raises(InvalidRequestError) as err:
        parse_request(CompletionRequest, {**COMPLETION, **fields})
    assert err.value.param == "best_of"


@pytest.mark.parametrize(
    ("prompt", "prompts"),
    [
        ("hi", ["hi"]),
        ([1, 2], [[1, 2]]),
        ([], [[]]),  # no prompt at all: the tokenizer refuses it by name
        (["a", "b"], ["a", "b"]),  # OpenAI's batched forms
        ([[1], [2, 3]], [[1], [2, 3]]),
        (["a"], ["a"]),
    ],
)
def test_a_prompt_is_one_prompt_or_a_batch_of_them(prompt, prompts):
    assert parse_request(CompletionRequest, {**COMPLETION, "prompt": prompt}).prompts() == prompts


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("seed", 2**63),  # OpenAI's int64
        ("seed", -(2**63) - 1),
        ("top_k", 2**31),  # the gRPC API's int32, here too
        ("priority", -(2**31) - 1),
        ("stop_token_ids", [2**31]),
        ("stop_token_ids", [-1]),
        ("logit_bias", {"\u00b2": 1.0}),  # a digit to str.isdigit(), not to int()
        ("logit_bias", {"9" * 5000: 1.0}),
        ("logit_bias", {str(2**31): 1.0}),
    ],
)
def test_integers_beyond_what_engines_take_are_refused_by_name(field, value):
    with pytest.raises(InvalidRequestError) as err:
        parse_request(CompletionRequest, {**COMPLETION, field: value})
    assert err.value.param is not None and err.value.param.startswith(field)


def test_the_ends_of_the_integer_ranges_are_taken():
    body = {**COMPLETION, "seed": -(2**63), "top_k": 2**31 - 1, "priority": -(2**31), "stop_token_ids": [2**31 - 1]}
    assert parse_request(CompletionRequest, {**body, "logit_bias": {str(2**31 - 1): 1.0}}).seed == -(2**63)
