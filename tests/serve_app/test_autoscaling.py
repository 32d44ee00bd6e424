"""The autoscaling adapter and its config: Ray's context -> our policy, replica stats, drain timeouts, and a real
Serve app that scales up under a load step and back down without cutting a stream."""

from __future__ import annotations

import asyncio
import json
import time
import typing
from typing import Any

import httpx
import pytest
from ray import serve
from ray.serve import Deployment
from ray.serve._private.common import DeploymentID, ReplicaID
from ray.serve.config import AutoscalingConfig, AutoscalingContext

from engines.protocol import Delta, EngineStats
from router import serve_autoscaling
from router.serve_autoscaling import (
    POLICY_PATH,
    AutoscalingSpec,
    EngineLoadPolicy,
    engine_metrics,
    replica_load,
    scaling_context,
)
from serve_app.autoscaling import RecentLatency
from serve_app.config import DRAIN_MARGIN_S, load_app_config
from serve_app.ray_compat import autoscaling_context

DEPLOYMENT = DeploymentID(name="variant-tiny", app_name="llm")


def _replica(n: int) -> ReplicaID:
    return ReplicaID(unique_id=f"r{n}", deployment_id=DEPLOYMENT)


def _ray_context(metrics: dict[str, dict[ReplicaID, float]], running: int, **overrides: Any) -> AutoscalingContext:
    fields: dict[str, Any] = {
        "deployment_id": DEPLOYMENT,
        "deployment_name": DEPLOYMENT.name,
        "app_name": DEPLOYMENT.app_name,
        "current_num_replicas": running,
        "target_num_replicas": running,
        "running_replicas": [_replica(n) for n in range(running)],
        "total_num_requests": 0.0,
        "total_queued_requests": 0.0,
        "aggregated_metrics": metrics,
        "raw_metrics": {},
        "capacity_adjusted_min_replicas": 1,
        "capacity_adjusted_max_replicas": 4,
        "policy_state": {},
        "last_scale_up_time": None,
        "last_scale_down_time": None,
        "current_time": time.time(),
        "config": None,
    }
    return autoscaling_context(**{**fields, **overrides})  # 2.60's arguments, on either Ray


def _reported(*stats: EngineStats) -> dict[str, dict[ReplicaID, float]]:
    """What Serve hands the policy after each replica reported ``engine_metrics`` for its stats."""
    out: dict[str, dict[ReplicaID, float]] = {}
    for n, s in enumerate(stats):
        for name, value in engine_metrics(s, RecentLatency()).items():
            out.setdefault(name, {})[_replica(n)] = value
    return out


# --- the policy as Serve sees it ------------------------------------------------------------------


def test_the_engine_load_spec_hands_serve_our_policy_with_its_knobs():
    spec = AutoscalingSpec(min_replicas=1, max_replicas=3, target_batch_utilization=0.5, ttft_target_ms=400)
    config = AutoscalingConfig(**spec.to_serve_autoscaling_config())

    assert config.policy.policy_function == POLICY_PATH == "router.serve_autoscaling:EngineLoadPolicy"
    policy = config.policy.get_policy()(**config.policy.policy_kwargs)  # what Serve's controller does
    assert isinstance(policy, EngineLoadPolicy)
    assert (policy.targets.target_batch_utilization, policy.targets.ttft_target_ms) == (0.5, 400)


def test_engine_load_holds_the_upscale_delay_itself_and_serve_keeps_the_downscale_delay():
    spec = AutoscalingSpec(upscale_delay_s=5, downscale_delay_s=60, breaking_upscale_delay_s=0.5)
    config = AutoscalingConfig(**spec.to_serve_autoscaling_config())

    assert (config.upscale_delay_s, config.downscale_delay_s) == (0.0, 60)
    policy = config.policy.get_policy()(**config.policy.policy_kwargs)
    assert (policy.targets.upscale_delay_s, policy.targets.breaking_upscale_delay_s) == (5, 0.5)
    serves = AutoscalingConfig(**spec.model_copy(update={"policy": "ongoing_requests"}).to_serve_autoscaling_config())
    assert serves.upscale_delay_s == 5  # Serve's own policy: Serve's own delay


def test_a_rise_waits_out_the_upscale_delay_unless_the_variant_already_fails_its_slo():
    busy = EngineStats(running_requests=4, queued_requests=8, max_running_requests=4)  # asks for 4 replicas

    def asks(redirected: float, ttft_target_ms: float | None = None, wait_ms: float = 0.0) -> list[int]:
        policy = EngineLoadPolicy(upscale_delay_s=2.0, ttft_target_ms=ttft_target_ms)
        metrics = {}
        for name, value in engine_metrics(busy, RecentLatency(), redirected).items():
            metrics[name] = {_replica(0): value}
        metrics[serve_autoscaling.QUEUE_WAIT_MS] = {_replica(0): wait_ms}
        return [policy(_ray_context(metrics, running=1, current_time=100.0 + t))[0] for t in (0.0, 1.0, 2.0)]

    assert asks(redirected=0.0) == [1, 1, 4]  # a blip may pass: held for the delay, as Serve would
    assert asks(redirected=3.0) == [4, 4, 4]  # the router already spills or sheds this variant's requests (max 4)
    assert asks(redirected=0.0, ttft_target_ms=1000.0, wait_ms=2000.0) == [4, 4, 4]  # its requests wait too long


