"""Generated bad (and good) request bodies against the served routes: never a 5xx, errors always OpenAI-style.

Hypothesis builds bodies from the fields our routes know, with values of every JSON type, plus unknown
fields and non-object bodies. Outputs are kept short (max_tokens drawn small) so the run stays bounded.
"""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.serve

# No NaN or infinity: JSON has neither, and httpx refuses to encode them (the request would never be sent).
FINITE = st.floats(allow_nan=False, allow_infinity=False)
JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | FINITE | st.text(max_size=20)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)

SAMPLING = {
    "model": st.sampled_from(["local-llama", "tiny", "small", "nope", ""]) | JSON_VALUES,
    "max_tokens": st.integers(-5, 6) | JSON_VALUES,
    "temperature": st.floats(-1, 3, allow_nan=False) | JSON_VALUES,
    "top_p": st.floats(-0.5, 1.5, allow_nan=False) | JSON_VALUES,
    "top_k": st.integers(-3, 2000) | JSON_VALUES,
    "stop": st.lists(st.text(max_size=4), max_size=5) | JSON_VALUES,
    "stream": st.booleans() | JSON_VALUES,
    "n": st.integers(0, 3) | JSON_VALUES,
    "seed": st.integers() | JSON_VALUES,
    "stop_token_ids": st.lists(st.integers(-2, 2000), max_size=3) | JSON_VALUES,
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}) | JSON_VALUES,
    "unknown_field": JSON_VALUES,
}
PROMPTS = st.text(max_size=30) | st.lists(st.integers(-5, 5000), max_size=8) | JSON_VALUES
MESSAGES = (
    st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "system", "assistant", "robot"]) | JSON_VALUES, "content": PROMPTS}
        ),
        max_size=3,
    )
    | JSON_VALUES
)


def _body(extra: dict) -> st.SearchStrategy:
    fields = {**SAMPLING, **extra}
    return st.fixed_dictionaries({}, optional=fields)


def _check(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["message"], str) and error["message"]
        assert isinstance(error["type"], str)
        return
    if response.headers["content-type"].startswith("text/event-stream"):
        events = [line[6:] for line in response.text.split("\n\n") if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        for event in events[:-1]:
            assert "error" not in json.loads(event), event
    else:
        assert response.json()["choices"]


FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@FUZZ
@given(body=_body({"prompt": PROMPTS}))
def test_completions_never_5xx(llm_url, body):
    _check(httpx.post(f"{llm_url}/v1/completions", json=body, timeout=60))


@FUZZ
@given(body=_body({"messages": MESSAGES}))
def test_chat_completions_never_5xx(llm_url, body):
    _check(httpx.post(f"{llm_url}/v1/chat/completions", json=body, timeout=60))


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(raw=st.binary(max_size=64) | JSON_VALUES.map(lambda v: json.dumps(v).encode()))
def test_arbitrary_bodies_never_5xx(llm_url, raw):
    _check(
        httpx.post(f"{llm_url}/v1/completions", content=raw, headers={"content-type": "application/json"}, timeout=60)
    )


# --------------------------------------------------------------------------- Unicode and message structures

# What breaks text handling: lone surrogates (valid JSON escapes, no valid text), NUL and other controls, bidi
# overrides, zero-width joiners inside emoji sequences, combining marks, 4-byte characters, BOMs and noncharacters.
SPECIAL = [
    "\ud800",
    "\udfff",
    "\udbff\udfff",  # a surrogate pair in a Python str: two lone surrogates, not one character
    "\x00",
    "\x1b[31m",
    "\u202e",
    "\u2066",
    "\u200d",
    "\u200b",
    "\ufeff",
    "\uffff",
    "\U0001f469\u200d\U0001f469\u200d\U0001f467",
    "\U0001f600",
    "\U0010ffff",
    "e\u0301\u0301\u0301",
    "\r\n",
    "中文",
    "<|endoftext|>",
    "{{ raise_exception('x') }}",  # template syntax in content must stay text
]
UNICODE = st.lists(st.sampled_from(SPECIAL) | st.characters() | st.integers(0xD800, 0xDFFF).map(chr), max_size=12).map(
    "".join
)
CONTENT = (
    UNICODE
    | st.none()
    | st.lists(
        st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", "input_audio", ""]), "text": UNICODE})
        | st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": UNICODE})}),
        max_size=3,
    )
)
TOOL_CALL = st.fixed_dictionaries(
    {
        "id": UNICODE,
        "type": st.sampled_from(["function", "other"]),
        "function": st.fixed_dictionaries({"name": UNICODE, "arguments": UNICODE}),
    }
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]), "content": CONTENT},
    optional={"name": UNICODE, "tool_calls": st.lists(TOOL_CALL, max_size=2), "tool_call_id": UNICODE},
)
STOP = st.none() | UNICODE | st.lists(UNICODE, max_size=3)


def _post_raw(url: str, body: dict) -> httpx.Response:
    # json.dumps escapes non-ASCII (ensure_ascii), so lone surrogates travel as the JSON escapes a client would send;
    # httpx's own encoder would refuse to encode them as UTF-8 and never send the request.
    return httpx.post(url, content=json.dumps(body).encode(), headers={"content-type": "application/json"}, timeout=60)


UNICODE_FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@UNICODE_FUZZ
@given(messages=st.lists(MESSAGE, min_size=1, max_size=4), stop=STOP, stream=st.booleans())
def test_chat_messages_of_any_structure_and_text_never_5xx(llm_url, messages, stop, stream):
    body = {"model": "local-llama", "messages": messages, "max_tokens": 3, "stop": stop, "stream": stream}
    _check(_post_raw(f"{llm_url}/v1/chat/completions", body))


@UNICODE_FUZZ
@given(prompt=UNICODE | st.lists(UNICODE, min_size=1, max_size=2), stop=STOP, model=st.just("local-llama") | UNICODE)
def test_completion_text_of_any_unicode_never_5xx(llm_url, prompt, stop, model):
    body = {"model": model, "prompt": prompt, "max_tokens": 3, "stop": stop}
    _check(_post_raw(f"{llm_url}/v1/completions", body))


MB = 1_000_000  # a field of 1 MB fits the default body limit (1 MiB) with the rest of the body


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("completions", {"prompt": "a" * MB}),
        ("completions", {"prompt": "\U0001f600" * (MB // 4)}),  # 1 MB of 4-byte characters
        ("completions", {"prompt": "\u200d" * (MB // 3)}),
        ("completions", {"prompt": "hi", "stop": "s" * MB}),
        ("completions", {"prompt": "hi", "unknown": "x" * MB}),
        ("completions", {"prompt": "\\ud800" * (MB // 6)}),  # the escape itself as text: 6 bytes each
        ("completions", {"prompt": "hi", "model": "m" * MB}),
        ("chat/completions", {"messages": [{"role": "user", "content": "b" * MB}]}),
        ("chat/completions", {"messages": [{"role": "user", "content": "hi", "name": "n" * MB}]}),
        ("chat/completions", {"messages": [{"role": "user", "content": "\x00" * (MB // 6)}]}),  # \u0000 in JSON
        ("completions", {"prompt": "a" * (2 * MB)}),  # past the body limit: 413
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_megabyte_fields_never_5xx(llm_url, route, body):
    response = _post_raw(f"{llm_url}/v1/{route}", {"model": "local-llama", "max_tokens": 2, **body})
    _check(response)
