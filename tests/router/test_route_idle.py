"""``route_idle`` is ``route`` on ``router.redirect.idle``'s views with a fresh state, decision for decision."""

from __future__ import annotations

import pytest

from router import RouterState, route
from router.policy import route_idle
from router.redirect import idle
from tests.router.random_cases import SEEDS, decisions


@pytest.mark.parametrize("seed", SEEDS)
def test_route_idle_decides_as_route_on_idle_views(seed: int):
    reasons = set()
    for req, views, cfg in decisions(seed):
        got = route_idle(req, views, cfg)
        assert got == route(req, [idle(v) for v in views], cfg, RouterState())
        reasons.add(got.reason)
    assert reasons  # the case decided something
