"""An engine replica killed while its streams are mid-way: each of them ends with an error event and
``data: [DONE]``, the streams on the other replica finish normally, and nothing hangs.

Real Serve, real HTTP, a real SIGKILL. The engine is the emulated one with a slow decode step, so that the streams
are certainly past their first token and far from their last when the replica dies.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.serve_app.emulated_pair import connect_channels, deploy_pair, replica_pids

pytestmark = pytest.mark.serve

APP = "failover-mid"
MAX_TOKENS = 60  # at 150 ms a step: 9 s a stream


@pytest.fixture(scope="module")
def mid_stream_url(serve_url) -> Iterator[str]:
    from ray import serve

    yield deploy_pair(serve_url, APP, "mid-llama", {"step_ms_at_batch_1": 150.0, "step_ms_per_extra_seq": 0.0})
    serve.delete(APP)


class _Stream:
    """One streamed completion read event by event: the data lines in order, and when its first token came."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.first_token = threading.Event()
        self.status: int | None = None

    def run(self, url: str) -> None:
        body = {"model": "mid-llama", "prompt": [300] * 8, "max_tokens": MAX_TOKENS, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=90) as r:
            self.status = r.status_code
            for line in r.iter_lines():
                if line.startswith("data: "):
                    self.events.append(line.removeprefix("data: "))
                    self.first_token.set()


def test_streams_on_a_replica_that_dies_end_with_an_error_event_and_done(mid_stream_url):
    pids = replica_pids(APP)
    connect_channels(mid_stream_url, APP, "mid-llama")  # the streams come on the delta channel, whose drop ends them
    streams = [_Stream() for _ in range(6)]
    threads = [threading.Thread(target=s.run, args=(mid_stream_url,)) for s in streams]
    for t in threads:
        t.start()
    for s in streams:
        assert s.first_token.wait(30), "a stream got no first token"
    # Every stream has its first token: kill a replica that is decoding some of them.
    stats = httpx.get(f"{mid_stream_url}/variants", timeout=30).json()["variants"][0]["replica_stats"]
    busy = [s["replica"] for s in stats if s["running_requests"] > 0 and s["replica"] in pids]
    assert busy, stats
    os.kill(pids[busy[0]], signal.SIGKILL)
    killed_at = time.monotonic()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a stream hung after its replica died"

    cut, finished = [], []
    for s in streams:
        assert s.status == 200
        assert s.events[-1] == "[DONE]", s.events[-3:]
        last = json.loads(s.events[-2])
        (cut if "error" in last else finished).append(last)
    assert cut, "no stream was on the killed replica"
    for error in cut:
        assert error["error"]["message"]  # an OpenAI-style error object, not a bare disconnect
    for chunk in finished:
        assert chunk["choices"][0]["finish_reason"] == "length"
    assert time.monotonic() - killed_at < 60
