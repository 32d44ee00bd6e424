"""serve_app.http_routes in-process, without Ray: Starlette's TestClient (and the openai client over it) on the
routes over a real pipeline with a fake engine handle (``fake_engine.py``); a client that goes away midway is
driven at the ASGI level, since TestClient reads a whole response before returning it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import openai
import pytest
from starlette.testclient import TestClient

from core.errors import EngineDeadError
from engines.protocol import Delta, EngineStats, GenerationRequest
from serve_app.http_routes import HttpRoutes, standalone_app
from serve_app.stats_board import ReplicaReport
from tests.serve_app.fake_engine import Harness, answer, default_args, harness

KEY = "sk-test-1"
MODEL = "local-llama"


def _client(h: Harness, stats: dict | None = None) -> TestClient:
    async def variant_stats() -> dict:
        return stats or {}

    return TestClient(standalone_app(HttpRoutes(h.pipeline, variant_stats)), raise_server_exceptions=True)


def _events(text: str) -> list[str]:
    return [part[len("data: ") :] for part in text.split("\n\n") if part.startswith("data: ")]


def _keys(**limits: Any) -> dict:
    return {"keys": [{"name": "team", "key": KEY, **limits}]}


def _done(h: Harness, statuses: dict[str, float], *, cancelled: bool) -> None:
    assert h.inflight() == 0
    assert h.metrics.requests_by_status() == statuses
    assert all(s.cancelled == cancelled for s in h.streams())


def test_a_completion_streams_sse_chunks_usage_and_done():
    h = harness(lambda r: answer(5, per_delta=2))
    with _client(h) as c:
        usage = {"include_usage": True}
        body = {"model": MODEL, "prompt": "Hi", "max_tokens": 5, "stream": True, "stream_options": usage}
        r = c.post("/v1/completions", json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-route-variant"] in ("tiny", "small") and "server-timing" in r.headers
    events = _events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    texts = [c["choices"][0]["text"] for c in chunks if c["choices"]]
    assert texts == ["abab", "abab", "ab"]  # the first delta at once, then one event per message
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    _done(h, {"200": 1}, cancelled=False)


def test_the_openai_client_reads_chat_streamed_and_whole():
    h = harness(lambda r: answer(4, per_delta=2))
    with _client(h) as c:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=c, max_retries=0)
        messages = [{"role": "user", "content": "Hello"}]
        stream = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, stream=True)
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4)
    assert streamed == whole.choices[0].message.content == "abababab"
    assert whole.usage is not None and whole.usage.completion_tokens == 4
    _done(h, {"200": 2}, cancelled=False)


def test_n_choices_stream_each_with_its_index():
    h = harness(lambda r: answer(3))
    with _client(h) as c:
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 3, "n": 2, "stream": True})
    chunks = [json.loads(e) for e in _events(r.text)[:-1]]
    by_index: dict[int, str] = {}
    for chunk in chunks:
        choice = chunk["choices"][0]
        by_index[choice["index"]] = by_index.get(choice["index"], "") + choice["text"]
    assert by_index == {0: "ababab", 1: "ababab"}
    _done(h, {"200": 2}, cancelled=False)


def test_n_choices_whole_or_streamed_count_the_prompt_once_and_every_choices_tokens():
    h = harness(lambda r: answer(3))
    with _client(h) as c:
        body = {"model": MODEL, "prompt": "Hi", "max_tokens": 3, "n": 2}
        whole = c.post("/v1/completions", json=body).json()
        streamed = c.post("/v1/completions", json={**body, "stream": True, "stream_options": {"include_usage": True}})
    assert [(x["index"], x["text"], x["finish_reason"]) for x in whole["choices"]] == [
        (0, "ababab", "length"),
        (1, "ababab", "length"),
    ]
    usage = {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}
    assert whole["usage"] == usage
    assert json.loads(_events(streamed.text)[-2])["usage"] == usage
    _done(h, {"200": 4}, cancelled=False)


@pytest.mark.parametrize(
    ("content", "status", "param"),
    [
        (b"{not json", 400, None),
        (json.dumps({"model": MODEL, "prompt": "Hi", "max_tokens": -1}).encode(), 400, "max_tokens"),
        (json.dumps({"model": MODEL, "prompt": "Hi", "n": 0}).encode(), 400, "n"),
        (json.dumps({"model": "gpt-9", "prompt": "Hi"}).encode(), 404, "model"),
        (json.dumps({"model": MODEL, "prompt": "x" * (2 << 20)}).encode(), 413, None),
    ],
)
def test_bad_requests_get_openai_errors_before_any_engine_work(content, status, param):
    h = harness()
    with _client(h) as c:
        r = c.post("/v1/completions", content=content, headers={"content-type": "application/json"})
    assert r.status_code == status
    assert r.json()["error"]["param"] == param
    assert h.streams() == []
    assert h.inflight() == 0


@pytest.mark.parametrize("authorization", [None, "Bearer sk-wrong", "Basic abc"])
def test_a_missing_or_wrong_key_is_a_401_on_generation_and_models(authorization):
    h = harness(auth=_keys())
    headers = {"authorization": authorization} if authorization else {}
    with _client(h) as c:
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": "Hi"}, headers=headers)
        models = c.get("/v1/models", headers=headers)
        ok = c.get("/v1/models", headers={"authorization": f"Bearer {KEY}"})
    assert (r.status_code, r.json()["error"]["type"]) == (401, "authentication_error")
    assert models.status_code == 401
    assert [m["id"] for m in ok.json()["data"]] == [MODEL, "tiny", "small"]
    assert h.streams() == []


def test_a_key_over_its_rate_is_a_429_with_retry_after():
    h = harness(auth=_keys(requests_per_minute=1))
    headers = {"authorization": f"Bearer {KEY}"}
    with _client(h) as c:
        first = c.post("/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 2}, headers=headers)
        second = c.post("/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 2}, headers=headers)
    assert first.status_code == 200
    assert (second.status_code, second.json()["error"]["type"]) == (429, "rate_limit_error")
    assert int(second.headers["retry-after"]) >= 1
    _done(h, {"200": 1, "429": 1}, cancelled=False)


def test_an_engine_error_mid_stream_is_an_error_event_then_done():
    h = harness(lambda r: [*answer(4)[:2], EngineDeadError("The engine stopped.")])
    with _client(h) as c:
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 4, "stream": True})
    assert r.status_code == 200  # the status went out with the first token
    events = _events(r.text)
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == "engine_unavailable"
    assert [json.loads(e)["choices"][0]["text"] for e in events[:-2]] == ["ab", "ab"]
    _done(h, {"503": 1}, cancelled=True)


def test_an_engine_error_mid_stream_of_n_choices_ends_every_choice_with_its_status():
    h = harness(lambda r: [*answer(4)[:2], EngineDeadError("The engine stopped.")])
    with _client(h) as c:
        body = {"model": MODEL, "prompt": "Hi", "max_tokens": 4, "n": 2, "stream": True}
        r = c.post("/v1/completions", json=body)
    events = _events(r.text)
    assert events[-1] == "[DONE]" and "error" in json.loads(events[-2])
    _done(h, {"503": 2}, cancelled=True)


def test_an_engine_error_in_a_whole_answer_is_its_http_error():
    h = harness(lambda r: [*answer(4)[:2], EngineDeadError("The engine stopped.")])
    with _client(h) as c:
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 4})
    assert r.status_code == 503 and r.json()["error"]["code"] == "engine_unavailable"
    _done(h, {"503": 1}, cancelled=True)


def _completion_scope() -> dict:
    """An ASGI scope of a POST to /v1/completions with the test key."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/completions",
        "raw_path": b"/v1/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"authorization", f"Bearer {KEY}".encode())],
        "client": ("127.0.0.1", 1234),
        "server": ("testserver", 80),
    }


