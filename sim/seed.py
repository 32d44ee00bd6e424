"""What the router starts from for a modelled engine: the latency profile a bench measurement would give."""

from __future__ import annotations

from engines.profile import EngineProfile
from router import LatencyProfile


def router_seed(profile: EngineProfile, mean_output_tokens: float = 128.0) -> LatencyProfile:
    """The seed profile a bench run of ``profile``'s engine would hand the router (its own speed, plus overhead)."""
    return LatencyProfile(
        prefill_tokens_per_s=profile.prefill_tokens_per_s,
        base_ttft_ms=profile.step_ms_at_batch_1 + profile.overhead_ms,
        tpot_ms_at_batch_1=profile.step_ms_at_batch_1,
        tpot_ms_per_extra_seq=profile.step_ms_per_extra_seq,
        mean_output_tokens=mean_output_tokens,
    )
