"""serve_app.choices without a protocol: a request's ``n`` choices over a real pipeline with a fake engine
(``fake_engine.py``), started together, merged with their index and ended together, each released exactly once.
The routes' own tests (test_routes.py, test_routes_grpc.py) check the same through HTTP and gRPC."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from core.errors import EngineDeadError
from serve_app import choices
from serve_app.choices import Choices
from serve_app.pipeline import Inbound, RequestFailed
from tests.serve_app.fake_engine import Harness, answer, harness


def _inbound(body: dict[str, Any], reads: list[int] | None = None) -> Inbound:
    async def read_body() -> Any:
        if reads is not None:
            reads.append(1)
        return body

    return Inbound(chat=False, authorization=None, slo_headers={}, read_body=read_body)


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": "local-llama", "prompt": "The river", "max_tokens": 8, **fields}


async def _start(h: Harness, body: dict[str, Any]) -> Choices:
    return await choices.start(h.pipeline, h.pipeline.flight("req-1"), _inbound(body))


async def _texts(started: Choices) -> dict[int, str]:
    texts: dict[int, str] = {}
    try:
        async for index, delta in started.deltas():
            texts[index] = texts.get(index, "") + delta.text
    finally:
        await started.close()
    return texts


def _released(h: Harness, statuses: dict[str, float], *, cancelled: bool) -> None:
    assert h.inflight() == 0
    assert h.metrics.requests_by_status() == statuses
    assert [s.cancelled for s in h.streams()] == [cancelled] * len(h.streams())


def _hold(h: Harness, request_id: str) -> None:
    """The engine stream of ``request_id`` never sends its second delta."""
    (stream,) = [s for s in h.streams() if s.request.request_id == request_id]
    stream.gate = asyncio.Event()


async def test_n_choices_are_engine_requests_of_their_own_from_one_body_read():
    h = harness(lambda r: answer(3))
    reads: list[int] = []
    # Greedy, since the default config's engines do not implement seed: what is checked is each request's seed.
    started = await choices.start(
        h.pipeline, h.pipeline.flight("req-1"), _inbound(_body(n=3, seed=5, temperature=0), reads)
    )
    assert len(started) == 3 and len(reads) == 1
    requests = sorted((s.request.request_id, s.request.sampling.seed) for s in h.streams())
    assert requests == [("req-1", 5), ("req-1-1", 6), ("req-1-2", 7)]  # a seed offset by the choice's index
    assert await _texts(started) == {0: "ababab", 1: "ababab", 2: "ababab"}
    usage = started.usage()
    assert (usage.prompt_tokens, usage.completion_tokens) == (started.firsts[0].prompt_tokens, 9)
    _released(h, {"200": 3}, cancelled=False)


async def test_one_choice_is_its_run_as_it_comes():
    h = harness(lambda r: answer(4, per_delta=2))
    started = await _start(h, _body())
    assert [(i, d.completion_tokens) async for i, d in started.deltas()] == [(0, 2), (0, 4)]
    await started.close()
    assert started.usage().completion_tokens == 4
    _released(h, {"200": 1}, cancelled=False)


async def test_a_choice_refused_before_its_first_delta_ends_every_choice_with_its_status():
    def script(request):
        return [EngineDeadError("The engine stopped.")] if request.request_id == "req-1-2" else answer(3)

    h = harness(script)
    with pytest.raises(RequestFailed) as failed:
        await _start(h, _body(n=3))
    assert failed.value.status == 503
    _released(h, {"503": 3}, cancelled=True)


async def test_a_choice_failing_mid_stream_ends_a_held_sibling_with_its_status():
    def script(request):
        return answer(4) if request.request_id == "req-1" else [*answer(4)[:2], EngineDeadError("The engine stopped.")]

    h = harness(script)
    started = await _start(h, _body(n=2))
    _hold(h, "req-1")
    with pytest.raises(RequestFailed) as failed:
        await _texts(started)
    assert failed.value.status == 503 and await started.fail(failed.value) is failed.value
    _released(h, {"503": 2}, cancelled=True)


@pytest.mark.parametrize("n", [1, 2])
async def test_a_route_error_while_holding_the_choices_ends_them_as_a_failure(n):
    h = harness(lambda r: answer(8))
    started = await _start(h, _body(n=n))
    failure = await started.fail(ValueError("a bug in the route"))
    assert failure.status == 500 and failure.body["error"]["code"] == "internal_error"
    await started.close()  # a route's finally: the choices stay as the failure ended them
    _released(h, {"500": n}, cancelled=True)


@pytest.mark.parametrize("n", [1, 2])
async def test_a_client_gone_mid_stream_releases_every_choice_as_cancelled(n):
    h = harness(lambda r: answer(8), gate=asyncio.Event())  # no second delta ever comes
    started = await _start(h, _body(n=n))
    reading = asyncio.ensure_future(_texts(started))
    await asyncio.sleep(0.01)
    reading.cancel()  # what Serve does to the route when its client goes away
    with pytest.raises(asyncio.CancelledError):
        await reading
    _released(h, {"499": n}, cancelled=True)


# --------------------------------------------------------------------------- batched prompts

KEY = "sk-test-1"


def _batch_inbound(body: dict[str, Any]) -> Inbound:
    async def read_body() -> Any:
        return body

    return Inbound(chat=False, authorization=f"Bearer {KEY}", slo_headers={}, read_body=read_body)


async def test_a_batch_is_n_choices_of_each_prompt_each_routed_with_its_own_prompt_and_usage_summed():
    h = harness(lambda r: answer(2))
    body = _body(prompt=[[5], [5, 6], [5, 6, 7]], n=2, seed=3, temperature=0)
    started = await choices.start(h.pipeline, h.pipeline.flight("req-1"), _inbound(body))
    assert (len(started), started.n) == (6, 2)
    sent = sorted((s.request.request_id, s.request.prompt_token_ids, s.request.sampling.seed) for s in h.streams())
    assert sent == [
        ("req-1", [5], 3),
        ("req-1-1", [5], 4),
        ("req-1-2", [5, 6], 3),
        ("req-1-3", [5, 6], 4),
        ("req-1-4", [5, 6, 7], 3),
        ("req-1-5", [5, 6, 7], 4),
    ]
    assert [f.prompt_tokens for f in started.flights] == [1, 1, 2, 2, 3, 3]
    assert await _texts(started) == dict.fromkeys(range(6), "abab")
    usage = started.usage()
    assert (usage.prompt_tokens, usage.completion_tokens) == (3 * 3, 6 * 2)  # answer() says 3 prompt tokens each
    _released(h, {"200": 6}, cancelled=False)


@pytest.mark.parametrize("failing", [None, "req-1", "req-1-3"])
async def test_every_stream_slot_of_a_batch_is_back_whichever_way_it_ends(failing):
    def script(request):
        return [EngineDeadError("The engine stopped.")] if request.request_id == failing else answer(2)

    h = harness(script, auth={"keys": [{"name": "team", "key": KEY, "max_concurrent_streams": 6}]})
    body = _body(prompt=["The river", "A cat", "Once"], n=2)
    try:
        await _texts(await choices.start(h.pipeline, h.pipeline.flight("req-1"), _batch_inbound(body)))
    except RequestFailed as failure:
        assert failing is not None and failure.status == 503
    assert h.streams_held() == {"team": 0} and h.inflight() == 0


async def test_a_batch_cancelled_at_any_point_of_its_start_gives_every_slot_back():
    for steps in range(0, 40, 3):  # the client goes away after this many turns of the loop
        h = harness(lambda r: answer(2), auth={"keys": [{"name": "team", "key": KEY, "max_concurrent_streams": 4}]})
        body = _body(prompt=["The river", "A cat"], n=2)
        starting = asyncio.ensure_future(choices.start(h.pipeline, h.pipeline.flight("req-1"), _batch_inbound(body)))
        for _ in range(steps):
            await asyncio.sleep(0)
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await (await starting).close()  # it had started every choice: the route's finally
        assert h.streams_held() == {"team": 0} and h.inflight() == 0, steps


async def test_a_seed_offset_past_int64_wraps_around_within_it():
    h = harness(lambda r: answer(1))
    started = await _start(h, _body(n=2, seed=2**63 - 1, temperature=0))
    await _texts(started)
    assert sorted(s.request.sampling.seed for s in h.streams()) == [-(2**63), 2**63 - 1]