def test_the_ongoing_requests_spec_keeps_serves_default_policy():
    config = AutoscalingConfig(**AutoscalingSpec(policy="ongoing_requests").to_serve_autoscaling_config())

    assert config.policy.is_default_policy_function()


def test_the_policy_scales_on_what_the_engines_reported():
    # One replica: 4 running in 4 slots and 8 queued -> 12 sequences, 3 per replica at 0.75 -> 4 replicas.
    busy = EngineStats(running_requests=4, queued_requests=8, max_running_requests=4)
    policy = EngineLoadPolicy(target_batch_utilization=0.75)

    replicas, state = policy(_ray_context(_reported(busy), running=1))

    assert (replicas, state) == (4, {})


def test_requests_queued_at_handles_and_unreported_replicas_are_taken_into_account():
    busy = EngineStats(running_requests=3, max_running_requests=4)
    # Two replicas run, only one has reported; 6 requests wait at the ingress's handle.
    ctx = scaling_context(_ray_context(_reported(busy), running=2, total_queued_requests=6.0, total_num_requests=9.0))

    assert len(ctx.replicas) == 1
    assert (ctx.current_replicas, ctx.handle_queued_requests, ctx.ongoing_requests) == (2, 6.0, 9.0)
    assert EngineLoadPolicy()(_ray_context(_reported(busy), running=2, total_queued_requests=6.0))[0] == 3


def test_idle_engines_ask_for_the_minimum():
    idle = EngineStats(max_running_requests=4)

    assert EngineLoadPolicy()(_ray_context(_reported(idle, idle, idle), running=3))[0] == 1


# --- what a replica reports -----------------------------------------------------------------------


def test_replica_metrics_are_plain_numbers_and_round_trip():
    stats = EngineStats(
        running_requests=3, queued_requests=2, queued_prompt_tokens=900, kv_blocks_used=30, kv_blocks_total=40
    )
    metrics = engine_metrics(stats, RecentLatency())

    assert all(type(v) is float for v in metrics.values())  # Serve refuses anything but int/float
    load = replica_load(metrics)
    assert (load.running_requests, load.queued_requests, load.queued_prompt_tokens) == (3, 2, 900)
    assert load.kv_used_fraction == pytest.approx(0.75)
    assert (load.ttft_ms, load.tpot_ms) == (None, None)  # no request yet: no latency signal


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_recent_latency_takes_ttft_from_the_first_delta_and_tpot_from_the_last_and_forgets_old_ones():
    clock = _Clock()
    latency = RecentLatency(window_s=10.0, clock=clock)
    started = time.time() - 1.0
    arrived = started - 0.2
    first = Delta("ab", [1, 2], completion_tokens=2, first_token_time=started, arrival_time=arrived)
    middle = Delta("c", [3], completion_tokens=3, first_token_time=started, arrival_time=arrived)
    last = Delta("d", [4], "length", completion_tokens=11, first_token_time=started, arrival_time=arrived)

    for delta in (first, middle, last):
        latency.observe(delta)
    ttft_ms, tpot_ms = latency.means_ms()

    assert ttft_ms == pytest.approx(200.0)
    assert tpot_ms == pytest.approx(100.0, rel=0.2)  # ~1 s over 10 tokens
    clock.now += 11.0
    assert latency.means_ms() == (None, None)


def test_the_policy_scales_ahead_of_a_rising_demand_on_the_contexts_clock():
    policy = EngineLoadPolicy(scale_ahead_s=10.0, trend_window_s=2.0)
    busy = EngineStats(running_requests=4, queued_requests=0, max_running_requests=16)  # 4/12: 1 replica

    answers = []
    for second, running in enumerate([10, 15, 20]):  # demand +5 sequences (5/12 of a replica) a second
        stats = EngineStats(running_requests=running, max_running_requests=16)
        ctx = _ray_context(_reported(stats), running=1, current_time=100.0 + second, capacity_adjusted_max_replicas=8)
        answers.append(policy(ctx)[0])

    assert EngineLoadPolicy()(_ray_context(_reported(busy), running=1))[0] == 1
    # 20/12 + 5/12 a second x 10 s = 5.8 -> 6, where the load alone asks for 2 (the window's mean, 15/12, is above the
    # one replica: short over the window, not only at its last reading)
    assert answers[-1] == 6
    full = EngineLoadPolicy(scale_ahead_s=10.0, trend_window_s=2.0)
    for second, running in enumerate([4, 8, 12]):  # the same rise up to exactly one full replica: not short yet
        stats = EngineStats(running_requests=running, max_running_requests=16)
        ctx = _ray_context(_reported(stats), running=1, current_time=100.0 + second, capacity_adjusted_max_replicas=8)
        last = full(ctx)[0]
    assert last == 1


