"""Serve's autoscaling mechanics as mirrored by the simulator, checked against the installed Ray."""

from __future__ import annotations

import pytest

from router.serve_autoscaling import AutoscalingSpec
from sim.autoscaler import SimAutoscaler, apply_delay, ongoing_requests_policy, replica_metrics
from sim.deployment import SimDeployment
from tests.sim.helpers import profile, request

SPEC = AutoscalingSpec(min_replicas=1, max_replicas=10, upscale_delay_s=3, downscale_delay_s=5)


def ray_delay(desired: int, current: int, spec: AutoscalingSpec, state: dict, now: float) -> int:
    policy = pytest.importorskip("ray.serve.autoscaling_policy")
    from ray.serve.config import AutoscalingConfig

    serve_config = spec.to_serve_autoscaling_config()
    config = AutoscalingConfig(
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
        upscale_delay_s=serve_config["upscale_delay_s"],
        downscale_delay_s=serve_config["downscale_delay_s"],
    )
    decided, _ = policy._apply_delay_logic(desired, current, config, state, _now=now)
    return decided


@pytest.mark.parametrize(
    "wants",
    [
        [5, 5, 5, 5, 5],  # a steady upscale wish: applied after upscale_delay_s
        [5, 5, 1, 5, 5, 5, 5],  # a change of direction resets the clock
        [1, 1, 1, 1, 1, 1, 1],  # downscale after downscale_delay_s
        [3, 3, 2, 3, 3, 3],  # a pause at the current target resets too
    ],
)
@pytest.mark.parametrize("policy", ["engine_load", "ongoing_requests"])
def test_the_delay_mirror_agrees_with_serves_own(wants, policy):
    spec = SPEC.model_copy(update={"policy": policy})
    ours: dict = {}
    theirs: dict = {}
    target_ours = target_theirs = 2
    for tick, desired in enumerate(wants):
        now = 1000.0 + tick  # one decision a second
        target_ours = apply_delay(desired, target_ours, spec, ours, now)
        target_theirs = ray_delay(desired, target_theirs, spec, theirs, now)
        assert target_ours == target_theirs, f"tick {tick}"


@pytest.mark.parametrize("wants", [[5, 5, 5, 5, 5], [5, 5, 1, 5, 5, 5, 5], [3, 3, 2, 3, 3, 3], [3, 4, 5, 5, 5, 5]])
def test_the_policys_own_upscale_delay_agrees_with_serves_for_a_rise(wants):
    """engine_load holds the upscale delay (router.autoscaling.held_upscale) where Serve would: the same targets
    under the same asks while the SLO holds. Downscales pass through it to Serve's delay, so a fall here is one
    Serve holds with its downscale delay (in both)."""
    from router.autoscaling import held_upscale

    spec = SPEC.model_copy(update={"policy": "ongoing_requests"})  # Serve holding the upscale delay itself
    serve_state: dict = {}
    ours: dict = {}
    since = None
    target_serve = target_ours = 2
    for tick, desired in enumerate(wants):
        now = 1000.0 + tick
        target_serve = ray_delay(desired, target_serve, spec, serve_state, now)
        asked, since = held_upscale(desired, target_ours, since, now, SPEC.upscale_delay_s)
        target_ours = ray_delay(asked, target_ours, SPEC, ours, now)  # Serve's config for engine_load: upscale 0
        assert target_ours == target_serve, f"tick {tick}"


def test_the_default_policy_mirror_agrees_with_serves_own():
    policy = pytest.importorskip("ray.serve.autoscaling_policy")

    class Ctx:
        current_num_replicas = 3
        target_num_replicas = 3
        total_num_requests = 100.0
        target_ongoing_requests = 16.0

        class config:
            @staticmethod
            def get_target_ongoing_requests():
                return 16.0

    ours, _ = ongoing_requests_policy(Ctx())
    theirs, _ = policy._core_replica_queue_length_policy(Ctx())
    assert ours == pytest.approx(theirs) == pytest.approx(100 / 16)


def test_replica_metrics_are_the_production_stats_hooks_figures():
    deployment = SimDeployment("v", profile(max_running_requests=1), 64)
    replica = deployment.add_replica(0.0)
    deployment.mark_ready(replica)
    replica.submit(request(index=0, prompt=100, out=10), 0.0)
    replica.submit(request(index=1, prompt=300, out=10), 0.0)

    metrics = replica_metrics(replica, 0.0)

    assert metrics["engine_running_requests"] == 1
    assert metrics["engine_queued_requests"] == 1
    assert metrics["engine_queued_prompt_tokens"] == 400
    assert metrics["engine_max_running_requests"] == 1


def test_a_loaded_deployment_asks_for_more_replicas_once_the_delay_has_passed():
    spec = SPEC.model_copy(update={"metrics_interval_s": 1.0, "look_back_period_s": 2.0})
    scaler = SimAutoscaler(spec)
    deployment = SimDeployment("v", profile(max_running_requests=4), 64)
    replica = deployment.add_replica(0.0)
    deployment.mark_ready(replica)
    for i in range(12):  # 12 sequences on 4 slots: 4 replicas at 75% utilisation
        replica.submit(request(index=i), 0.0)

    decisions = []
    for t in range(4):  # one tick a second; the deployment is not resized here
        scaler.record(deployment, float(t))
        decisions.append(scaler.decide(deployment, float(t)))

    # Wanted from the first tick, applied once upscale_delay_s (3 s) of ticks have wanted it.
    assert decisions == [1, 1, 1, 4]
