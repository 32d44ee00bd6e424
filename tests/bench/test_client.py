"""One request, measured: exactly on a driven clock, and over real loopback HTTP."""

import httpx
import pytest

from bench.client import MonotonicClock, TargetConfig, _float_header, is_loopback, send_request, server_timing
from tests.bench.fake_openai import FIRST_DELAY_S, GAP_S, ManualClock, clocked_transport
from traffic.workload import RequestSpec, Slo


def spec(max_tokens=11, prompt=None, slo=None, cancel_after_chunks=None):
    prompt = [300, 301, 302] if prompt is None else prompt
    n = len(prompt) if isinstance(prompt, list) else len(prompt.split())
    return RequestSpec(
        index=0,
        send_at=None,
        prompt=prompt,
        prompt_tokens=n,
        max_tokens=max_tokens,
        slo=slo or Slo(),
        cancel_after_chunks=cancel_after_chunks,
    )


async def send(target, request, client, clock=None):
    clock = clock or MonotonicClock()
    now = clock.now()
    return await send_request(
        client, target, request, request_id="req-1", clock=clock, start=now, run_start=now, wall_start=1e9
    )


async def send_clocked(model="m", api="completions", **kw):
    clock = ManualClock()
    target = TargetConfig(url="http://127.0.0.1:9", model=model, api=api)
    async with httpx.AsyncClient(transport=clocked_transport(clock)) as client:
        return await send(target, spec(**kw), client, clock)


async def test_times_equal_the_servers_schedule_exactly():
    # First chunk after 200 ms, then 10 more 50 ms apart.
    r = await send_clocked(max_tokens=11, slo=Slo(ttft_ms=200, tpot_ms=50))
    assert r.ok
    assert r.status == 200
    assert r.ttft_s == pytest.approx(FIRST_DELAY_S, abs=1e-9)
    assert r.itl_s == pytest.approx([GAP_S] * 10, abs=1e-9)
    assert r.e2e_s == pytest.approx(FIRST_DELAY_S + 10 * GAP_S, abs=1e-9)
    assert r.tpot_s == pytest.approx(GAP_S, abs=1e-9)
    assert (r.output_tokens, r.chunks, r.prompt_tokens) == (11, 11, 3)
    assert (r.variant, r.server_request_id, r.request_id) == ("tiny", "srv-req-1", "req-1")
    assert (r.predicted_ttft_ms, r.predicted_tpot_ms) == (180.0, 52.5)  # the router's x-route-predicted-*
    assert (r.server_ingress_ms, r.server_engine_ms) == (1.5, 150.0)  # the ingress's server-timing
    assert r.slo_met  # exactly on both targets


async def test_chat_stream_is_measured_the_same_way():
    r = await send_clocked(api="chat", max_tokens=3, prompt="one two")
    assert r.ok
    assert r.ttft_s == pytest.approx(FIRST_DELAY_S, abs=1e-9)
    assert r.itl_s == pytest.approx([GAP_S] * 2, abs=1e-9)
    assert (r.output_tokens, r.prompt_tokens) == (3, 2)


async def test_missed_slo_is_recorded():
    r = await send_clocked(max_tokens=11, slo=Slo(ttft_ms=199))
    assert r.ok
    assert not r.slo_met


async def test_without_usage_output_tokens_are_counted_chunks():
    r = await send_clocked(model="no-usage", max_tokens=4)
    assert (r.output_tokens, r.chunks) == (4, 4)
    assert r.tpot_s == pytest.approx(GAP_S, abs=1e-9)


async def test_error_status_and_openai_error_type_are_kept():
    r = await send_clocked(model="overloaded")
    assert (r.status, r.error_type, r.error_message) == (429, "overloaded", "too many requests")
    assert not r.ok
    assert not r.slo_met
    assert r.ttft_s is None


async def test_error_without_openai_json_keeps_status_and_body():
    r = await send_clocked(model="plain-500")
    assert (r.status, r.error_type, r.error_message) == (500, "http_500", "boom")


async def test_error_event_in_the_stream_fails_the_request():
    r = await send_clocked(model="midstream", max_tokens=10)
    assert (r.status, r.error_type, r.error_message) == (200, "engine_error", "engine died")
    assert r.chunks == 2
    assert r.tpot_s is None
    assert not r.slo_met


async def test_done_is_recorded_when_the_stream_ends_with_it():
    assert (await send_clocked(max_tokens=3)).done
    assert not (await send_clocked(model="midstream", max_tokens=3)).done