def test_tpot_is_the_engines_live_decode_pace_when_it_reports_one():
    latency = RecentLatency()
    started = time.time() - 2.0
    latency.observe(Delta("a", [1], "length", completion_tokens=11, first_token_time=started, arrival_time=started))

    live = replica_load(engine_metrics(EngineStats(running_requests=4, recent_tpot_ms=42.0), latency))
    # No pace measured (nothing decoded in the engine's window): the finished requests' TPOT (~200 ms).
    finished = replica_load(engine_metrics(EngineStats(), latency))

    assert live.tpot_ms == 42.0
    assert finished.tpot_ms == pytest.approx(200.0, rel=0.2)


def test_the_redirected_demand_every_replica_relays_is_read_once():
    metrics: dict = {}
    for n in range(3):
        reported = engine_metrics(EngineStats(running_requests=4, max_running_requests=4), RecentLatency(), 10.0)
        for name, value in reported.items():
            metrics.setdefault(name, {})[_replica(n)] = value

    ctx = scaling_context(_ray_context(metrics, running=3))

    assert ctx.redirected_requests == 10.0  # the board's one figure, not 3 x 10


def test_queue_wait_is_the_oldest_request_still_without_a_first_token():
    clock = _Clock()
    latency = RecentLatency(clock=clock)
    latency.started("a")
    clock.now += 0.3
    latency.started("b")
    clock.now += 0.2

    assert latency.oldest_wait_ms() == pytest.approx(500.0)
    latency.first_token("a")
    assert latency.oldest_wait_ms() == pytest.approx(200.0)
    assert replica_load(engine_metrics(EngineStats(), latency)).queue_wait_ms == pytest.approx(200.0)
    latency.first_token("b")
    latency.first_token("b")  # a stream's end after its first token: nothing to forget twice
    assert latency.oldest_wait_ms() == 0.0


# --- draining: no accepted stream is cut on scale-down --------------------------------------------


def _app_args(**variant: Any) -> dict[str, Any]:
    engine = {"backend": "hf", "model": "builtin:tiny", "device": "cpu", "max_running_requests": 4}
    return {
        "model_name": "auto-llama",
        "tokenizer": "builtin:tiny",
        "variants": [{"name": "tiny", "engine": engine, **variant}],
    }


def test_the_drain_timeout_covers_the_longest_stream_the_app_accepts():
    args = _app_args(max_ongoing_requests=8, drain_tokens_per_s=20)
    args["limits"] = {"max_tokens_limit": 1000, "default_max_tokens": 100, "request_timeout_s": 600}
    variant = load_app_config(args).variants[0]

    # 8 streams in 4 slots drain in 2 rounds of 1000 tokens at 20 tokens/s.
    assert variant.graceful_shutdown_timeout_s == 2 * 1000 / 20 + DRAIN_MARGIN_S
    options = variant.deployment_options()
    deployment = typing.cast(Deployment, serve.deployment(_Replica)).options(**options)
    assert deployment._deployment_config.graceful_shutdown_timeout_s == variant.graceful_shutdown_timeout_s


def test_no_stream_outlives_the_request_timeout_so_neither_does_the_drain():
    args = _app_args(max_ongoing_requests=64, drain_tokens_per_s=1)
    args["limits"] = {"request_timeout_s": 120}

    assert load_app_config(args).variants[0].graceful_shutdown_timeout_s == 120 + DRAIN_MARGIN_S


def test_an_explicit_drain_timeout_is_kept():
    assert load_app_config(_app_args(graceful_shutdown_timeout_s=45)).variants[0].graceful_shutdown_timeout_s == 45


class _Replica:
    pass


# --- a real Serve app: scale up under a load step, back down, no stream cut ----------------------

APP = "autoscaling-test"
PREFIX = "/autoscaling-test"


def _scaling_args() -> dict[str, Any]:
    return _app_args(
        resources={"num_cpus": 0.25},
        max_ongoing_requests=32,
        autoscaling={
            "min_replicas": 1,
            "max_replicas": 2,
            "upscale_delay_s": 1,
            "downscale_delay_s": 3,
            "look_back_period_s": 2,
            "metrics_interval_s": 0.5,
        },
    )


