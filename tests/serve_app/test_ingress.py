"""The served app end to end: the default serve_config.yaml on a real Ray Serve, real HTTP, real clients."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from serve_app.ingress import server_timing

pytestmark = pytest.mark.serve

MODEL = "local-llama"  # serve_config.yaml's public model name
# Two greedy answers are compared only from one variant: the router may send two requests for MODEL to different
# variants (tiny and small learned the same corpus, so their answers differ by a token or two, not wholly).
PINNED = "tiny"


@pytest.fixture(scope="module")
def client(llm_url) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{llm_url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def http(llm_url):
    with httpx.Client(base_url=llm_url, timeout=120) as c:
        yield c


def _sse_events(raw: str) -> list[str]:
    return [line[len("data: ") :] for line in raw.split("\n\n") if line.startswith("data: ")]


def test_curl_streams_completion_chunks(llm_url):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    body = json.dumps({"model": MODEL, "prompt": "The river", "max_tokens": 12, "stream": True, "ignore_eos": True})
    out = subprocess.run(
        ["curl", "-sN", "-H", "content-type: application/json", "-d", body, f"{llm_url}/v1/completions"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    events = _sse_events(out)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert "".join(c["choices"][0]["text"] for c in chunks)


def test_openai_completion_streaming_and_not(client):
    stream = client.completions.create(model=PINNED, prompt="Once upon", max_tokens=10, stream=True, temperature=0)
    chunks = list(stream)
    streamed = "".join(c.choices[0].text for c in chunks if c.choices)
    full = client.completions.create(model=PINNED, prompt="Once upon", max_tokens=10, temperature=0)
    assert full.choices[0].text == streamed  # greedy: the same text either way
    assert full.usage is not None and full.usage.completion_tokens <= 10


def test_echo_sends_the_prompt_back_before_the_completion(client):
    full = client.completions.create(model=PINNED, prompt="Once upon", max_tokens=6, temperature=0, echo=True)
    plain = client.completions.create(model=PINNED, prompt="Once upon", max_tokens=6, temperature=0)
    assert full.choices[0].text == "Once upon" + plain.choices[0].text
    assert full.usage is not None and full.usage.completion_tokens == plain.usage.completion_tokens  # type: ignore[union-attr]
    stream = client.completions.create(
        model=PINNED, prompt="Once upon", max_tokens=6, temperature=0, echo=True, stream=True
    )
    chunks = [c.choices[0].text for c in stream if c.choices]
    assert chunks[0] == "Once upon" and "".join(chunks) == full.choices[0].text


def test_n_choices_each_a_whole_answer_streamed_or_not(client):
    full = client.completions.create(
        model=MODEL, prompt="Once upon", max_tokens=5, temperature=0, n=3, extra_body={"ignore_eos": True}
    )
    assert [c.index for c in full.choices] == [0, 1, 2] and all(c.text for c in full.choices)
    assert full.usage is not None and full.usage.completion_tokens == 3 * 5  # every choice's tokens
    one = client.completions.create(model=MODEL, prompt="Once upon", max_tokens=1)
    assert one.usage is not None and full.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt counts once
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Say hello"}],
        max_tokens=6,
        n=2,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    texts: dict[int, str] = {0: "", 1: ""}
    roles, finished, usage = [], [], None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            roles += [choice.index] if choice.delta.role else []
            finished += [choice.index] if choice.finish_reason else []
    assert sorted(roles) == [0, 1] and sorted(finished) == [0, 1]  # each choice: its role once, its finish once
    assert texts[0] and texts[1]
    assert usage is not None and usage.completion_tokens == 2 * 6


def test_the_openai_client_batches_prompts_n_choices_each_streamed_or_not(client):
    prompts = ["Once upon", "The river", "A small cat sat"]
    fields = {"model": PINNED, "max_tokens": 5, "temperature": 0, "extra_body": {"ignore_eos": True}}
    alone = [client.completions.create(prompt=p, **fields) for p in prompts]  # greedy: each prompt's one answer
    whole = client.completions.create(prompt=prompts, n=2, **fields)
    streamed: dict[int, str] = {}
    usage = None
    for chunk in client.completions.create(
        prompt=prompts, n=2, stream=True, stream_options={"include_usage": True}, **fields
    ):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            streamed[choice.index] = streamed.get(choice.index, "") + choice.text
    # Choice j of prompt i at index i * n + j, as OpenAI indexes a batch.
    expected = {i * 2 + j: alone[i].choices[0].text for i in range(3) for j in range(2)}
    assert [c.index for c in whole.choices] == list(range(6))
    assert {c.index: c.text for c in whole.choices} == expected == streamed
    prompt_tokens = sum(a.usage.prompt_tokens for a in alone if a.usage is not None)
    assert whole.usage is not None and usage is not None
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (prompt_tokens, 6 * 5)
    assert (usage.prompt_tokens, usage.completion_tokens) == (prompt_tokens, 6 * 5)


def test_openai_chat_streaming_with_usage_and_not(client):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]
    stream = client.chat.completions.create(
        model=PINNED,
        messages=messages,
        max_tokens=12,
        stream=True,
        temperature=0,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    full = client.chat.completions.create(model=PINNED, messages=messages, max_tokens=12, temperature=0)
    assert full.choices[0].message.content == text
    assert full.usage.prompt_tokens == chunks[-1].usage.prompt_tokens


def test_chinese_prompt_streams_clean(client):
    stream = client.completions.create(
        model=MODEL, prompt="今天天气很好，我们", max_tokens=40, stream=True, temperature=0
    )
    pieces = [c.choices[0].text for c in stream if c.choices]
    assert pieces
    assert all("\ufffd" not in p for p in pieces), pieces


def test_models_lists_public_model_and_variants(client, default_app_args):
    ids = {m.id for m in client.models.list()}
    assert MODEL in ids
    assert {v["name"] for v in default_app_args["variants"]} <= ids


def test_pinned_variant_and_request_id_round_trip(http, default_app_args):
    pinned = default_app_args["variants"][-1]["name"]
    r = http.post(
        "/v1/completions",
        json={"model": pinned, "prompt": "Hi", "max_tokens": 3},
        headers={"x-request-id": "test-id-123"},
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-route-variant"] == pinned
    assert r.headers["x-route-reason"] == "pinned"
    assert r.headers["x-request-id"] == "test-id-123"
    assert r.json()["model"] == pinned


def _variant(http, name: str) -> dict:
    return next(v for v in http.get("/variants").json()["variants"] if v["name"] == name)


def _disconnect_mid_stream_and_wait_for_the_engine_to_drop_it(url: str, name: str) -> None:
    body = {"model": name, "prompt": "Long story", "max_tokens": 2000, "stream": True, "ignore_eos": True}
    with httpx.Client(base_url=url, timeout=60) as http:
        with http.stream("POST", "/v1/completions", json=body) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            next(line for line in lines if line.startswith("data: "))
            deadline = time.monotonic() + 30
            while _variant(http, name)["running_requests"] < 1:  # the board shows the stream running
                assert time.monotonic() < deadline, _variant(http, name)
                time.sleep(0.1)
        # The client is gone: the engine must drop the request.
        deadline = time.monotonic() + 30
        while (v := _variant(http, name))["running_requests"] or v["queued_requests"]:
            assert time.monotonic() < deadline, v
            time.sleep(0.2)


def test_disconnect_mid_stream_frees_the_engine(llm_url, default_app_args):
    _disconnect_mid_stream_and_wait_for_the_engine_to_drop_it(llm_url, default_app_args["variants"][-1]["name"])


# --- the engine streams over Ray objects or Serve's per-request gRPC (ingress.engine_transport: ray / grpc) instead of
# the delta channel, the default ------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["ray", "grpc"])
def transport_app(serve_url, request) -> Iterator[tuple[str, str]]:
    """(URL, variant) of an app whose ingress uses ``request.param``'s transport."""
    from ray import serve

    from serve_app.app import build_app

    transport = request.param
    variant = f"small-over-{transport}"
    args = {
        "model_name": f"{transport}-transport-llama",
        "variants": [
            {
                "name": variant,  # builtin:small: its context outlasts the disconnect test's 2000 tokens
                "engine": {"backend": "hf", "model": "builtin:small", "device": "cpu", "max_running_requests": 4},
                "resources": {"num_cpus": 0.25},
                "num_replicas": 1,
            }
        ],
        "ingress": {"num_cpus": 0.1, "engine_transport": transport},
    }
    serve.run(build_app(args), name=f"{transport}-transport", route_prefix=f"/{transport}-transport")
    yield f"{serve_url}/{transport}-transport", variant
    serve.delete(f"{transport}-transport")


