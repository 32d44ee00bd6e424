"""Tool calls and structured output from a request's body to what the openai SDK reads back.

The request side (serve_app/openai_api.py): tools, tool_choice and response_format parsed, refused by name when
malformed, and mapped onto the engine's guided decoding. The response side (serve_app/openai_format.py): an output
that is tool calls comes back as OpenAI's ``tool_calls``, streamed (the SDK's own ``ChatCompletionStreamState``
accumulates the chunks) and whole, and plain text is streamed as it comes. The last test runs the chain with the
trtllm engine on the fake TensorRT-LLM (guided decoding enforced by its "model"): body -> engine -> chunks -> SDK.
What runs live (refusals through real HTTP and the openai client) is tests/serve_app/test_openai_tools_app.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from core.errors import InvalidRequestError
from engines.protocol import GuidedDecoding, TokenLogprob
from serve_app.openai_api import ChatCompletionRequest, CompletionRequest, parse_request
from serve_app.openai_format import ResponseShape, openai_finish_reason

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Weather in Oslo?"}]}
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Now.", "parameters": PARAMETERS}},
    {"type": "function", "function": {"name": "get_time"}},
]
CALL = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'


def chat(**fields) -> ChatCompletionRequest:
    return parse_request(ChatCompletionRequest, {**CHAT, **fields})


# ---------------------------------------------------------------- the request


def test_tools_default_to_auto_shown_to_the_model_and_read_back_without_a_constraint():
    req = chat(tools=TOOLS)
    assert req.effective_tool_choice() == "auto"
    assert [t["function"]["name"] for t in req.template_tools() or []] == ["get_weather", "get_time"]
    assert req.parsed_tool_names() == {"get_weather", "get_time"}
    assert req.sampling(16).guided is None
    assert req.sampling(16).requested_fields() == frozenset()  # any backend with a template that renders tools


def test_tool_choice_none_hides_the_tools_and_reads_plain_content():
    req = chat(tools=TOOLS, tool_choice="none")
    assert (req.template_tools(), req.parsed_tool_names(), req.sampling(16).guided) == (None, None, None)


@pytest.mark.parametrize(
    ("choice", "names"),
    [("required", ["get_weather", "get_time"]), ({"type": "function", "function": {"name": "get_time"}}, ["get_time"])],
)
def test_a_required_call_is_guided_by_the_json_schema_of_the_calls(choice, names):
    guided = chat(tools=TOOLS, tool_choice=choice).sampling(16).guided
    assert guided is not None and (guided.kind, guided.param) == ("json", "tool_choice")
    options = guided.spec.get("anyOf", [guided.spec])
    assert [o["properties"]["name"]["const"] for o in options] == names
    assert chat(tools=TOOLS, tool_choice=choice).sampling(16).requested_fields() == {"tool_choice"}


@pytest.mark.parametrize("parse", [(ChatCompletionRequest, CHAT), (CompletionRequest, {"model": "m", "prompt": "x"})])
def test_response_format_is_guided_decoding_on_both_routes(parse):
    model, base = parse
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    body = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}
    assert parse_request(model, {**base, "response_format": body}).sampling(8).guided == GuidedDecoding("json", schema)
    req = parse_request(model, {**base, "response_format": {"type": "json_object"}})
    assert req.sampling(8).guided == GuidedDecoding("json_object")
    assert req.sampling(8).requested_fields() == {"response_format"}
    assert parse_request(model, {**base, "response_format": {"type": "text"}}).sampling(8).guided is None


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tool_choice": "required"}, "tool_choice"),  # no tools to call
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_mail"}}}, "tool_choice"),
        ({"tools": [TOOLS[0], TOOLS[0]]}, "tools"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools.0.type"),
        ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools.0.function.name"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        ({"functions": [{"name": "f"}]}, "functions"),  # the deprecated form is refused, not ignored
    ],
)
def test_malformed_tools_and_formats_are_400s_naming_the_field(fields, param):
    with pytest.raises(InvalidRequestError) as err:
        chat(**fields).sampling(16)
    assert err.value.param == param


def test_a_required_call_and_a_response_format_together_are_refused():
    req = chat(tools=TOOLS, tool_choice="required", response_format={"type": "json_object"})
    with pytest.raises(InvalidRequestError) as err:
        req.sampling(16)
    assert err.value.param == "tool_choice"


# ---------------------------------------------------------------- the response


def shape(**fields) -> ResponseShape:
    return ResponseShape(
        id="chatcmpl-1", model="m", created=1, chat=True, tool_names=frozenset({"get_weather"}), **fields
    )


def stream(shape: ResponseShape, pieces: list[str], finish: str = "stop") -> list[bytes]:
    return [shape.sse_chunk(p, finish if i == len(pieces) - 1 else None) for i, p in enumerate(pieces)]


def accumulate(frames: list[bytes], final: bool = True) -> ChatCompletion:
    """What the openai SDK makes of the stream (its own accumulator, as client.chat.completions.stream uses; its
    final completion refuses a 'length' finish, so ``final=False`` takes the snapshot)."""
    state: ChatCompletionStreamState = ChatCompletionStreamState(input_tools=TOOLS)  # type: ignore[arg-type]
    for frame in frames:
        if frame:
            list(state.handle_chunk(ChatCompletionChunk.model_validate_json(frame[len(b"data: ") : -2])))
    return state.get_final_completion() if final else state.current_completion_snapshot


def test_a_streamed_call_is_held_back_and_arrives_as_tool_calls():
    frames = stream(shape(), ['{"name": "get_', 'weather", "arguments": ', '{"city": "Oslo"}}'])
    assert frames[:-1] == [b"", b""]  # what may be a call is not content
    choice = accumulate(frames).choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert (call.type, call.function.name, json.loads(call.function.arguments)) == (
        "function",
        "get_weather",
        {"city": "Oslo"},
    )
    assert call.id.startswith("call_")


def test_streamed_plain_text_passes_at_once():
    frames = stream(shape(), ["It is", " mild in Oslo."])
    assert all(frames)  # nothing held: the first token goes out at once
    completion = accumulate(frames)
    assert completion.choices[0].message.content == "It is mild in Oslo."
    assert completion.choices[0].finish_reason == "stop"
    assert not completion.choices[0].message.tool_calls


def test_a_call_cut_short_comes_back_as_the_content_it_is():
    frames = stream(shape(), ['{"name": "get_weather", "argu'], finish="length")
    completion = accumulate(frames, final=False)
    assert completion.choices[0].message.content == '{"name": "get_weather", "argu'
    assert completion.choices[0].finish_reason == "length"


def test_held_logprobs_come_with_the_calls():
    s = shape(logprobs=True)
    frames = [
        s.sse_chunk(CALL[:5], None, [TokenLogprob("{", -0.1)]),
        s.sse_chunk(CALL[5:], "stop", [TokenLogprob("}", -0.2)]),
    ]
    chunk = ChatCompletionChunk.model_validate_json(frames[-1][len(b"data: ") : -2])
    assert [e.token for e in chunk.choices[0].logprobs.content or []] == ["{", "}"]  # type: ignore[union-attr]


def test_a_whole_response_has_the_same_calls():
    body = shape().full(CALL, openai_finish_reason("stop"), 10, 12)
    completion = ChatCompletion.model_validate(body)
    (call,) = completion.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Oslo"}
    assert completion.choices[0].finish_reason == "tool_calls"
    plain = ChatCompletion.model_validate(shape().full("Mild.", "stop", 10, 2))
    assert plain.choices[0].message.content == "Mild." and not plain.choices[0].message.tool_calls


def test_without_tools_a_json_answer_is_content():
    s = ResponseShape(id="chatcmpl-1", model="m", created=1, chat=True)
    assert s.sse_chunk(CALL, "stop")  # sent as it comes
    assert ChatCompletion.model_validate(s.full(CALL, "stop", 1, 1)).choices[0].message.content == CALL


# ---------------------------------------------------------------- the chain, on the fake TensorRT-LLM

FAKES = Path(__file__).parents[1] / "engines" / "fakes"


@pytest.fixture
def fake_trtllm(monkeypatch):
    for name in [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(FAKES))
    import tensorrt_llm

    yield tensorrt_llm
    for name in [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]:
        monkeypatch.delitem(sys.modules, name, raising=False)


async def test_a_required_call_from_the_request_to_the_sdk_contract(fake_trtllm, tmp_path):
    from engines.config import TRTLLMEngineConfig
    from engines.factory import make_engine
    from engines.protocol import GenerationRequest

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 4096}))
    engine = make_engine(
        TRTLLMEngineConfig(model=str(tmp_path), guided_decoding_backend="xgrammar", coalesce={"interval_ms": 0})
    )
    await engine.start()
    req = chat(tools=TOOLS, tool_choice="required")
    frames = []
    s = shape()
    s.tool_names = req.parsed_tool_names()
    async for delta in engine.generate(GenerationRequest("r1", [1, 2, 3], req.sampling(64))):
        frames.append(s.sse_chunk(delta.text, openai_finish_reason(delta.finish_reason)))
    await engine.shutdown()
    choice = accumulate(frames).choices[0]
    # The fake's guided "model" writes the smallest call the schema allows: get_weather with an empty city.
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": ""})