async def _stream_then_disconnect(app: Any, body: dict) -> list[dict]:
    """Calls ``app`` as an ASGI server would, and disconnects once the first body chunk has arrived."""
    sent: list[dict] = []
    first_chunk = asyncio.Event()
    payload = json.dumps(body).encode()
    requested = False

    async def receive() -> dict:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": payload, "more_body": False}
        await first_chunk.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and message.get("body"):
            first_chunk.set()

    await asyncio.wait_for(app(_completion_scope(), receive, send), timeout=30)
    return sent


async def test_a_client_that_goes_away_mid_stream_aborts_the_engine_request_and_frees_its_slot():
    gate = asyncio.Event()  # never set: the engine's second delta never comes
    h = harness(lambda r: answer(8), gate=gate, auth=_keys(max_concurrent_streams=1))

    async def variant_stats() -> dict:
        return {}

    app = standalone_app(HttpRoutes(h.pipeline, variant_stats))
    sent = await _stream_then_disconnect(app, {"model": MODEL, "prompt": "Hi", "max_tokens": 8, "stream": True})
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert b'"text":"ab"' in sent[1]["body"]  # the first token went out at once
    _done(h, {"499": 1}, cancelled=True)
    assert h.streams_held() == {"team": 0}


async def test_a_streams_finishing_chunk_usage_and_done_leave_in_one_write():
    h = harness(lambda r: answer(5, per_delta=2))

    async def variant_stats() -> dict:
        return {}

    app = standalone_app(HttpRoutes(h.pipeline, variant_stats))
    sent: list[dict] = []
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}}
    payload, requested, finished = json.dumps(body).encode(), False, asyncio.Event()

    async def receive() -> dict:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": payload, "more_body": False}
        await finished.wait()  # the client stays until the response ends
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            finished.set()

    await asyncio.wait_for(app(_completion_scope(), receive, send), timeout=30)
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body" and m.get("body")]
    assert [len(_events(b.decode())) for b in bodies] == [1, 1, 3]  # the last: its chunk, the usage, [DONE]
    last = _events(bodies[-1].decode())
    assert json.loads(last[0])["choices"][0] == {"index": 0, "text": "ab", "finish_reason": "length", "logprobs": None}
    assert json.loads(last[1])["usage"]["completion_tokens"] == 5 and last[2] == "[DONE]"
    _done(h, {"200": 1}, cancelled=False)


