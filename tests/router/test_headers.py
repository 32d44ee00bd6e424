"""A request's SLO from its headers: tiers, single-target overrides, and bad values named by header."""

from __future__ import annotations

import pytest

from core.errors import InvalidRequestError
from router import SLO, RouterConfig, SLOTier, features_from_headers

CONFIG = RouterConfig(
    tiers={
        "interactive": SLOTier(ttft_ms=300.0, tpot_ms=50.0, priority=2),
        "standard": SLOTier(ttft_ms=2000.0, tpot_ms=100.0),
        "batch": SLOTier(sheddable=True, priority=-1),
    },
    default_tier="standard",
)


def features(headers: dict[str, str], priority: int | None = None, pinned: str | None = None):
    return features_from_headers(headers, 120, 64, priority, pinned, CONFIG)


def test_no_slo_headers_give_the_default_tier():
    request = features({"content-type": "application/json"})

    assert request.slo == SLO(ttft_ms=2000.0, tpot_ms=100.0)
    assert (request.prompt_tokens, request.max_tokens) == (120, 64)
    assert (request.priority, request.sheddable) == (0, False)


def test_a_tier_header_selects_the_tier_and_its_priority_and_shedding():
    interactive = features({"x-slo-tier": "interactive"})
    batch = features({"x-slo-tier": "batch"})

    assert (interactive.slo, interactive.priority, interactive.sheddable) == (SLO(300.0, 50.0), 2, False)
    assert (batch.slo, batch.priority, batch.sheddable) == (SLO(None, None), -1, True)


def test_single_targets_override_the_tier():
    request = features({"x-slo-tier": "interactive", "x-slo-ttft-ms": "150", "x-slo-tpot-ms": "12.5"})

    assert request.slo == SLO(ttft_ms=150.0, tpot_ms=12.5)
    assert request.priority == 2


def test_a_single_target_keeps_the_other_from_the_default_tier():
    assert features({"x-slo-tpot-ms": "30"}).slo == SLO(ttft_ms=2000.0, tpot_ms=30.0)


def test_header_names_are_case_insensitive():
    assert features({"X-SLO-Tier": "interactive", "X-Slo-Ttft-Ms": "99"}).slo == SLO(99.0, 50.0)


def test_an_explicit_priority_and_pinned_variant_are_kept():
    request = features({"x-slo-tier": "interactive"}, priority=-3, pinned="big")

    assert (request.priority, request.pinned) == (-3, "big")


@pytest.mark.parametrize("tier", ["platinum", ""])
def test_an_unknown_tier_is_an_invalid_request_naming_the_header_and_the_known_tiers(tier: str):
    with pytest.raises(InvalidRequestError) as info:
        features({"x-slo-tier": tier})

    assert info.value.param == "x-slo-tier"
    assert repr(tier) in info.value.message and "interactive" in info.value.message


@pytest.mark.parametrize("header", ["x-slo-ttft-ms", "x-slo-tpot-ms"])
@pytest.mark.parametrize("value", ["fast", "", "0", "-5", "nan", "inf", "1e400"])
def test_a_target_that_is_not_a_positive_number_is_an_invalid_request_naming_the_header(header, value):
    with pytest.raises(InvalidRequestError) as info:
        features({header: value})

    assert info.value.param == header
    assert header in info.value.message
