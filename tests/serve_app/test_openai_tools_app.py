"""Tools and structured output through real Serve, real HTTP and the openai client, on the engines that run here.

Neither hf (transformers) nor emulated has guided decoding, so ``response_format`` and a required tool call are
400s naming the field; tools under ``tool_choice: "auto"`` need only a chat template that renders them. The app
here pairs an hf variant with an ingress tokenizer whose template renders tools (the builtin model's own does not:
the default app refuses tools by name, last test). What guided decoding does with them is tested against the fake
TensorRT-LLM (tests/serve_app/test_openai_tools.py, tests/engines/test_trtllm*_contract.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

pytestmark = pytest.mark.serve

PREFIX = "/tools"
MODEL = "tools"
MESSAGES = [{"role": "user", "content": "What is the weather in Oslo?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city now.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
# The builtin template with a system turn listing the tools, as tool-calling templates do.
TOOLS_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- if tools -%}{{- '<|system|>You may call: ' -}}"
    "{%- for tool in tools -%}{{- tool['function']['name'] + ' ' + tool['function']['description'] -}}{%- endfor -%}"
    "{{- eos_token -}}{%- endif -%}"
    "{%- for message in messages -%}"
    "{{- '<|' + message['role'] + '|>' + message['content'] + eos_token -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- endif -%}"
)


def tools_tokenizer(directory: Path) -> str:
    """The builtin tiny model's tokenizer with TOOLS_TEMPLATE, saved where the ingress replica loads it."""
    from transformers import AutoTokenizer

    from engines.model_ref import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("builtin:tiny"))
    tokenizer.chat_template = TOOLS_TEMPLATE
    tokenizer.save_pretrained(directory)
    return str(directory)


@pytest.fixture(scope="module")
def tools_url(serve_url, tmp_path_factory) -> Iterator[str]:
    from ray import serve

    from serve_app.app import build_app

    args = {
        "model_name": MODEL,
        "tokenizer": tools_tokenizer(tmp_path_factory.mktemp("tokenizer")),
        "variants": [
            {
                "name": "hf-tools",
                "engine": {"backend": "hf", "model": "builtin:tiny", "device": "cpu", "max_running_requests": 4},
                "resources": {"num_cpus": 0.1},
                "num_replicas": 1,
            }
        ],
        "ingress": {"num_cpus": 0.1},
    }
    serve.run(build_app(args), name="tools", route_prefix=PREFIX)
    url = f"{serve_url}{PREFIX}"
    deadline = time.monotonic() + 120
    while not all(v["replicas"] for v in httpx.get(f"{url}/variants", timeout=30).json()["variants"]):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    yield url
    serve.delete("tools")


@pytest.fixture(scope="module")
def client(tools_url) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{tools_url}/v1", api_key="unused", max_retries=0, timeout=120)


def _chat(client: openai.OpenAI, **fields):
    return client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6, temperature=0, **fields)


def test_tools_under_auto_are_shown_to_the_model_and_answered(client):
    plain = _chat(client)
    with_tools = _chat(client, tools=TOOLS)  # tool_choice defaults to "auto"
    assert with_tools.usage.prompt_tokens > plain.usage.prompt_tokens  # the template rendered them
    choice = with_tools.choices[0]
    # The tiny model writes no call: its text is the content, as it would be without tools.
    assert choice.finish_reason in ("stop", "length") and choice.message.content
    assert not choice.message.tool_calls


def test_tools_under_auto_stream_like_the_openai_sdk_expects(client):
    fields = {"model": MODEL, "messages": MESSAGES, "max_tokens": 6, "temperature": 0, "tools": TOOLS}
    with client.chat.completions.stream(**fields) as stream:  # type: ignore[arg-type]
        for _ in stream:
            pass
        # The SDK's final completion refuses a 'length' finish; the snapshot is what it accumulated.
        completion = stream.current_completion_snapshot
    assert completion.choices[0].message.content == _chat(client, tools=TOOLS).choices[0].message.content


def test_tool_choice_none_hides_the_tools(client):
    assert _chat(client, tools=TOOLS, tool_choice="none").usage.prompt_tokens == _chat(client).usage.prompt_tokens


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": TOOLS, "tool_choice": "required"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "tool_choice"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}}}},
            "response_format",
        ),
    ],
)
def test_what_needs_guided_decoding_is_a_400_naming_the_field(client, fields, param):
    with pytest.raises(openai.BadRequestError) as err:
        _chat(client, **fields)
    assert err.value.body["param"] == param  # type: ignore[index]
    assert "not implemented" in err.value.message


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools.0.function.name"),
        ({"functions": [{"name": "f"}]}, "functions"),
    ],
)
def test_malformed_tools_are_400s_naming_the_field(client, fields, param):
    with pytest.raises(openai.BadRequestError) as err:
        _chat(client, **fields)
    assert err.value.body["param"] == param  # type: ignore[index]


def test_a_template_that_ignores_tools_refuses_them_by_name(llm_url):
    default = openai.OpenAI(base_url=f"{llm_url}/v1", api_key="unused", max_retries=0, timeout=120)
    with pytest.raises(openai.BadRequestError) as err:
        default.chat.completions.create(model="local-llama", messages=MESSAGES, max_tokens=4, tools=TOOLS)
    assert err.value.body["param"] == "tools"  # type: ignore[index]
    assert "does not render tools" in err.value.message
    answered = default.chat.completions.create(
        model="local-llama", messages=MESSAGES, max_tokens=4, tools=TOOLS, tool_choice="none"
    )
    assert answered.choices[0].message.content is not None


def test_best_of_is_refused_by_name_where_the_engine_cannot_rank(client):
    # hf returns no log probabilities to rank by (docs/openai-api.md): only trtllm implements best_of.
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=MODEL, prompt="Once", max_tokens=4, temperature=0.8, best_of=2)
    assert err.value.body["param"] == "best_of"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=MODEL, prompt="Once", max_tokens=4, best_of=2, stream=True)
    assert err.value.body["param"] == "best_of"  # type: ignore[index]
