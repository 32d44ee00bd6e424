"""An engine replica killed before its requests' first tokens: they go once more to the variant and succeed.

Real Serve, real HTTP, a real SIGKILL. The engine is the emulated one with a very slow prefill, so that requests
are certainly waiting for their first token when their replica dies (the point is the ingress, not the model).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.serve_app.emulated_pair import deploy_pair, replica_pids

pytestmark = pytest.mark.serve

APP = "failover"
PROMPT_TOKENS = [300] * 20  # 20 tokens at 8 a second: 2.5 s to the first token


@pytest.fixture(scope="module")
def failover_url(serve_url) -> Iterator[str]:
    from ray import serve

    yield deploy_pair(serve_url, APP, "failover-llama", {"prefill_tokens_per_s": 8.0})
    serve.delete(APP)


def _complete(url: str, out: list) -> None:
    body = {"model": "failover-llama", "prompt": PROMPT_TOKENS, "max_tokens": 4, "ignore_eos": True}
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=90)
    out.append((r.status_code, r.json()))


def test_requests_whose_replica_dies_before_their_first_token_are_served_by_another(failover_url):
    pids = replica_pids(APP)
    results: list = []
    threads = [threading.Thread(target=_complete, args=(failover_url, results)) for _ in range(6)]
    for t in threads:
        t.start()
    # Kill a replica that holds requests still prefilling (none of them has a token yet).
    deadline = time.monotonic() + 30
    victim = None
    while victim is None:
        assert time.monotonic() < deadline, "no replica showed running requests"
        stats = httpx.get(f"{failover_url}/variants", timeout=30).json()["variants"][0]["replica_stats"]
        busy = [s for s in stats if s["running_requests"] > 0 and s["replica"] in pids]
        victim = busy[0]["replica"] if busy else None
        time.sleep(0.1)
    os.kill(pids[victim], signal.SIGKILL)
    for t in threads:
        t.join(120)
        assert not t.is_alive()
    assert [status for status, _ in results] == [200] * 6, results
    assert all(body["usage"]["completion_tokens"] == 4 for _, body in results)