async def test_a_stream_that_just_stops_is_not_done():
    def handle(request: httpx.Request) -> httpx.Response:
        chunk = b'data: {"choices": [{"index": 0, "text": "a"}]}\n\n'
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=chunk * 2)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        r = await send(TargetConfig(url="http://127.0.0.1:9", model="m"), spec(), client)
    assert r.ok  # no error was said; the caller decides whether a missing [DONE] is a failure
    assert (r.chunks, r.done) == (2, False)


async def test_a_cancelled_stream_is_abandoned_after_its_chunks_and_is_not_an_error():
    r = await send_clocked(max_tokens=11, cancel_after_chunks=3)
    assert r.ok
    assert (r.cancelled, r.done, r.chunks) == (True, False, 3)
    assert r.ttft_s == pytest.approx(FIRST_DELAY_S, abs=1e-9)


async def test_a_cancellation_past_the_end_of_the_stream_changes_nothing():
    r = await send_clocked(max_tokens=3, cancel_after_chunks=5)
    assert (r.cancelled, r.done, r.chunks) == (False, True, 3)


def target(server, model="m", **kw):
    return TargetConfig(url=server.url, model=model, **kw)


async def test_real_http_stream(fake_server):
    request = spec(max_tokens=5, slo=Slo(ttft_ms=900, tpot_ms=80))
    async with httpx.AsyncClient() as client:
        r = await send(target(fake_server, extra_body={"stop": []}), request, client)
    assert r.ok
    assert (r.status, r.output_tokens, r.chunks, r.variant) == (200, 5, 5, "tiny")
    # Causal bounds only: nothing can arrive before the server sent it.
    assert r.ttft_s >= FIRST_DELAY_S - 1e-3
    assert r.e2e_s >= FIRST_DELAY_S + 4 * GAP_S - 1e-3
    headers, body = fake_server.app.state.seen[-1]
    assert headers["x-request-id"] == "req-1"
    assert (headers["x-slo-ttft-ms"], headers["x-slo-tpot-ms"]) == ("900", "80")
    assert body == {
        "model": "m",
        "max_tokens": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
        "prompt": [300, 301, 302],
        "ignore_eos": True,
        "stop": [],
    }


async def test_real_http_429(fake_server):
    async with httpx.AsyncClient() as client:
        r = await send(target(fake_server, model="overloaded"), spec(), client)
    assert (r.status, r.error_type) == (429, "overloaded")


async def test_hard_timeout(fake_server):
    async with httpx.AsyncClient() as client:
        r = await send(target(fake_server, model="stall", request_timeout_s=0.3), spec(), client)
    assert r.status == 200  # headers came; the body never did
    assert r.error_type == "timeout"


async def test_connection_refused_has_no_status():
    async with httpx.AsyncClient() as client:
        r = await send(TargetConfig(url="http://127.0.0.1:1", model="m"), spec(), client)
    assert (r.status, r.error_type) == (None, "ConnectError")


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8000", True),
        ("http://127.8.9.1", True),
        ("http://localhost:8000/v1", True),
        ("http://[::1]:8000", True),
        ("http://10.0.0.5:8000", False),
        ("https://api.openai.com", False),
        ("http://localhost.example.com", False),
    ],
)
def test_is_loopback(url, loopback):
    assert is_loopback(url) is loopback


def test_remote_target_is_refused_unless_allowed():
    with pytest.raises(ValueError, match="not a loopback"):
        TargetConfig(url="http://10.0.0.5:8000", model="m")
    assert TargetConfig(url="http://10.0.0.5:8000", model="m", allow_remote=True).allow_remote


def test_endpoint_and_body():
    t = TargetConfig(url="http://localhost:8000/v1/", model="m", api="chat", ignore_eos=False, api_key="k")
    assert t.endpoint == "http://localhost:8000/v1/chat/completions"
    assert t.body(spec(prompt="hi there"))["messages"] == [{"role": "user", "content": "hi there"}]
    assert "ignore_eos" not in t.body(spec(prompt="hi"))
    assert t.headers(spec(slo=Slo(tier="gold")), "x")["authorization"] == "Bearer k"
    with pytest.raises(ValueError, match="text prompts"):
        t.body(spec())


@pytest.mark.parametrize(("value", "parsed"), [("180", 180.0), ("52.5", 52.5), (None, None), ("soon", None)])
def test_a_predicted_latency_header_that_is_absent_or_not_a_number_reads_as_none(value, parsed):
    assert _float_header(value) == parsed


def test_server_timing_reads_each_named_duration_and_skips_the_rest():
    header = 'ingress;dur=1.5, engine;desc="first token";dur=150, cache;desc=hit, broken;dur=soon'
    assert server_timing(header) == {"ingress": 1.5, "engine": 150.0}
    assert server_timing(None) == {}
