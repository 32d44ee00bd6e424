"""gRPC messages onto the HTTP API's request body and back, without Ray."""

from __future__ import annotations

import pytest

from core.errors import InvalidRequestError
from engines.protocol import Delta
from router import Prediction
from serve_app.choices import Usage
from serve_app.grpc_api import llm_pb2
from serve_app.grpc_format import (
    delta_message,
    field_error,
    finish,
    is_chat,
    models_message,
    request_body,
    slo_headers,
)
from serve_app.openai_api import ChatCompletionRequest, CompletionRequest, parse_request


def test_a_bare_completion_request_leaves_the_http_defaults_in_place():
    body = request_body(llm_pb2.GenerateRequest(model="m", prompt="Hi"))
    assert body == {"model": "m", "prompt": "Hi"}
    req = parse_request(CompletionRequest, body)
    assert (req.temperature, req.top_p, req.top_k, req.max_tokens) == (1.0, 1.0, 0, None)


def test_every_sampling_field_reaches_the_body():
    request = llm_pb2.GenerateRequest(
        model="m",
        prompt_token_ids=[1, 2, 3],
        max_tokens=7,
        temperature=0.0,  # set, though it is proto3's default: greedy, not the HTTP default 1.0
        top_p=0.5,
        top_k=4,
        seed=11,
        n=2,
        stop=["\n"],
        stop_token_ids=[2],
        ignore_eos=True,
        priority=-1,
    )
    body = request_body(request)
    assert body == {
        "model": "m",
        "prompt": [1, 2, 3],
        "max_tokens": 7,
        "temperature": 0.0,
        "top_p": 0.5,
        "top_k": 4,
        "seed": 11,
        "n": 2,
        "stop": ["\n"],
        "stop_token_ids": [2],
        "ignore_eos": True,
        "priority": -1,
    }
    sampling = parse_request(CompletionRequest, body).sampling(7)
    assert (sampling.temperature, sampling.seed, sampling.stop) == (0.0, 11, ["\n"])


def test_chat_messages_become_a_chat_body():
    request = llm_pb2.GenerateRequest(model="m", messages=[llm_pb2.ChatMessage(role="user", content="Hi")])
    assert is_chat(request)
    req = parse_request(ChatCompletionRequest, request_body(request))
    assert req.messages[0].text() == "Hi"


@pytest.mark.parametrize(
    "request_",
    [
        llm_pb2.GenerateRequest(model="m"),
        llm_pb2.GenerateRequest(model="m", prompt="a", prompt_token_ids=[1]),
        llm_pb2.GenerateRequest(model="m", prompt="a", messages=[llm_pb2.ChatMessage(role="user", content="b")]),
    ],
    ids=["none", "text and ids", "text and messages"],
)
def test_exactly_one_kind_of_prompt(request_):
    with pytest.raises(InvalidRequestError) as e:
        request_body(request_)
    assert e.value.param == "prompt"


def test_slo_fields_become_the_routers_headers():
    request = llm_pb2.GenerateRequest(tier="interactive", ttft_ms=250, tpot_ms=40.5)
    assert slo_headers(request) == {"x-slo-tier": "interactive", "x-slo-ttft-ms": "250.0", "x-slo-tpot-ms": "40.5"}
    assert slo_headers(llm_pb2.GenerateRequest()) == {}


def test_errors_about_slo_headers_name_the_field():
    error = field_error(InvalidRequestError("Header x-slo-tier names an unknown tier 'x'.", param="x-slo-tier"))
    assert isinstance(error, InvalidRequestError)
    assert (error.param, error.message) == ("tier", "Field 'tier' names an unknown tier 'x'.")
    other = InvalidRequestError("bad", param="top_p")
    assert field_error(other) is other


def test_the_last_message_carries_usage_route_and_request_id():
    last = Delta(text="end", token_ids=[5, 6], finish_reason="length", prompt_tokens=3, completion_tokens=8)
    usage = Usage(prompt_tokens=3, completion_tokens=8, cached_tokens=None)
    prediction = Prediction(120.0, 9.5, meets_slo=True)
    message = finish(delta_message(last, 1), "req-1", usage, "tiny", "slo_met_best_quality", prediction)
    assert (message.text, list(message.token_ids), message.finish_reason) == ("end", [5, 6], "length")
    assert message.index == 1
    assert (message.usage.prompt_tokens, message.usage.completion_tokens, message.usage.total_tokens) == (3, 8, 11)
    assert (message.route.variant, message.route.reason) == ("tiny", "slo_met_best_quality")
    assert (message.route.predicted_ttft_ms, message.route.predicted_tpot_ms) == (120.0, 9.5)
    assert message.request_id == "req-1"


def test_a_request_refused_before_routing_has_no_route():
    message = finish(delta_message(Delta("", [], "error")), "req-2", None, "", "", None)
    assert message.finish_reason == "error"
    assert not message.HasField("route") and not message.HasField("usage")


def test_an_aborted_stream_finishes_like_http():
    assert delta_message(Delta("", [], "abort")).finish_reason == "stop"


def test_models_list_the_public_model_first():
    models = models_message(["public", "a", "b"], 123).models
    assert [(m.id, m.routed, m.created) for m in models] == [
        ("public", True, 123),
        ("a", False, 123),
        ("b", False, 123),
    ]