async def _stream(client: httpx.AsyncClient, max_tokens: int) -> dict[str, Any]:
    """One streamed completion: its status, whether it ended with [DONE], its finish reason, any error event."""
    body = {"model": "auto-llama", "prompt": "The river", "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    outcome: dict[str, Any] = {"status": None, "done": False, "finish_reason": None, "error": None}
    async with client.stream("POST", "/v1/completions", json=body) as response:
        outcome["status"] = response.status_code
        if response.status_code == 429:
            # As the openai SDK does: wait before retrying. A closed loop that retries at once books redirected
            # demand for the variant at the rate of its 429s (router.redirect), which holds the replicas up.
            await asyncio.sleep(min(float(response.headers.get("retry-after", 1)), 1.0))
            return outcome
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: ") :]
            if data == "[DONE]":
                outcome["done"] = True
                break
            event = json.loads(data)
            if "error" in event:
                outcome["error"] = event["error"]
            for choice in event.get("choices", []):
                outcome["finish_reason"] = choice.get("finish_reason") or outcome["finish_reason"]
    return outcome


async def _replicas(client: httpx.AsyncClient) -> int:
    answer = (await client.get("/variants")).json()
    return next(v["replicas"] for v in answer["variants"] if v["name"] == "tiny")


async def _drive(client: httpx.AsyncClient, streams: int, max_tokens: int, until, deadline: float) -> list[dict]:
    """``streams`` closed-loop workers send streams until ``until(replicas)`` holds or the deadline passes."""
    stop = asyncio.Event()
    outcomes: list[dict] = []
    seen: list[int] = []  # the replica counts the watch read, for the failure message

    async def worker() -> None:
        while not stop.is_set():
            outcomes.append(await _stream(client, max_tokens))

    async def watch() -> None:
        while time.monotonic() < deadline:
            seen.append(await _replicas(client))
            if until(seen[-1]):
                break
            await asyncio.sleep(0.5)
        stop.set()

    await asyncio.gather(watch(), *(worker() for _ in range(streams)))
    statuses = [o["status"] for o in outcomes]
    print(f"{streams} streams: replicas seen {seen}; {len(outcomes)} requests, {statuses.count(429)} answered 429")
    return outcomes


@pytest.mark.serve
async def test_a_load_step_scales_the_variant_up_and_back_down_without_cutting_a_stream(serve_url):
    from serve_app.app import build_app

    await asyncio.to_thread(serve.run, build_app(_scaling_args()), name=APP, route_prefix=PREFIX)
    try:
        async with httpx.AsyncClient(base_url=serve_url + PREFIX, timeout=120) as client:
            assert await _replicas(client) == 1
            # Step: 12 streams on a replica with 4 batch slots -> the engines report queues -> 2 replicas.
            step = await _drive(client, 12, 64, lambda n: n >= 2, time.monotonic() + 90)
            scaled_up = await _replicas(client)
            # After the step, two long streams (seconds each, longer than Serve's 2 s drain check) keep
            # flowing while the policy removes the replica it no longer needs: whatever that replica still
            # streams must drain, not be cut.
            after = await _drive(client, 2, 600, lambda n: n <= 1, time.monotonic() + 90)
            scaled_down = await _replicas(client)
    finally:
        await asyncio.to_thread(serve.delete, APP)

    assert scaled_up == 2
    assert scaled_down == 1, "the variant kept its second replica (the output above has the replicas seen)"
    accepted = [o for o in step + after if o["status"] == 200]
    assert {o["status"] for o in step + after} <= {200, 429}  # overload may refuse, never fail
    assert len(accepted) >= 12
    cut = [o for o in accepted if not (o["done"] and o["finish_reason"] == "length" and o["error"] is None)]
    assert cut == []


def test_the_policy_logs_each_change_of_its_ask_in_serves_controller_only(caplog):
    from types import SimpleNamespace

    policy = EngineLoadPolicy()
    idle, busy = EngineStats(max_running_requests=16), EngineStats(running_requests=30, max_running_requests=16)
    with caplog.at_level("INFO", logger="ray.serve"):
        for stats in (idle, idle, busy, busy):
            policy(_ray_context(_reported(stats), running=1))
    lines = [r.getMessage() for r in caplog.records if "replicas (" in r.getMessage()]
    assert len(lines) == 2 and lines[-1].startswith("variant-tiny: 1 -> 3 replicas (slots;"), lines

    caplog.clear()
    ctx = _ray_context(_reported(busy), running=1)
    simulated = SimpleNamespace(**{k: getattr(ctx, k) for k in dir(ctx) if not k.startswith("_")})
    del simulated.deployment_name  # what the simulator hands the policy: no deployment, nothing to log
    with caplog.at_level("INFO", logger="ray.serve"):
        EngineLoadPolicy()(simulated)
    assert not [r for r in caplog.records if "replicas (" in r.getMessage()]
