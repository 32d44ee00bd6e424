"""Small engine profiles and requests for the simulator's tests: round numbers, so expectations are exact."""

from __future__ import annotations

from engines.profile import EngineProfile
from router import SLO, RequestFeatures, RouterConfig
from sim.request import SimRequest
from traffic.workload import Slo


def profile(**overrides) -> EngineProfile:
    # 10 ms a decode step (+1 ms per extra sequence), 10 000 prompt tokens/s (0.1 ms a token).
    values = {
        "step_ms_at_batch_1": 10.0,
        "step_ms_per_extra_seq": 1.0,
        "prefill_tokens_per_s": 10_000.0,
        "max_num_tokens": 1000,
        "max_running_requests": 8,
        "kv_cache_tokens": 100_000,
        "context_length": 8192,
        "startup_s": 5.0,
        "overhead_ms": 0.0,
    }
    return EngineProfile(**{**values, **overrides})


def request(
    index: int = 0, arrival_s: float = 0.0, prompt: int = 100, out: int = 10, slo: Slo | None = None
) -> SimRequest:
    slo = slo or Slo()
    return SimRequest(
        index=index,
        arrival_s=arrival_s,
        prompt_tokens=prompt,
        max_tokens=out,
        slo=slo,
        features=RequestFeatures(
            prompt_tokens=prompt, max_tokens=out, slo=SLO(ttft_ms=slo.ttft_ms, tpot_ms=slo.tpot_ms)
        ),
    )


def simulated_run(p: EngineProfile) -> list:
    """200 requests of mixed lengths, 20 a second, through one replica of ``p``: a run made by a known engine."""
    from sim.simulator import Simulation, SimVariant

    router = RouterConfig(policy="round_robin")
    reqs = [request(index=i, arrival_s=0.05 * i, prompt=100 + 37 * (i % 7), out=8 + i % 5) for i in range(200)]
    sim = Simulation([SimVariant(name="real", profile=p, num_replicas=1, max_ongoing_requests=1_000_000)], router)
    return sim.run(reqs).records
