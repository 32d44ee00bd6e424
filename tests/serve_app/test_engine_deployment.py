"""The engine deployment with its engine in its own process (engine_process: true): real Serve, real HTTP, the
official openai client, the real builtin model."""

from __future__ import annotations

import time

import httpx
import openai
import psutil
import pytest

pytestmark = pytest.mark.serve

APP, PREFIX, MODEL = "engine-process", "/engine-process", "proc-llama"


@pytest.fixture(scope="module")
def app_url(serve_url) -> str:
    from ray import serve

    from serve_app.app import build_app

    engine = {
        "backend": "hf",
        "model": "builtin:tiny",
        "device": "cpu",
        "max_running_requests": 4,
        "engine_process": True,
    }
    args = {
        "model_name": MODEL,
        "variants": [{"name": "proc", "engine": engine, "resources": {"num_cpus": 0.25}, "num_replicas": 1}],
        "ingress": {"num_cpus": 0.1},
    }
    serve.run(build_app(args), name=APP, route_prefix=PREFIX)
    yield f"{serve_url}{PREFIX}"
    serve.delete(APP)


def _variant(url: str) -> dict:
    return next(v for v in httpx.get(f"{url}/variants", timeout=30).json()["variants"] if v["name"] == "proc")


def test_the_replica_runs_its_engine_in_a_child_process(app_url):
    from ray import serve

    info = serve.get_deployment_handle("variant-proc", app_name=APP).info.remote().result(timeout_s=60)
    children = psutil.Process(info["pid"]).children()
    assert any("multiprocessing" in " ".join(c.cmdline()) for c in children), [c.cmdline() for c in children]


def test_streams_a_completion_through_the_openai_client(app_url):
    client = openai.OpenAI(base_url=f"{app_url}/v1", api_key="unused", max_retries=0, timeout=120)
    stream = client.completions.create(model=MODEL, prompt="Once upon", max_tokens=12, stream=True, temperature=0)
    chunks = list(stream)
    streamed = "".join(c.choices[0].text for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason in {"stop", "length"}
    full = client.completions.create(model=MODEL, prompt="Once upon", max_tokens=12, temperature=0)
    assert full.choices[0].text == streamed  # greedy: the same text either way


def test_a_disconnected_stream_is_aborted_in_the_engine_process(app_url):
    body = {"model": MODEL, "prompt": "Long story", "max_tokens": 900, "stream": True, "ignore_eos": True}
    with httpx.Client(base_url=app_url, timeout=60) as c, c.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        lines = r.iter_lines()  # kept: a discarded iterator would close the response, a disconnect too early
        next(line for line in lines if line.startswith("data: "))
        deadline = time.monotonic() + 30
        while _variant(app_url)["running_requests"] < 1:  # the board shows the stream running
            assert time.monotonic() < deadline, _variant(app_url)
            time.sleep(0.1)
    # The client is gone: the replica must abort the request inside the engine's process, and neither process
    # may keep anything of it (registered_requests counts both sides).
    deadline = time.monotonic() + 30
    while (
        (v := _variant(app_url))["running_requests"]
        or v["queued_requests"]
        or any(r["registered_requests"] for r in v["replica_stats"])
    ):
        assert time.monotonic() < deadline, v
        time.sleep(0.2)