def test_other_transports_stream_and_answer_whole_without_a_channel(transport_app):
    from ray import serve

    url, variant = transport_app
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
    request = {"model": variant, "prompt": "Once upon", "max_tokens": 10, "temperature": 0}
    for _ in range(2):  # the second would come on a channel, had the ingress asked for one
        chunks = list(client.completions.create(stream=True, **request))
    streamed = "".join(c.choices[0].text for c in chunks if c.choices)
    full = client.completions.create(**request)
    assert streamed and full.choices[0].text == streamed  # greedy: the same text either way
    assert chunks[-1].choices[0].finish_reason == full.choices[0].finish_reason
    app = url.rsplit("/", 1)[1]
    info = serve.get_deployment_handle(f"variant-{variant}", app_name=app).info.remote().result(timeout_s=60)
    assert info["delta_channels"] == []


def test_other_transports_disconnect_mid_stream_frees_the_engine(transport_app):
    _disconnect_mid_stream_and_wait_for_the_engine_to_drop_it(*transport_app)


def test_variants_reports_replicas_and_stats(http, default_app_args):
    data = http.get("/variants").json()
    assert data["model"] == MODEL
    names = [v["name"] for v in data["variants"]]
    assert names == [v["name"] for v in default_app_args["variants"]]
    for v in data["variants"]:
        assert v["replicas"] >= 1
        assert v["replica_stats"][0]["kv_blocks_total"] > 0