def test_variants_and_health():
    h = harness(auth=_keys(admin=False))
    ready = EngineStats(running_requests=2, queued_requests=1, tokens_per_s=10.04, context_length=1024)
    report = ReplicaReport("tiny-1", 0.25, ready)
    starting = ReplicaReport("tiny-2", 1.0, EngineStats(starting_ready_in_s=6.0))  # its engine is still starting
    stats = {"tiny": [report, starting]}
    with _client(h, stats) as c:
        assert c.get("/health").json() == {"status": "ok"}
        assert c.get("/variants", headers={"authorization": f"Bearer {KEY}"}).status_code == 403
    h = harness()
    with _client(h, stats) as c:
        tiny = c.get("/variants").json()["variants"][0]
    assert (tiny["name"], tiny["replicas"], tiny["starting_replicas"]) == ("tiny", 1, 1)
    assert (tiny["running_requests"], tiny["tokens_per_s"]) == (2, 10.0)
    assert tiny["replica_stats"][0] == {"replica": "tiny-1", "age_s": 0.25, **dataclasses.asdict(report.stats)}
    assert tiny["replica_stats"][1]["starting_ready_in_s"] == 6.0


def test_an_unknown_route_answers_in_openais_error_shape():
    with _client(harness()) as c:
        r = c.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["type"] == "invalid_request_error"


def test_n_choices_over_the_keys_streams_are_one_429_before_any_engine_work():
    h = harness(lambda r: answer(3), auth=_keys(max_concurrent_streams=1))
    with _client(h) as c:
        body = {"model": MODEL, "prompt": "Hi", "max_tokens": 3, "n": 2, "stream": True}
        r = c.post("/v1/completions", json=body, headers={"authorization": f"Bearer {KEY}"})
    assert r.status_code == 429 and "retry-after" in r.headers
    assert "2 streams" in r.json()["error"]["message"]  # the whole request is admitted or refused at once
    assert h.streams() == []
    _done(h, {"429": 1}, cancelled=True)
    assert h.streams_held() == {"team": 0}


# --------------------------------------------------------------------------- batched prompts

BATCH = [[5], [5, 6], [5, 6, 7]]  # three token-id prompts of 1, 2 and 3 tokens


