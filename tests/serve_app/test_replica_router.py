"""Replica choice within a variant (serve_app/replica_router.py): the ranking logic on constructed replicas, and
the router loaded by a real Serve app that spreads one variant over two replicas."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import NamedTuple

import httpx
import pytest
from ray import serve
from ray.serve._private.request_router.request_router import RequestRouter

from engines.protocol import GenerationRequest, SamplingParams
from serve_app.app import build_app
from serve_app.config import VariantConfig
from serve_app.replica_router import CHOICE_STATE, IMPORT_PATH, LeastPrefillRequestRouter, replica_of


def _router(prefill_tokens_per_s: float) -> LeastPrefillRequestRouter:
    # Only the state our hooks use: Serve's own constructor wires event loops and long polls we do not exercise.
    router = object.__new__(LeastPrefillRequestRouter)
    router.initialize_state(prefill_tokens_per_s=prefill_tokens_per_s)
    return router


def _pending(request_id: str, prompt_tokens: int) -> SimpleNamespace:
    request = GenerationRequest(request_id, list(range(prompt_tokens)), SamplingParams())
    return SimpleNamespace(args=[request], kwargs={}, metadata=SimpleNamespace(internal_request_id=request_id))


def _ranked(router: LeastPrefillRequestRouter, replicas) -> list[str]:
    ranks = asyncio.run(router.choose_replicas(replicas))
    return [rank[0].replica_id for rank in ranks]


def test_a_replica_with_a_long_prompt_queued_is_ranked_after_one_with_short_ones():
    router = _router(prefill_tokens_per_s=1.0)  # slow enough that nothing drains during the test
    long_one, short_ones = SimpleNamespace(replica_id="a"), SimpleNamespace(replica_id="b")
    router.on_request_routed(_pending("r1", 5000), "a", None)
    for i in range(3):
        router.on_request_routed(_pending(f"s{i}", 10), "b", None)

    assert _ranked(router, [long_one, short_ones]) == ["b", "a"]

    router.on_request_completed("a", "r1")  # the long request ended: a has nothing queued now

    assert _ranked(router, [long_one, short_ones]) == ["a", "b"]


class _ReplicaID(NamedTuple):  # hashable, with a ReplicaID's unique_id
    unique_id: str


def test_a_replica_another_ingress_loaded_is_ranked_after_an_idle_one_once_the_board_shows_it():
    """Where this handle sent nothing, the replica's last report on the stats board (another ingress's long
    prompt) ranks it; the routing table hands the reports over (serve_app/routing.py: RoutingTable.refresh)."""
    router = _router(prefill_tokens_per_s=1.0)  # nothing drains during the test
    loaded, idle = SimpleNamespace(replica_id=_ReplicaID("loaded")), SimpleNamespace(replica_id=_ReplicaID("idle"))
    router.on_request_routed(_pending("mine", 10), _ReplicaID("idle"), None)  # this handle's only send
    assert _ranked(router, [idle, loaded]) == [_ReplicaID("loaded"), _ReplicaID("idle")]
    try:
        CHOICE_STATE.note_reports({"loaded": (5000, time.monotonic()), "idle": (0, time.monotonic() - 60.0)})

        assert _ranked(router, [loaded, idle]) == [_ReplicaID("idle"), _ReplicaID("loaded")]
    finally:
        CHOICE_STATE.note_reports({})


def test_the_replica_a_generate_call_went_to_is_named_once_by_its_request_id():
    router = _router(prefill_tokens_per_s=1.0)
    router.on_request_routed(_pending("g1", 10), _ReplicaID("replica-a"), None)
    router.on_request_routed(_pending("g2", 10), _ReplicaID("replica-b"), None)
    router.on_request_routed(_pending("g2", 10), _ReplicaID("replica-c"), None)  # sent once more

    assert (replica_of("g1"), replica_of("g2")) == ("replica-a", "replica-c")
    assert replica_of("g1") is None  # asked once
    assert replica_of("never-routed") is None


def test_calls_without_a_prompt_count_as_no_prefill_work():
    router = _router(prefill_tokens_per_s=1.0)
    router.on_request_routed(
        SimpleNamespace(args=[], kwargs={}, metadata=SimpleNamespace(internal_request_id="x")), "a", None
    )

    assert router._sent["a"]["x"][0] == 0


def _backing_off_router(monkeypatch: pytest.MonkeyPatch, replicas: list[str]) -> LeastPrefillRequestRouter:
    """A router whose routing tasks would sleep a minute between attempts, holding ``replicas``. Serve's own
    ``update_replicas`` (long-poll plumbing, queue-length probes) is replaced by its one effect our hook reads."""

    def serve_update(self, new):
        self._replicas = {r.replica_id: r for r in new}

    monkeypatch.setattr(RequestRouter, "update_replicas", serve_update)
    router = _router(prefill_tokens_per_s=1.0)
    router.initial_backoff_s, router.backoff_multiplier, router.max_backoff_s = 60.0, 2.0, 60.0
    router._lazily_fetched_loop = None
    router._replicas = {r: SimpleNamespace(replica_id=r) for r in replicas}
    return router


async def _backoff_after(router: LeastPrefillRequestRouter, replicas: list[str]) -> bool:
    """Whether a routing task sleeping in its backoff is up once the long poll has brought ``replicas``."""
    sleeping = asyncio.create_task(router._backoff(attempt=3))
    await asyncio.sleep(0)  # the task is now waiting
    router.update_replicas([SimpleNamespace(replica_id=r) for r in replicas])
    for _ in range(5):  # the wake-up is scheduled on the loop: a few turns of it, no wall-clock wait
        await asyncio.sleep(0)
    woken = sleeping.done()
    sleeping.cancel()
    return woken


def test_a_new_replica_wakes_the_routing_tasks_sleeping_in_their_backoff(monkeypatch):
    # Under a spike every replica is full and Serve's routing tasks sleep up to max_backoff_s between attempts; a
    # replica the autoscaler just started waited out those sleeps (0.13-0.43 s on the step) for its first request.
    router = _backing_off_router(monkeypatch, ["a"])

    assert asyncio.run(_backoff_after(router, ["a", "b"])) is True


def test_the_same_replicas_or_fewer_leave_the_backoff_alone(monkeypatch):
    # A router lives on one event loop: a fresh one for each case.
    assert asyncio.run(_backoff_after(_backing_off_router(monkeypatch, ["a", "b"]), ["a", "b"])) is False
    assert asyncio.run(_backoff_after(_backing_off_router(monkeypatch, ["a", "b"]), ["a"])) is False


def test_the_variant_config_selects_the_router_and_passes_its_prefill_rate(default_app_args):
    variant = VariantConfig.model_validate(
        {**default_app_args["variants"][0], "latency_profile": {"prefill_tokens_per_s": 1234.0}}
    )
    options = variant.deployment_options()
    assert options["request_router_config"] == {
        "request_router_class": IMPORT_PATH,
        "request_router_kwargs": {"prefill_tokens_per_s": 1234.0},
    }

    serve_default = variant.model_copy(update={"replica_choice": "power_of_two"}).deployment_options()
    assert "request_router_config" not in serve_default


@pytest.mark.serve
def test_a_variant_on_two_replicas_serves_through_the_router(serve_url, default_app_args):
    args = dict(default_app_args)
    tiny = {**args["variants"][0], "autoscaling": None, "num_replicas": 2, "resources": {"num_cpus": 0.25}}
    args["variants"] = [tiny]
    serve.run(build_app(args), name="replica-router", route_prefix="/replica-router")
    try:
        url = f"{serve_url}/replica-router/v1/completions"
        with httpx.Client(timeout=120) as client:
            bodies = [
                client.post(url, json={"model": "tiny", "prompt": "word " * n, "max_tokens": 4}).json()
                for n in (300, 5, 5, 5)
            ]
        assert all(b["object"] == "text_completion" and 1 <= b["usage"]["completion_tokens"] <= 4 for b in bodies), (
            bodies
        )
    finally:
        serve.delete("replica-router")