def test_variants_shows_the_pace_and_context_of_a_running_stream(llm_url):
    # The figures the router floors its TPOT at and counts context from, through the engine replica's stats
    # posts and the board, while a stream decodes (the client leaving then aborts it in the engine).
    # small at ~240 tokens/s: 2000 tokens outlast the polling by seconds.
    body = {"model": "small", "prompt": "The river", "max_tokens": 2000, "stream": True, "ignore_eos": True}
    with (
        httpx.Client(base_url=llm_url, timeout=60) as http_client,
        http_client.stream("POST", "/v1/completions", json=body) as r,
    ):
        assert r.status_code == 200
        lines = r.iter_lines()
        for _ in range(3):
            next(line for line in lines if line.startswith("data: "))
        deadline = time.monotonic() + 30
        while True:
            stats = _variant(http_client, "small")["replica_stats"][0]
            if stats["recent_tpot_ms"] > 0 and stats["context_tokens"] > 0:
                break
            assert time.monotonic() < deadline, stats
            time.sleep(0.1)
    assert stats["recent_decode_batch"] > 0


def test_health(http):
    assert http.get("/health").json() == {"status": "ok"}


BAD_REQUESTS = [
    ("malformed json", b"{not json", 400, None),
    ("not an object", b"[1, 2]", 400, None),
    ("missing prompt", {"model": MODEL}, 400, "prompt"),
    ("missing model", {"prompt": "x"}, 400, "model"),
    ("wrong type", {"model": MODEL, "prompt": "x", "max_tokens": "many"}, 400, "max_tokens"),
    ("max_tokens zero", {"model": MODEL, "prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ("max_tokens over limit", {"model": MODEL, "prompt": "x", "max_tokens": 10**6}, 400, "max_tokens"),
    ("temperature out of range", {"model": MODEL, "prompt": "x", "temperature": 3.5}, 400, "temperature"),
    ("top_p out of range", {"model": MODEL, "prompt": "x", "top_p": 0}, 400, "top_p"),
    ("unknown model", {"model": "gpt-17", "prompt": "x"}, 404, "model"),
    ("token id outside vocab", {"model": MODEL, "prompt": [10**9]}, 400, "prompt"),
    ("empty token prompt", {"model": MODEL, "prompt": []}, 400, "prompt"),
    ("lone surrogate", b'{"model": "local-llama", "prompt": "a\\ud800b"}', 400, "prompt"),
]

BAD_CHATS = [
    ("lone surrogate", [{"role": "user", "content": "a\ud800"}], "messages[0].content"),
    (
        "tool message the template cannot render",
        [{"role": "user", "content": "hi"}, {"role": "tool", "content": "42", "tool_call_id": "c1"}],
        "messages[1]",
    ),
]


@pytest.mark.parametrize(("case", "messages", "param"), BAD_CHATS, ids=[c[0] for c in BAD_CHATS])
def test_chat_messages_a_template_or_tokenizer_cannot_take_get_a_400_naming_them(http, case, messages, param):
    body = json.dumps({"model": MODEL, "messages": messages}).encode()  # json.dumps keeps "\ud800" escaped
    r = http.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_a_developer_message_is_the_system_prompt(client):
    chat = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "developer", "content": "Answer briefly."}, {"role": "user", "content": "Hello"}],
        max_tokens=4,
    )
    assert chat.choices[0].message.content is not None


