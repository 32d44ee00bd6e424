"""Tool calls: the schema of a required call, and reading a model's output back as calls or content."""

from __future__ import annotations

import json

import jsonschema
import pytest

from serve_app.tool_calls import Tool, call_schema, may_be_a_call, parse_calls

WEATHER = Tool.model_validate(
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
)
TIME = Tool.model_validate({"type": "function", "function": {"name": "get_time"}})
NAMES = frozenset({"get_weather", "get_time"})


def test_the_schema_of_a_required_call_accepts_exactly_the_calls_of_the_tools():
    schema = call_schema([WEATHER, TIME])
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"name": "get_weather", "arguments": {"city": "Oslo"}})
    assert validator.is_valid({"name": "get_time", "arguments": {}})
    assert not validator.is_valid({"name": "get_weather", "arguments": {}})  # its parameters' schema holds
    assert not validator.is_valid({"name": "get_mail", "arguments": {}})
    assert not validator.is_valid({"name": "get_time", "arguments": {}, "extra": 1})
    named = jsonschema.Draft202012Validator(call_schema([WEATHER, TIME], only="get_time"))
    assert named.is_valid({"name": "get_time", "arguments": {}})
    assert not named.is_valid({"name": "get_weather", "arguments": {"city": "Oslo"}})


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ('{"name": "get_weather", "arguments": {"city": "Oslo"}}', [("get_weather", {"city": "Oslo"})]),
        ('  {"name": "get_weather", "parameters": {"city": "Oslo"}}\n', [("get_weather", {"city": "Oslo"})]),  # Llama
        ('{"name": "get_time", "arguments": "{}"}', [("get_time", {})]),  # arguments as a JSON string
        (
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
            [("get_weather", {"city": "Oslo"}), ("get_time", {})],
        ),  # Hermes / Qwen, two calls
        ('<tool_call>{"name": "get_time", "arguments": {}}', [("get_time", {})]),  # stopped at EOS before the tag
        ('[{"name": "get_time", "arguments": {}}, {"name": "get_time", "arguments": {}}]', [("get_time", {})] * 2),
    ],
)
def test_an_output_of_calls_is_read_as_calls(text, calls):
    parsed = parse_calls(text, NAMES)
    assert parsed is not None
    assert [(c.name, json.loads(c.arguments)) for c in parsed] == calls
    assert len({c.id for c in parsed}) == len(parsed)


@pytest.mark.parametrize(
    "text",
    [
        "The weather in Oslo is mild.",
        '{"name": "get_mail", "arguments": {}}',  # not a declared tool
        '{"name": "get_weather", "arguments": [1]}',  # arguments not an object
        '{"name": "get_weather", "arguments": {"city": "Os',  # cut short (finish_reason length)
        'Sure! {"name": "get_time", "arguments": {}}',  # text before: content, streamed and whole alike
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call> and then some text',
        '{"answer": 42}',
        "",
    ],
)
def test_anything_else_is_content(text):
    assert parse_calls(text, NAMES) is None


@pytest.mark.parametrize(
    ("start", "verdict"),
    [("", None), ("  \n", None), ("<tool", None), ("<tool_call>", True), (" {", True), ("[", True), ("Hi", False)],
)
def test_the_start_of_an_output_tells_whether_it_may_be_a_call(start, verdict):
    assert may_be_a_call(start) is verdict
