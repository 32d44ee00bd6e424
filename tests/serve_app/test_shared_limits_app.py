"""Two ingress replicas, one key: the key's limits hold for the endpoint, not per replica (serve_app/limiter.py).

Real Serve, real HTTP through Serve's proxy (which spreads requests over both ingress replicas), the emulated
engine (the engine is not what is under test). Without the shared ledger each replica would admit the key's
whole limit, twice it in all.
"""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.serve

PREFIX = "/shared-limits"
RATED, STREAMS = "sk-rated-0001", "sk-streams-0002"
REQUESTS_PER_MINUTE = 6


@pytest.fixture(scope="module")
def shared_url(serve_url) -> str:
    from ray import serve

    from serve_app.app import build_app

    # 10 tokens a second: a long stream stays in flight while the test asks for more.
    profile = {"step_ms_at_batch_1": 100.0}
    engine = {"backend": "emulated", "preset": "cpu-builtin-tiny", "profile": profile, "startup_time_scale": 0.0}
    args = {
        "model_name": "shared-llama",
        "tokenizer": "builtin:tiny",
        "variants": [{"name": "only", "engine": engine, "resources": {"num_cpus": 0.1}, "num_replicas": 1}],
        "ingress": {"num_cpus": 0.1, "num_replicas": 2},
        "auth": {
            "keys": [
                {"name": "rated", "key": RATED, "requests_per_minute": REQUESTS_PER_MINUTE},
                {"name": "streams", "key": STREAMS, "max_concurrent_streams": 1},
            ]
        },
    }
    serve.run(build_app(args), name="shared-limits", route_prefix=PREFIX)
    yield f"{serve_url}{PREFIX}"
    serve.delete("shared-limits")


def _holders(key: str) -> dict:
    from ray import serve

    return serve.get_deployment_handle("KeyLimiter", app_name="shared-limits").holders.remote(key).result()


def _post(url: str, key: str, **body) -> httpx.Response:
    payload = {"model": "shared-llama", "prompt": "Hi", "max_tokens": 2, **body}
    return httpx.post(f"{url}/v1/completions", json=payload, headers={"authorization": f"Bearer {key}"}, timeout=60)


def test_two_ingress_replicas_share_one_keys_request_limit(shared_url):
    statuses = [_post(shared_url, RATED).status_code for _ in range(3 * REQUESTS_PER_MINUTE)]
    assert sorted(statuses) == [200] * REQUESTS_PER_MINUTE + [429] * (2 * REQUESTS_PER_MINUTE), statuses
    # Both ingress replicas took part: each leased budget of this key from the ledger.
    assert len(_holders("rated")) == 2


def test_two_ingress_replicas_share_one_keys_stream_limit(shared_url):
    body = {"model": "shared-llama", "prompt": "Hi", "max_tokens": 1000, "stream": True, "ignore_eos": True}
    headers = {"authorization": f"Bearer {STREAMS}"}
    with httpx.stream("POST", f"{shared_url}/v1/completions", json=body, headers=headers, timeout=60) as first:
        assert first.status_code == 200
        lines = first.iter_lines()
        next(lines)
        # Whichever replica each lands on, the one stream in flight is the key's limit.
        refused = [_post(shared_url, STREAMS) for _ in range(4)]
        holders = _holders("streams")
        tail = [next(lines)[:80] for _ in range(3)]
    assert [r.status_code for r in refused] == [429] * 4, ([r.text[:200] for r in refused], holders, tail)
    assert all(r.json()["error"]["type"] == "rate_limit_error" and r.headers["retry-after"] for r in refused)
    # The slot is back once the stream is gone (given back by whichever replica held it).
    for _ in range(100):
        if (r := _post(shared_url, STREAMS)).status_code == 200:
            break
    assert r.status_code == 200, r.text