def _says_its_prompt(request: GenerationRequest) -> list[Delta]:
    """Two deltas whose text names the prompt they complete (its length) and the choice's seed."""
    size = len(request.prompt_token_ids)
    return [
        Delta(f"<{size}:{request.sampling.seed}>", [7], None, prompt_tokens=size, completion_tokens=1),
        Delta("!", [7], "length", prompt_tokens=size, completion_tokens=2),
    ]


def _whole_and_streamed(client: openai.OpenAI, **fields: Any) -> tuple[Any, dict[int, str]]:
    whole = client.completions.create(model=MODEL, max_tokens=2, **fields)
    streamed: dict[int, str] = {}
    for chunk in client.completions.create(model=MODEL, max_tokens=2, stream=True, **fields):
        for choice in chunk.choices:
            streamed[choice.index] = streamed.get(choice.index, "") + choice.text
    return whole, streamed


def test_the_openai_client_gets_n_choices_of_each_batched_prompt_indexed_prompt_by_prompt():
    h = harness(_says_its_prompt)
    with _client(h) as c:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=c, max_retries=0)
        # Greedy, since the default config's engines do not implement seed: what is checked is each request's seed.
        whole, streamed = _whole_and_streamed(client, prompt=BATCH, n=2, seed=10, temperature=0)
    # Choice j of prompt i at index i * n + j; the seed offset by j, the same for every prompt.
    expected = {i * 2 + j: f"<{len(p)}:{10 + j}>!" for i, p in enumerate(BATCH) for j in range(2)}
    assert {c.index: c.text for c in whole.choices} == expected == streamed
    assert [c.index for c in whole.choices] == list(range(6))
    assert whole.usage is not None
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (1 + 2 + 3, 6 * 2)  # each prompt once
    assert sorted(len(s.request.prompt_token_ids) for s in h.streams()) == [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]
    _done(h, {"200": 12}, cancelled=False)


def test_a_batch_of_texts_streams_usage_summed_and_echoes_each_prompt():
    h = harness(_says_its_prompt)
    usage = {"include_usage": True}
    body = {"model": MODEL, "prompt": ["Hi", "Hello there"], "max_tokens": 2, "echo": True, "stream_options": usage}
    with _client(h) as c:
        whole = c.post("/v1/completions", json=body).json()
        r = c.post("/v1/completions", json={**body, "stream": True})
    texts = [x["text"] for x in whole["choices"]]
    assert texts[0].startswith("Hi<") and texts[1].startswith("Hello there<")
    chunks = [json.loads(e) for e in _events(r.text)[:-1]]
    streamed: dict[int, str] = {}
    for chunk in chunks[:-1]:
        (choice,) = chunk["choices"]
        streamed[choice["index"]] = streamed.get(choice["index"], "") + choice["text"]
    assert streamed == dict(enumerate(texts))
    assert chunks[-1]["usage"] == whole["usage"]
    prompts = sorted(len(s.request.prompt_token_ids) for s in h.streams())
    assert whole["usage"]["prompt_tokens"] == sum(prompts) // 2  # each prompt once per response
    _done(h, {"200": 4}, cancelled=False)


@pytest.mark.parametrize(
    ("prompt", "limits", "needle"),
    [
        (BATCH, {"max_batch_prompts": 2}, "batches 3 prompts"),
        ([[5], [10**9], [5]], {}, "outside the vocabulary"),  # any prompt of the batch, before any engine work
        ([[5], []], {}, "empty"),
        (["Hi", [5]], {}, "Invalid value"),  # texts and token ids mixed: not one of OpenAI's forms
        ([[5], [5] * 40], {"max_prompt_tokens": 30}, "at most 30"),
    ],
)
def test_a_batch_is_refused_whole_naming_prompt_before_any_engine_work(prompt, limits, needle):
    h = harness(limits={**default_args()["limits"], **limits})
    with _client(h) as c:
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 2})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "prompt" and needle in r.json()["error"]["message"]
    assert h.streams() == []
    _done(h, {"400": 1}, cancelled=False)


