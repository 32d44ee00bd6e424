"""serve_app.pipeline without Ray: a request's life from its inbound to its deltas, and its one release.

Real config, tokenizer, routing table, key store and limits; a fake engine handle (``fake_engine.py``). Each test
checks how the request ended (``Pipeline.run`` returning, raising ``RequestFailed``, closed or cancelled) and that
it was released exactly so: the in-flight book back to zero, the key's slot free, the engine stream cancelled
for anything but a success, one ``requests`` count with the outcome's status.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import pytest

from core.errors import EngineDeadError
from engines.protocol import Delta
from router.explain import parse_candidates
from serve_app import replica_router
from serve_app.pipeline import CLIENT_CLOSED, Inbound, RequestFailed
from tests.serve_app.fake_engine import Harness, answer, harness

KEY = "sk-test-1"


def _inbound(body: dict[str, Any], *, chat: bool = False, key: str | None = None, **headers: str) -> Inbound:
    async def read_body() -> Any:
        return body

    return Inbound(
        chat=chat,
        authorization=f"Bearer {key}" if key else None,
        slo_headers=headers,
        read_body=read_body,
    )


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": "local-llama", "prompt": "The river", "max_tokens": 8, **fields}


async def _all(run: AsyncGenerator[Delta, None]) -> list[Delta]:
    async with aclosing(run):
        return [d async for d in run]


def _released(h: Harness, status: str, *, cancelled: bool) -> None:
    assert h.inflight() == 0
    assert h.metrics.requests_by_status() == {status: 1}
    assert [s.cancelled for s in h.streams()] == [cancelled] * len(h.streams())


async def test_a_request_streams_its_deltas_and_is_released_as_a_success():
    h = harness(lambda r: answer(6, per_delta=2))
    flight = h.pipeline.flight("req-1")
    run = h.pipeline.run(flight, _inbound(_body()))
    first = await anext(run)
    assert (first.completion_tokens, flight.request.max_tokens) == (2, 8)
    assert h.inflight() == 1  # held while it streams
    rest = await _all(run)
    assert [d.completion_tokens for d in rest] == [4, 6] and rest[-1].finish_reason == "length"
    assert flight.last is rest[-1]
    assert {"x-route-variant", "x-route-reason", "server-timing"} <= set(flight.headers)
    # Every candidate the decision weighed, the chosen one among them (router.explain).
    assert flight.headers["x-route-variant"] in parse_candidates(flight.headers["x-route-candidates"])
    _released(h, "200", cancelled=False)
    assert h.streams()[0].request.request_id == "req-1"


async def test_the_replica_our_request_router_chose_is_named_in_the_response():
    h = harness(lambda r: answer(2))
    named = h.pipeline.flight("req-named")
    # What LeastPrefillRequestRouter.on_request_routed notes when the handle sends the generate call.
    replica_router.CHOICE_STATE.note_served_by("req-named", "replica-7")
    await _all(h.pipeline.run(named, _inbound(_body())))
    assert named.headers["x-route-replica"] == "replica-7"
    assert "x-route-ingress" not in named.headers  # a pipeline not told its ingress's name
    unnamed = h.pipeline.flight("req-unnamed")  # Serve's own router chose (or none noted it): no header
    h.pipeline._ingress_id = "ingress-a"  # what the Ingress deployment passes: its Serve replica id
    await _all(h.pipeline.run(unnamed, _inbound(_body())))
    assert "x-route-replica" not in unnamed.headers
    assert unnamed.headers["x-route-ingress"] == "ingress-a"


async def test_the_first_token_and_the_close_reach_the_routing_tables_book():
    h = harness(lambda r: answer(3))
    flight = h.pipeline.flight("req-1")
    run = h.pipeline.run(flight, _inbound(_body()))
    await anext(run)
    assert flight.ticket is not None and flight.ticket.first_token_at is not None
    view = next(v for v in h.routing.views() if v.name == flight.variant)
    assert (view.inflight, view.unstarted_requests) == (1, 0)
    await _all(run)
    assert h.inflight() == 0


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (_body(max_tokens=0), "max_tokens"),
        (_body(temperature="hot"), "temperature"),
        ({"model": "local-llama"}, "prompt"),
    ],
)
async def test_a_bad_request_fails_before_the_engine_with_a_400_naming_the_field(body, param):
    h = harness()
    with pytest.raises(RequestFailed) as failed:
        await anext(h.pipeline.run(h.pipeline.flight("req-1"), _inbound(body)))
    assert failed.value.status == 400
    assert failed.value.body["error"]["param"] == param
    assert h.streams() == []
    assert h.metrics.requests_by_status() == {"400": 1}


async def test_an_unknown_model_is_a_404():
    h = harness()
    with pytest.raises(RequestFailed) as failed:
        await anext(h.pipeline.run(h.pipeline.flight("req-1"), _inbound(_body(model="gpt-9"))))
    assert failed.value.status == 404


def _keys(**limits: Any) -> dict:
    return {"keys": [{"name": "team", "key": KEY, **limits}]}


@pytest.mark.parametrize("key", [None, "sk-wrong"])
async def test_without_a_valid_key_a_request_is_a_401(key):
    h = harness(auth=_keys())
    with pytest.raises(RequestFailed) as failed:
        await anext(h.pipeline.run(h.pipeline.flight("req-1"), _inbound(_body(), key=key)))
    assert failed.value.status == 401
    assert h.streams() == []


async def test_a_key_over_its_streams_is_a_429_with_retry_after_and_its_slot_comes_back():
    h = harness(auth=_keys(max_concurrent_streams=1))
    first = h.pipeline.run(h.pipeline.flight("req-1"), _inbound(_body(), key=KEY))
    await anext(first)
    assert h.streams_held() == {"team": 1}
    with pytest.raises(RequestFailed) as failed:
        await anext(h.pipeline.run(h.pipeline.flight("req-2"), _inbound(_body(), key=KEY)))
    assert failed.value.status == 429
    assert int(failed.value.headers["Retry-After"]) >= 1
    await _all(first)
    assert h.streams_held() == {"team": 0}
    assert h.metrics.requests_by_status() == {"429": 1, "200": 1}


async def test_an_engine_error_after_the_first_token_fails_the_run_and_aborts_the_engine_request():
    h = harness(lambda r: [*answer(4)[:2], EngineDeadError("the engine stopped")])
    flight = h.pipeline.flight("req-1")
    run = h.pipeline.run(flight, _inbound(_body()))
    await anext(run)
    with pytest.raises(RequestFailed) as failed:
        await _all(run)
    assert failed.value.status == 503
    assert failed.value.body["error"]["code"] == "engine_unavailable"
    assert flight.last is not None and flight.last.completion_tokens == 2
    _released(h, "503", cancelled=True)


async def test_closing_the_run_midway_is_the_client_gone_it_aborts_the_engine_request():
    h = harness(lambda r: answer(8), auth=_keys(max_concurrent_streams=1))
    run = h.pipeline.run(h.pipeline.flight("req-1"), _inbound(_body(), key=KEY))
    await anext(run)
    await anext(run)
    await run.aclose()
    _released(h, str(CLIENT_CLOSED), cancelled=True)
    assert h.streams_held() == {"team": 0}
    assert sum(v for (name, _), v in h.metrics.counts.items() if name == "cancelled") == 1


async def test_cancelling_a_request_waiting_for_its_next_delta_releases_it():
    gate = asyncio.Event()  # never set: the engine's second delta never comes
    h = harness(lambda r: answer(8), gate=gate)
    run = h.pipeline.run(h.pipeline.flight("req-1"), _inbound(_body()))
    await anext(run)
    waiting = asyncio.ensure_future(anext(run))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    _released(h, str(CLIENT_CLOSED), cancelled=True)


async def test_a_request_past_its_time_limit_is_a_504():
    gate = asyncio.Event()
    limits = {"request_timeout_s": 0.05}
    h = harness(lambda r: answer(8), gate=gate, limits=limits)
    run = h.pipeline.run(h.pipeline.flight("req-1"), _inbound(_body()))
    await anext(run)
    with pytest.raises(RequestFailed) as failed:
        await _all(run)
    assert failed.value.status == 504
    _released(h, "504", cancelled=True)


async def test_a_sibling_failure_ends_a_held_request_with_its_status_not_as_cancelled():
    h = harness()
    flight = h.pipeline.flight("req-1-1")
    run = h.pipeline.run(flight, _inbound(_body()))
    await anext(run)
    flight.ended_by = RequestFailed(EngineDeadError("choice 0's engine stopped"))
    await run.aclose()
    _released(h, "503", cancelled=True)


async def test_a_replica_lost_before_the_first_token_is_sent_once_more():
    class ReplicaLost(Exception):
        pass

    tries: list[int] = []

    def script(request):
        tries.append(1)
        return [ReplicaLost()] if len(tries) == 1 else answer(2)

    h = harness(script)
    h.pipeline._replica_lost = (ReplicaLost,)
    deltas = await _all(h.pipeline.run(h.pipeline.flight("req-1"), _inbound(_body())))
    assert deltas[-1].completion_tokens == 2
    assert len(h.streams()) == 2 and h.streams()[0].cancelled
    assert h.metrics.requests_by_status() == {"200": 1}


async def test_chat_goes_through_the_template_and_the_prompt_is_counted():
    h = harness(lambda r: answer(2))
    flight = h.pipeline.flight("req-1")
    body = {"model": "local-llama", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 4}
    await _all(h.pipeline.run(flight, _inbound(body, chat=True)))
    assert flight.prompt_tokens == len(h.streams()[0].request.prompt_token_ids) > 0
