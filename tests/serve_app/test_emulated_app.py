"""configs/emulated-h200.yaml's fleet through the real stack: real Serve, real HTTP, the official openai client.

The engines are emulated (no model work, real token ids of the builtin tokenizer), so this is the serving layer
at GPU token rates; what is left out of the file's own deploy is its start-up delay and a replica per variant.
"""

from __future__ import annotations

import time

import httpx
import openai
import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.serve

PREFIX = "/emulated"


def fleet_args() -> dict:
    args = yaml.safe_load((REPO / "configs" / "emulated-h200.yaml").read_text())["applications"][0]["args"]
    for variant in args["variants"]:
        variant["engine"]["startup_time_scale"] = 0.0
        variant["autoscaling"]["initial_replicas"] = 1
    args["ingress"]["num_cpus"] = 0.1
    return args


@pytest.fixture(scope="module")
def fleet_url(serve_url) -> str:
    from ray import serve

    from serve_app.app import build_app

    serve.run(build_app(fleet_args()), name="emulated", route_prefix=PREFIX)
    yield f"{serve_url}{PREFIX}"
    serve.delete("emulated")


def _variant(url: str, name: str) -> dict:
    variants = httpx.get(f"{url}/variants", timeout=30).json()["variants"]
    return next(v for v in variants if v["name"] == name)


def test_the_openai_client_streams_chat_from_the_emulated_fleet(fleet_url):
    client = openai.OpenAI(base_url=f"{fleet_url}/v1", api_key="unused", max_retries=0, timeout=60)
    stream = client.chat.completions.create(
        model="llama-3.1",
        messages=[{"role": "user", "content": "今天天气很好"}],
        max_tokens=48,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert usage is not None and 0 < usage.completion_tokens <= 48
    assert text and "\ufffd" not in text
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish in (["stop"], ["length"])


def test_each_variant_serves_pinned_and_reports_its_profiles_limits(fleet_url):
    client = openai.OpenAI(base_url=f"{fleet_url}/v1", api_key="unused", max_retries=0, timeout=60)
    for name, slots in (("llama-8b-int4", 128), ("llama-70b-fp8", 96)):
        completion = client.completions.create(
            model=name, prompt="The lighthouse", max_tokens=16, extra_body={"ignore_eos": True}
        )
        assert completion.usage is not None and completion.usage.completion_tokens == 16
        assert completion.model == name
        stats = _variant(fleet_url, name)["replica_stats"][0]
        assert (stats["max_running_requests"], stats["context_length"]) == (slots, 32768)
        assert stats["kv_blocks_total"] > 0


def _channel_info(url: str, name: str) -> dict:
    """The variant's (one) replica's ``info()`` once the ingress's delta channel to it is connected: its first
    request from the ingress goes over Serve's stream and connects it, the next ones come on it."""
    from ray import serve

    info = serve.get_deployment_handle(f"variant-{name}", app_name="emulated").info
    httpx.post(f"{url}/v1/completions", json={"model": name, "prompt": "Warm", "max_tokens": 2}, timeout=60)
    deadline = time.monotonic() + 30
    while not (answer := info.remote().result(timeout_s=60))["delta_channels"]:
        assert time.monotonic() < deadline, "the ingress never connected its channel"
        time.sleep(0.1)
    return answer


def test_a_client_that_leaves_mid_stream_frees_the_emulated_engine(fleet_url):
    name = "llama-70b-fp8"  # ~12 ms a token: 8000 tokens outlast the test by a minute
    _channel_info(fleet_url, name)  # the stream comes on the delta channel: leaving must still cancel Serve's call
    body = {"model": name, "prompt": "Long story", "max_tokens": 8000, "stream": True, "ignore_eos": True}
    with httpx.Client(base_url=fleet_url, timeout=60) as http, http.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        next(line for line in lines if line.startswith("data: "))
        deadline = time.monotonic() + 30
        while _variant(fleet_url, name)["running_requests"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    deadline = time.monotonic() + 30
    while (stats := _variant(fleet_url, name)["replica_stats"][0])["registered_requests"] != 0:
        assert time.monotonic() < deadline, stats
        time.sleep(0.2)
    assert stats["kv_blocks_used"] == 0


def test_streams_come_on_the_ingress_channel_once_it_connects_each_with_its_own_exact_text(fleet_url):
    """The first request to an engine replica goes over Serve's stream and connects the ingress's delta channel;
    the next ones come on it, many at once over one connection, each with exactly its own text and usage."""
    from concurrent.futures import ThreadPoolExecutor

    name = "llama-8b-int4"
    client = openai.OpenAI(base_url=f"{fleet_url}/v1", api_key="unused", max_retries=0, timeout=60)
    before = _channel_info(fleet_url, name)
    assert len(before["delta_channels"]) == 1  # one ingress replica, one connection

    def stream_and_whole(seed: int) -> tuple[str, int, str]:
        ask = {"model": name, "prompt": "The lighthouse keeper", "max_tokens": 40 + seed, "seed": seed}
        extra = {"extra_body": {"ignore_eos": True}}
        chunks = list(client.completions.create(**ask, stream=True, stream_options={"include_usage": True}, **extra))
        usage = chunks[-1].usage
        assert usage is not None
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        return text, usage.completion_tokens, client.completions.create(**ask, **extra).choices[0].text

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(stream_and_whole, range(8)))
    for seed, (streamed, completion_tokens, whole) in enumerate(results):
        assert (streamed, completion_tokens) == (whole, 40 + seed)
    after = _channel_info(fleet_url, name)
    assert after["delta_channels"] == before["delta_channels"]
    assert after["delta_channel_deltas"] >= before["delta_channel_deltas"] + 8 * 2  # two streams each, at least


def test_several_tokens_a_message_still_give_the_openai_client_exact_text_and_usage(fleet_url):
    """The default stream interval packs several tokens into one SSE event; the SDK's text and usage stay exact."""
    client = openai.OpenAI(base_url=f"{fleet_url}/v1", api_key="unused", max_retries=0, timeout=60)
    ask = {"model": "llama-3.1", "prompt": "The lighthouse keeper", "max_tokens": 160, "seed": 11}
    whole = client.completions.create(**ask, extra_body={"ignore_eos": True})
    chunks = list(
        client.completions.create(
            **ask, stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True}
        )
    )
    events = [c for c in chunks if c.choices and c.choices[0].text]
    assert "".join(c.choices[0].text for c in events) == whole.choices[0].text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 160
    assert whole.usage is not None and whole.usage.completion_tokens == 160
    assert len(events) < 160  # several tokens to an event: one event per token would be the old per-token path
