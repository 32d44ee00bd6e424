"""The simulator's named scenarios: the heterogeneous fleet exercises what it is there for."""

from __future__ import annotations

from collections import Counter

from sim.deployment import ReplicaChoice, SimDeployment
from sim.replica import SimReplica
from sim.scenario import heterogeneous_scenario, simulate
from tests.sim.helpers import profile, request

LONG_POOL = "llama-70b-fp8"


def test_prompts_beyond_the_8b_context_all_go_to_the_70b():
    scenario = heterogeneous_scenario(duration_s=30.0)

    result, run = simulate(scenario, "least_loaded", "static")

    long_ones = [r for r in result.records if r.prompt_tokens + r.max_tokens > 8192]
    assert long_ones
    assert {r.variant for r in long_ones} == {LONG_POOL}
    assert run.summary.failed == 0


def test_under_load_reservation_moves_batch_jobs_off_the_pool_that_long_prompts_need():
    # At nine times the base rate the 70B pool is near its limit with the long prompts that only it holds.
    scenario = heterogeneous_scenario(duration_s=60.0, rate_scale=9.0)
    off = scenario.model_copy(update={"router": scenario.router.model_copy(update={"reserve_slack": 0.0})})

    def batch_on_70b(s) -> int:
        result, _ = simulate(s, "slo", "static")
        return Counter(r.variant for r in result.records if r.slo_tier == "batch")[LONG_POOL]

    assert batch_on_70b(scenario) < batch_on_70b(off) / 2


def test_least_prefill_replica_choice_passes_a_replica_busy_with_a_long_prompt():
    # Two ready replicas; the first holds one 5000-token prompt, the second three short ones. Serve's default
    # compares ongoing requests (1 vs 3); least_prefill compares the prompt work this handle sent (5000 vs 300).
    def busy_pair(choice: ReplicaChoice) -> tuple[SimDeployment, SimReplica, SimReplica]:
        deployment = SimDeployment("v", profile(), max_ongoing_requests=8, replica_choice=choice)
        long_one, short_ones = deployment.add_replica(0.0), deployment.add_replica(0.0)
        for replica in (long_one, short_ones):
            deployment.mark_ready(replica)
        if choice == "least_prefill":  # through the handle, which sees only what it sent
            long_one, _ = deployment.dispatch(request(0, prompt=5000), 0.0)
            short_ones = next(r for r in deployment.ready if r is not long_one)
            for i in range(1, 4):
                assert deployment.dispatch(request(i, prompt=100), 0.0)[0] is short_ones
        else:
            long_one.submit(request(0, prompt=5000), 0.0)
            for i in range(1, 4):
                short_ones.submit(request(i, prompt=100), 0.0)
        return deployment, long_one, short_ones

    deployment, _, short_ones = busy_pair("least_prefill")
    replica, _ = deployment.dispatch(request(9, prompt=100), 0.0)
    assert replica is short_ones

    deployment, long_one, _ = busy_pair("power_of_two")
    replica, _ = deployment.dispatch(request(9, prompt=100), 0.0)
    assert replica is long_one


def test_least_prefill_sees_only_what_its_own_ingress_sent():
    # Two ingress replicas share the deployment: a long prompt ingress 0 sent is invisible to ingress 1's handle,
    # as each ingress's request router counts only its own sends (serve_app/replica_router.py).
    deployment = SimDeployment(
        "v", profile(), max_ongoing_requests=8, replica_choice="least_prefill", ingress_replicas=2
    )
    for _ in range(2):
        deployment.mark_ready(deployment.add_replica(0.0))

    def send(index: int, ingress: int, prompt: int) -> SimReplica:
        sent = request(index, prompt=prompt)
        sent.ingress = ingress
        return deployment.dispatch(sent, 0.0)[0]

    long_one = send(0, ingress=0, prompt=5000)
    assert [send(i, ingress=0, prompt=100) is long_one for i in (1, 2)] == [False, False]
    # Ingress 1 spreads its own two sends over both replicas: one of them lands behind the long prompt.
    assert sorted(send(i, ingress=1, prompt=100) is long_one for i in (3, 4)) == [False, True]
