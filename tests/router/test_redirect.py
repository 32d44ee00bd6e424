"""router.redirect: where a request would have gone on an idle fleet, and the demand redirected away from it."""

from __future__ import annotations

import pytest

from router import SLO, RequestFeatures, RouterConfig, route
from router.redirect import RedirectedDemand, idle, preferred_variant, redirected_from
from router.types import RouterState
from tests.router.views import big, small

COST = RouterConfig(objective="cost")
REQUEST = RequestFeatures(prompt_tokens=100, max_tokens=100, slo=SLO(ttft_ms=500, tpot_ms=50))


def test_an_idle_view_keeps_the_limits_and_drops_the_load():
    busy = small(ready_replicas=0, starting_replicas=2, running_requests=40, queued_requests=30, inflight=9)
    view = idle(busy)

    assert (view.name, view.context_length, view.max_running_requests) == ("small", 2048, busy.max_running_requests)
    assert (view.ready_replicas, view.running_requests, view.queued_requests, view.inflight) == (1, 0, 0, 0)


def test_the_preferred_variant_is_the_policys_choice_on_an_idle_fleet_with_its_time_there():
    full = small(running_requests=16, queued_requests=200, queued_prompt_tokens=200 * 100)

    name, seconds = preferred_variant(REQUEST, [full, big()], COST)  # type: ignore[misc]

    assert name == "small"  # the cheap one, were it idle
    assert seconds == pytest.approx(0.02 + 100 * 0.01, rel=0.5)  # its TTFT + 100 tokens at ~10 ms
    assert preferred_variant(RequestFeatures(prompt_tokens=9000, max_tokens=9000), [small(), big()], COST) is None


def test_a_request_spilled_or_shed_from_a_full_variant_is_redirected_from_it():
    views = [small(running_requests=16, queued_requests=200, queued_prompt_tokens=200 * 100), big()]
    spilled = route(REQUEST, views, COST, RouterState())
    assert spilled.variant == "big"

    assert redirected_from(spilled, REQUEST, views, COST) == (pytest.approx("small"), pytest.approx(1.0, rel=0.5))
    at_home = route(REQUEST, [small(), big()], COST, RouterState())
    assert at_home.variant == "small" and redirected_from(at_home, REQUEST, [small(), big()], COST) is None


def test_a_pinned_request_is_never_counted_as_redirected():
    views = [small(running_requests=16, queued_requests=200, queued_prompt_tokens=200 * 100), big()]
    pinned = RequestFeatures(prompt_tokens=100, max_tokens=100, slo=REQUEST.slo, pinned="big")

    assert redirected_from(route(pinned, views, COST, RouterState()), pinned, views, COST) is None


def test_redirected_demand_counts_each_request_for_as_long_as_it_would_have_run():
    demand = RedirectedDemand(rate_window_s=0.1)  # a short window: the in-flight count alone
    demand.add("small", now=10.0, duration_s=2.0)
    demand.add("small", now=11.0, duration_s=2.0)
    demand.add("big", now=11.0, duration_s=0.5)

    assert demand.levels(11.2) == {"small": 2.0, "big": 1.0}
    assert demand.levels(12.5) == {"small": 1.0}
    assert demand.levels(13.0) == {}


def test_a_rising_redirect_rate_counts_at_the_level_it_leads_to():
    # 4 requests of 2 s each within the last second: 4/s x 2 s = 8 in flight once the rate holds,
    # while only 4 are booked so far.
    demand = RedirectedDemand(rate_window_s=1.0)
    for k in range(4):
        demand.add("small", now=10.0 + 0.25 * k, duration_s=2.0)

    assert demand.levels(10.8) == {"small": pytest.approx(8.0)}
    assert demand.levels(12.3) == {"small": pytest.approx(2.0)}  # the rate has gone: the bookings still running
