import pytest
from pydantic import ValidationError

from router.config import RouterConfig
from traffic.mix import (
    MixConfig,
    RequestClass,
    longest_length,
    mean_length,
    mixed_requests,
    routing_mix,
    slo_of,
    slo_window_s,
)
from traffic.workload import FixedLength, NormalLength, UniformLength

TIERS = RouterConfig().tiers


def take(mix, n):
    return list(mixed_requests(mix, TIERS, [float(i) for i in range(n)]))


def test_the_routing_mix_has_short_interactive_and_long_loose_classes():
    mix = routing_mix(long_tier="batch")
    short, long = mix.classes
    assert (short.tier, long.tier) == ("interactive", "batch")
    assert (short.input_len.low, short.input_len.high) == (32, 128)
    assert (long.input_len.low, long.input_len.high) == (1500, 3000)
    assert (short.weight, long.weight) == pytest.approx((0.75, 0.25))


def test_requests_are_token_id_prompts_of_exact_length_within_their_class():
    specs = take(routing_mix(), 400)
    for spec in specs:
        assert isinstance(spec.prompt, list) and len(spec.prompt) == spec.prompt_tokens
        assert all(256 <= t < 500 for t in spec.prompt)
        if spec.slo.tier == "interactive":
            assert 32 <= spec.prompt_tokens <= 128 and spec.max_tokens == 32
        else:
            assert spec.slo.tier == "standard"
            assert 1500 <= spec.prompt_tokens <= 3000 and spec.max_tokens == 64
    assert [s.send_at for s in specs] == [float(i) for i in range(400)]
    share = sum(s.slo.tier == "interactive" for s in specs) / len(specs)
    assert share == pytest.approx(0.75, abs=0.06)


def test_requests_are_scored_with_the_server_tiers_targets():
    specs = take(routing_mix(), 50)
    interactive = next(s for s in specs if s.slo.tier == "interactive")
    assert (interactive.slo.ttft_ms, interactive.slo.tpot_ms) == (300.0, 50.0)
    # Only the tier's name travels: the server owns the targets.
    assert interactive.slo.headers() == {"x-slo-tier": "interactive"}


def test_the_same_seed_gives_the_same_traffic_and_another_seed_other_traffic():
    assert take(routing_mix(seed=3), 30) == take(routing_mix(seed=3), 30)
    assert take(routing_mix(seed=3), 30) != take(routing_mix(seed=4), 30)


def test_unknown_tier_and_bad_configs_are_refused():
    with pytest.raises(ValueError, match="unknown tier 'gold'"):
        slo_of("gold", TIERS)
    with pytest.raises(ValueError, match="unknown tier"):
        take(routing_mix(long_tier="gold"), 1)
    with pytest.raises(ValueError, match="interactive_share"):
        routing_mix(interactive_share=1.0)
    one = RequestClass(
        name="a", weight=1, input_len=FixedLength(value=4), output_len=FixedLength(value=4), tier="batch"
    )
    with pytest.raises(ValidationError, match="unique"):
        MixConfig(classes=[one, one])
    with pytest.raises(ValidationError, match="token_id_range"):
        MixConfig(classes=[one], token_id_range=(5, 5))


def test_mean_length():
    assert mean_length(FixedLength(value=7)) == 7
    assert mean_length(UniformLength(low=10, high=20)) == 15
    assert mean_length(NormalLength(mean=12.5, std=3)) == 12.5


def test_the_slo_window_is_the_longest_time_a_request_may_take_and_still_meet_its_slo():
    # Default tiers: interactive 300 ms + 31 x 50 ms = 1.85 s; standard (the long class) 2 s + 63 x 100 ms.
    assert slo_window_s(routing_mix(), TIERS) == pytest.approx(8.3)
    # Looser targets widen it: what made an 8 s hard limit cut requests still on their way to meeting them.
    loose = {**TIERS, "standard": TIERS["standard"].model_copy(update={"ttft_ms": 4000.0, "tpot_ms": 250.0})}
    assert slo_window_s(routing_mix(), loose) == pytest.approx(19.75)
    # A class without both targets (batch) sets no window.
    assert slo_window_s(routing_mix(long_tier="batch"), TIERS) == pytest.approx(1.85)


def test_longest_length():
    assert longest_length(FixedLength(value=7)) == 7
    assert longest_length(UniformLength(low=10, high=20)) == 20
    assert longest_length(NormalLength(mean=100, std=10, high=120)) == 120
    assert longest_length(NormalLength(mean=100, std=10)) == 140
