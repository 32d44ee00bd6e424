"""Schema-driven fuzzing: schemathesis reads the live app's /openapi.json and sends what the schema allows (and,
in its negative mode, what it forbids) to every route: no response may be a 5xx, and every error is OpenAI's JSON.

The app is the default serve_config.yaml (the `llm_url` fixture). Bounded so that it stays a test, not a soak: a
fixed number of examples per route (derandomized, so a run repeats), and generated ``max_tokens`` capped at a few
tokens (the engine's speed is not what is under test; an absent ``max_tokens`` would take the server's default).
The number of requests sent is printed at the end of the session's report (``schemathesis: N requests ...``).
"""

from __future__ import annotations

from collections import Counter

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

pytestmark = pytest.mark.serve

EXAMPLES_PER_ROUTE = 80
MAX_TOKENS = 4  # the cap on generated max_tokens / max_completion_tokens (and what an absent one becomes)
MAX_BATCH = 2  # the cap on a generated batch of prompts

# Requests sent and their statuses, summed over the routes (reported by the module fixture below).
STATUSES: Counter[int] = Counter()


@pytest.fixture(scope="module")
def api_schema(llm_url):
    # Fetched here, not by schemathesis' loader: its 10 s read timeout is short for a replica's first request on a
    # busy 2-core machine (the document is built then).
    document = httpx.get(f"{llm_url}/openapi.json", timeout=120).raise_for_status().json()
    return schemathesis.openapi.from_dict(document)


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    if not STATUSES:
        return
    total = sum(STATUSES.values())
    server_errors = sum(n for status, n in STATUSES.items() if status >= 500)
    by_status = ", ".join(f"{status}: {n}" for status, n in sorted(STATUSES.items()))
    line = f"schemathesis: {total} requests, {server_errors} responses >= 500 ({by_status})"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # teardown output is captured otherwise, even under -s
            reporter.ensure_newline()
            reporter.write_line(line)


def _bounded(body: object) -> None:
    """Caps how long a generated request may generate for, leaving every other field as generated: a batch of
    prompts (each an engine request per choice) is cut to its first two."""
    if not isinstance(body, dict) or not isinstance(body.get("messages", body.get("prompt")), str | list):
        return
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        del prompt[MAX_BATCH:]
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if type(value) is int and value > MAX_TOKENS:
            body[name] = MAX_TOKENS
    if "max_tokens" not in body and "max_completion_tokens" not in body:
        body["max_tokens"] = MAX_TOKENS


def _openai_error_shape(ctx, response, case) -> None:
    """Every 4xx is OpenAI's error object, with a message a person can read."""
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["message"], str) and error["message"], error
        assert isinstance(error["type"], str), error
        assert "param" in error, error


# Every route of the app; a route missing from /openapi.json fails the test instead of being skipped.
ROUTES = [
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions"),
    ("GET", "/v1/models"),
    ("GET", "/variants"),
    ("GET", "/health"),
]


# Schemathesis' own pytest loader (schemathesis.pytest.from_fixture) does not run on pytest 9 (it sets a node's
# private _nodeid): the route's hypothesis strategy is driven directly instead, which is what that loader does.
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
@pytest.mark.parametrize(("method", "path"), ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_no_generated_request_gets_a_5xx(api_schema, llm_url, method, path, mode):
    operation = api_schema[path][method]
    if mode is GenerationMode.NEGATIVE and not operation.body:
        pytest.skip("nothing to violate: the route takes no body or parameters")

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES_PER_ROUTE, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    def fuzz(case):
        _bounded(case.body)
        response = case.call(base_url=llm_url, timeout=60)
        STATUSES[response.status_code] += 1
        case.validate_response(response, checks=[not_a_server_error, _openai_error_shape])

    fuzz()