@pytest.mark.parametrize(("case", "body", "status", "param"), BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS])
def test_bad_input_gets_openai_error(http, case, body, status, param):
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    r = http.post("/v1/completions", headers={"content-type": "application/json"}, **kwargs)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["message"] and err["type"]
    if param:
        assert err["param"] == param


def test_prompt_longer_than_every_context(http):
    r = http.post("/v1/completions", json={"model": MODEL, "prompt": [300] * 20000, "max_tokens": 1})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "context_length_exceeded"


def test_body_over_size_limit_gets_413(http, default_app_args):
    limit = default_app_args.get("limits", {}).get("max_body_bytes", 1 << 20)
    r = http.post("/v1/completions", json={"model": MODEL, "prompt": "x" * (limit + 10)})
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "payload_too_large"


def test_unknown_route_answers_openai_error(http):
    r = http.get("/v1/nothing-here")
    assert r.status_code == 404
    assert "error" in r.json()


def test_still_serving_after_bad_input(client):
    out = client.completions.create(model=MODEL, prompt="Still", max_tokens=4)
    assert out.choices[0].finish_reason in {"stop", "length"}


def test_bad_chat_request(http):
    r = http.post("/v1/chat/completions", json={"model": MODEL, "messages": []})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "messages"


def test_routed_request_says_where_it_went_and_why(http, default_app_args):
    r = http.post("/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 3})
    assert r.status_code == 200, r.text
    assert r.headers["x-route-variant"] in {v["name"] for v in default_app_args["variants"]}
    assert r.headers["x-route-reason"]
    assert r.headers["x-request-id"]  # Serve's id for the request, also in our logs
    # Where its time to first token went inside the ingress (W3C Server-Timing).
    timing = dict(part.split(";dur=") for part in r.headers["server-timing"].split(", "))
    assert set(timing) == {"ingress", "engine"}
    assert all(float(ms) >= 0 for ms in timing.values())


def test_server_timing_splits_the_start_at_dispatch():
    assert server_timing(10.0, 10.002, 10.0475) == "ingress;dur=2.0, engine;dur=45.5"


def test_unknown_slo_tier_is_a_bad_request(http):
    r = http.post(
        "/v1/completions",
        json={"model": MODEL, "prompt": "Hi", "max_tokens": 3},
        headers={"x-slo-tier": "platinum"},
    )
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "x-slo-tier"


def test_an_unsupported_openai_field_is_refused_by_name_not_ignored(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=4,
            response_format={"type": "json_object"},
        )
    assert err.value.status_code == 400
    assert err.value.body["param"] == "response_format"  # type: ignore[index]


def test_openapi_describes_the_request_bodies_of_both_generation_routes(http):
    schema = http.get("/openapi.json").json()
    for path, model in (("/v1/completions", "CompletionRequest"), ("/v1/chat/completions", "ChatCompletionRequest")):
        body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{model}"}
    components = schema["components"]["schemas"]
    assert "prompt" in components["CompletionRequest"]["properties"]
    assert components["ChatCompletionRequest"]["properties"]["messages"]["items"] == {
        "$ref": "#/components/schemas/ChatMessage"
    }
