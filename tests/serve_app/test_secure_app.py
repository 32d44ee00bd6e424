"""A second app on the shared cluster with API keys, per-key limits and a short request timeout; and a real
engine replica kill during streams. Real Serve, real HTTP, the real `small` builtin model."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx
import pytest

pytestmark = pytest.mark.serve

PREFIX = "/secure"
ADMIN, LIMITED, RATED = "sk-admin-0001", "sk-limited-0002", "sk-rated-0003"


@pytest.fixture(scope="module")
def secure_url(serve_url) -> str:
    from ray import serve

    from serve_app.app import build_app

    args = {
        "model_name": "secure-llama",
        "variants": [
            {
                "name": "only",
                "engine": {"backend": "hf", "model": "builtin:small", "device": "cpu", "max_running_requests": 8},
                "resources": {"num_cpus": 0.5},
                "num_replicas": 1,
                "health_check_period_s": 2,
            }
        ],
        "ingress": {"num_cpus": 0.1},
        "limits": {"request_timeout_s": 4, "default_max_tokens": 8},
        "auth": {
            "keys": [
                {"name": "ops", "key": ADMIN, "admin": True},
                {"name": "one-stream", "key": LIMITED, "max_concurrent_streams": 1},
                {"name": "slow-lane", "key": RATED, "requests_per_minute": 2},
            ]
        },
    }
    serve.run(build_app(args), name="secure", route_prefix=PREFIX)
    yield f"{serve_url}{PREFIX}"
    serve.delete("secure")


def _post(url, key=None, **body):
    headers = {"authorization": f"Bearer {key}"} if key else {}
    payload = {"model": "secure-llama", "prompt": "Hi", "max_tokens": 3, **body}
    return httpx.post(f"{url}/v1/completions", json=payload, headers=headers, timeout=60)


def test_requests_without_a_valid_key_get_401(secure_url):
    for key in (None, "sk-wrong"):
        r = _post(secure_url, key)
        assert r.status_code == 401
        assert r.json()["error"]["type"] == "authentication_error"
    assert httpx.get(f"{secure_url}/v1/models", timeout=30).status_code == 401


def test_a_valid_key_is_served_and_health_stays_open(secure_url):
    r = _post(secure_url, ADMIN)
    assert r.status_code == 200, r.text
    assert httpx.get(f"{secure_url}/health", timeout=30).status_code == 200
    models = httpx.get(f"{secure_url}/v1/models", headers={"authorization": f"Bearer {ADMIN}"}, timeout=30)
    assert models.status_code == 200


def test_variants_endpoint_needs_an_admin_key(secure_url):
    as_user = httpx.get(f"{secure_url}/variants", headers={"authorization": f"Bearer {LIMITED}"}, timeout=30)
    assert as_user.status_code == 403
    as_admin = httpx.get(f"{secure_url}/variants", headers={"authorization": f"Bearer {ADMIN}"}, timeout=30)
    assert as_admin.status_code == 200


def test_rate_limit_answers_429_with_retry_after(secure_url):
    statuses = [_post(secure_url, RATED) for _ in range(3)]
    assert [r.status_code for r in statuses[:2]] == [200, 200]
    assert statuses[2].status_code == 429
    assert int(statuses[2].headers["retry-after"]) >= 1
    assert statuses[2].json()["error"]["type"] == "rate_limit_error"


def test_concurrent_stream_limit_per_key(secure_url):
    body = {"model": "secure-llama", "prompt": "Hi", "max_tokens": 2000, "stream": True, "ignore_eos": True}
    headers = {"authorization": f"Bearer {LIMITED}"}
    with httpx.stream("POST", f"{secure_url}/v1/completions", json=body, headers=headers, timeout=60) as first:
        assert first.status_code == 200
        lines = first.iter_lines()
        opening = next(lines)
        second = _post(secure_url, LIMITED)
        assert second.status_code == 429, (opening[:300], [line[:200] for line in lines][-4:])
    # The slot comes back once the first stream is gone.
    deadline = time.monotonic() + 30
    while (r := _post(secure_url, LIMITED)).status_code == 429:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert r.status_code == 200


def test_a_request_past_the_time_limit_ends_with_an_error_event(secure_url):
    body = {"model": "secure-llama", "prompt": "Tell", "max_tokens": 2000, "stream": True, "ignore_eos": True}
    headers = {"authorization": f"Bearer {ADMIN}"}
    with httpx.stream("POST", f"{secure_url}/v1/completions", json=body, headers=headers, timeout=60) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == "timeout"


def _stream_until_end(url: str, out: list, started: threading.Event) -> None:
    body = {"model": "secure-llama", "prompt": "Story", "max_tokens": 300, "stream": True, "ignore_eos": True}
    headers = {"authorization": f"Bearer {ADMIN}"}
    try:
        with httpx.stream("POST", f"{url}/v1/completions", json=body, headers=headers, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    started.set()
                    out.append(line[6:])
    except httpx.HTTPError as e:  # a cut connection is a failure of this test, recorded as such
        out.append(f"transport error: {e!r}")


def test_killing_the_engine_replica_ends_streams_cleanly_and_service_recovers(secure_url):
    from ray import serve

    handle = serve.get_deployment_handle("variant-only", app_name="secure")
    pid = handle.info.remote().result()["pid"]
    streams = [([], threading.Event()) for _ in range(3)]
    threads = [threading.Thread(target=_stream_until_end, args=(secure_url, out, ev)) for out, ev in streams]
    for t in threads:
        t.start()
    for _, started in streams:
        assert started.wait(60)
    os.kill(pid, signal.SIGKILL)  # a real kill of the engine replica's process
    for t in threads:
        t.join(90)
        assert not t.is_alive()
    for out, _ in streams:
        assert out[-1] == "[DONE]", out[-3:]
        error = json.loads(out[-2])["error"]
        assert error["code"] == "engine_unavailable", error
    # Serve replaces the replica; requests succeed again (meanwhile 503 + Retry-After or a 504 at the time
    # limit: an answer within a bound, never a hang).
    deadline = time.monotonic() + 120
    while (r := _post(secure_url, ADMIN)).status_code != 200:
        assert r.status_code in {429, 503, 504}, r.text  # refused or timed out while it restarts: bounded
        assert time.monotonic() < deadline, r.text
        time.sleep(1)
