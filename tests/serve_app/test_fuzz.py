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
