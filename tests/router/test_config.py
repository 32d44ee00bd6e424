"""RouterConfig and its parts: defaults that work, and mistakes reported at the field that holds them."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from router import LatencyProfile, RouterConfig, SLOTier


def error_locations(**fields: Any) -> list[tuple]:
    with pytest.raises(ValidationError) as info:
        RouterConfig(**fields)
    return [error["loc"] for error in info.value.errors()]


def test_defaults_are_consistent_and_name_an_existing_default_tier():
    config = RouterConfig()

    assert config.policy == "slo" and config.objective == "quality" and config.on_violation == "degrade"
    assert config.default_tier in config.tiers
    assert config.sheddable_queue_bound_per_replica <= config.queue_bound_per_replica
    assert any(tier.sheddable for tier in config.tiers.values())


def test_a_config_loads_from_plain_data_as_in_the_app_config_file():
    config = RouterConfig.model_validate(
        {
            "policy": "least_loaded",
            "tiers": {"gold": {"ttft_ms": 200, "tpot_ms": 30, "priority": 3}, "bulk": {"sheddable": True}},
            "default_tier": "bulk",
        }
    )

    assert config.tiers["gold"] == SLOTier(ttft_ms=200.0, tpot_ms=30.0, priority=3)
    assert config.tiers["bulk"].sheddable


def test_a_default_tier_that_is_not_a_tier_is_reported_at_default_tier():
    with pytest.raises(ValidationError) as info:
        RouterConfig(tiers={"gold": SLOTier()}, default_tier="silver")

    assert [error["loc"] for error in info.value.errors()] == [("default_tier",)]
    assert "gold" in str(info.value)


def test_a_sheddable_bound_above_the_bound_is_reported_at_its_field():
    assert error_locations(queue_bound_per_replica=4, sheddable_queue_bound_per_replica=5) == [
        ("sheddable_queue_bound_per_replica",)
    ]


@pytest.mark.parametrize(
    ("fields", "location"),
    [
        ({"policy": "fastest"}, ("policy",)),
        ({"objective": "speed"}, ("objective",)),
        ({"on_violation": "queue"}, ("on_violation",)),
        ({"slo_headroom": 1.0}, ("slo_headroom",)),
        ({"retry_after_s": 0}, ("retry_after_s",)),
        ({"length_threshold_tokens": 0}, ("length_threshold_tokens",)),
        ({"tiers": {}}, ("tiers",)),
        ({"tiers": {"gold": {"ttft_ms": -1}}}, ("tiers", "gold", "ttft_ms")),
        ({"tiers": {"gold": {"latency": 1}}}, ("tiers", "gold", "latency")),
        ({"tiers": {"bad name": {}}}, ("tiers", "bad name", "[key]")),
        ({"polcy": "slo"}, ("polcy",)),
    ],
)
def test_bad_values_and_unknown_keys_are_reported_at_their_field(fields: dict[str, Any], location: tuple):
    assert location in error_locations(**fields)


def test_every_field_is_described():
    for model in (RouterConfig, SLOTier, LatencyProfile):
        undocumented = [name for name, field in model.model_fields.items() if not field.description]
        assert undocumented == [], model.__name__


@pytest.mark.parametrize(
    ("fields", "location"),
    [
        ({"prefill_tokens_per_s": 0}, "prefill_tokens_per_s"),
        ({"tpot_ms_per_extra_seq": -1}, "tpot_ms_per_extra_seq"),
    ],
)
def test_a_latency_profile_rejects_impossible_figures(fields: dict[str, Any], location: str):
    with pytest.raises(ValidationError) as info:
        LatencyProfile(**fields)

    assert [error["loc"] for error in info.value.errors()] == [(location,)]