def test_a_batch_is_charged_to_the_key_whole_and_refused_whole():
    # 3 prompts of 1-3 tokens, n=2, max_tokens 10: 6 + 3 * 2 * 10 = 66 tokens and 6 streams.
    body = {"model": MODEL, "prompt": BATCH, "n": 2, "max_tokens": 10}
    headers = {"authorization": f"Bearer {KEY}"}
    h = harness(_says_its_prompt, auth=_keys(tokens_per_minute=100, requests_per_minute=2, max_concurrent_streams=6))
    with _client(h) as c:
        first = c.post("/v1/completions", json=body, headers=headers)
        second = c.post("/v1/completions", json=body, headers=headers)  # 34 tokens left: refused whole
    assert first.status_code == 200 and len(first.json()["choices"]) == 6
    assert second.status_code == 429 and "tokens per minute" in second.json()["error"]["message"]
    assert len(h.streams()) == 6  # the first batch's; none of the second's reached an engine
    (principal,) = h.keys._by_digest.values()
    assert principal.requests is not None and principal.tokens is not None
    assert round(principal.requests.level) == 1  # a batch is one request, as OpenAI counts it
    assert round(principal.tokens.level) == 100 - 66
    _done(h, {"200": 6, "429": 1}, cancelled=False)
    assert h.streams_held() == {"team": 0}


def test_a_batch_prompt_no_variant_can_take_fails_the_batch_and_ends_its_other_choices():
    h = harness(_says_its_prompt)
    with _client(h) as c:
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": [[5], [5] * 5000], "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert h.inflight() == 0 and all(s.cancelled for s in h.streams())


# --------------------------------------------------------------------------- pathological bodies

DEEP = 5000


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b'{"model": "local-llama", "prompt": ' + b"[" * DEEP + b"]" * DEEP + b"}", "nests deeper"),
        (b'{"a": ' * DEEP + b"1" + b"}" * DEEP, "nests deeper"),
        (b'{"model": "local-llama", "prompt": "x", "x": ' + b"[" * 65 + b"]" * 65 + b"}", "nests deeper than 64"),
        (b'{"model": "local-llama", "prompt": "hi", "max_tokens": ' + b"9" * 5000 + b"}", "not valid JSON"),
        (b'{"model": "local-llama", "prompt": "hi", "temperature": NaN}', "NaN"),
        (b'{"model": "local-llama", "prompt": "hi", "top_p": -Infinity}', "Infinity"),
        (b'{"model": "local-llama", "prompt": "hi", "temperature": 1e999}', "beyond a double"),
        (b'{"model": "local-llama", "prompt": "\xff\xfe"}', "not valid JSON"),
        (b'{"model": "local-llama", "prompt": "hi", "seed": ' + b"9" * 30 + b"}", "seed"),
        (b'{"model": "local-llama", "prompt": "hi", "top_k": ' + b"9" * 30 + b"}", "top_k"),
        (b'{"model": "local-llama", "prompt": "hi", "priority": -' + b"9" * 400 + b"}", "priority"),
        (b'{"model": "local-llama", "prompt": "hi", "logit_bias": {"\xc2\xb2": 1}}', "logit_bias"),  # '²'
        (b'{"model": "local-llama", "prompt": "hi", "logit_bias": {"' + b"9" * 5000 + b'": 1}}', "logit_bias"),
    ],
    ids=lambda v: v[-40:].decode(errors="replace") if isinstance(v, bytes) else v,
)
def test_pathological_bodies_are_400s_naming_what_is_wrong(content, needle):
    h = harness()
    with TestClient(standalone_app(HttpRoutes(h.pipeline, _no_stats)), raise_server_exceptions=False) as c:
        r = c.post("/v1/completions", content=content, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]
    assert h.streams() == []


def test_a_key_sent_twice_keeps_its_last_value_and_json_may_be_utf16():
    h = harness()
    with _client(h) as c:
        twice = c.post("/v1/completions", content=b'{"model": "x", "model": "local-llama", "prompt": "Hi"}')
        utf16 = c.post("/v1/completions", content=json.dumps({"model": MODEL, "prompt": "Hi"}).encode("utf-16"))
    assert twice.status_code == utf16.status_code == 200


async def _no_stats() -> dict:
    return {}
