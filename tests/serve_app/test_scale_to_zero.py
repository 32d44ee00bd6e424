"""A variant scaled to zero beside a warm one: a request for it waits while Serve starts a replica (bounded by
the request timeout), and is served. Real Serve, real HTTP, the real builtin model."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.serve

PREFIX = "/zero"


@pytest.fixture(scope="module")
def zero_url(serve_url) -> str:
    from ray import serve

    from serve_app.app import build_app

    engine = {"backend": "hf", "model": "builtin:tiny", "device": "cpu", "max_running_requests": 4}
    args = {
        "model_name": "zero-llama",
        "variants": [
            {"name": "warm", "engine": engine, "resources": {"num_cpus": 0.25}, "num_replicas": 1},
            {
                "name": "cold",
                "engine": engine,
                "resources": {"num_cpus": 0.25},
                "autoscaling": {
                    "min_replicas": 0,
                    "max_replicas": 1,
                    "initial_replicas": 0,
                    "upscale_delay_s": 0,
                    "downscale_delay_s": 600,
                    "metrics_interval_s": 0.5,
                },
            },
        ],
        "ingress": {"num_cpus": 0.1},
        "limits": {"request_timeout_s": 120},
    }
    serve.run(build_app(args), name="zero", route_prefix=PREFIX)
    yield f"{serve_url}{PREFIX}"
    serve.delete("zero")


def test_a_request_for_a_variant_scaled_to_zero_starts_it_and_is_served(zero_url):
    before = {v["name"]: v["replicas"] for v in httpx.get(f"{zero_url}/variants", timeout=30).json()["variants"]}
    assert before["cold"] == 0
    r = httpx.post(
        f"{zero_url}/v1/completions",
        json={"model": "cold", "prompt": "Wake up", "max_tokens": 4},
        timeout=150,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-route-variant"] == "cold"
    assert r.json()["choices"][0]["text"] is not None
