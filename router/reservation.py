"""Capacity reservation: keep a variant's room for the requests that have nowhere else to go.

The ``slo`` policy's quality objective sends a request to the best variant predicted to meet its SLO.
Judged one request at a time that is right, and in aggregate it is wrong when some requests can only
be served by one variant: a long prompt that only the large-context variant holds, or a tight-SLO
request that only one variant still meets. Flexible requests (a short chat, a batch job with no SLO)
then fill that variant because it is the best quality, and the requests with no alternative queue
behind them and miss. In the simulator's heterogeneous fleet this made ``slo`` lose to the SLO-blind
``least_loaded`` (90.5% vs 94.7% at the top rate, the long-prompt class at 33% vs 69%).

So the router remembers, per variant, the *exclusive* demand it has seen recently (requests for which
that variant was the only candidate by context, or the only one meeting the SLO), separately for each pair
of targets (in practice, each tier): a running mean of their prompt length. Before a flexible request takes
such a variant, the policy asks how much room a typical exclusive request of each kind arriving just after
it would find (its conservative predicted TTFT and TPOT against its targets, :func:`reserve_room`), and
takes the least: the tightest kind sets the reservation. (One mean over all kinds would not: interactive
requests with a 300 ms TTFT target mixed with standard ones at 2000 ms average to a target that a queue
long enough to make every interactive request miss still leaves room under.) Variants that would keep at
least ``reserve_slack`` of room are free to take the request; when none would, the request goes where the
least harm is done (the most room left). Only variants that meet the request's own SLO are considered: a
reservation never turns a met SLO into a miss.

Besides the predicted room, presence: while a variant has work on it that no other candidate could take (a
prompt beyond their contexts, queued or running: :func:`holds_exclusive`), a request that another variant is
sure to meet, with room there, goes to that one; the mixed steps a prediction under-rates are not risked.
"""

from __future__ import annotations

from collections.abc import Sequence

from router.config import RouterConfig
from router.latency import Load
from router.types import ExclusiveDemand, RequestFeatures, RouterState, Targets, VariantView, ttft_budget

# Kinds of exclusive demand remembered per variant: tiers are few, but x-slo-* headers can name any targets.
_MAX_KINDS = 16
_INF = float("inf")


def record_exclusive(
    demand: dict[str, dict[Targets, ExclusiveDemand]], variant: str, request: RequestFeatures, decision: int
) -> None:
    """Notes that ``request`` had only ``variant`` to go to. Requests without targets reserve nothing: they
    cannot miss."""
    targets = _targets(request)
    if targets == (None, None):
        return
    kinds = demand.setdefault(variant, {})
    known = kinds.get(targets)
    if known is not None:
        known.add(request, decision)
        return
    if len(kinds) >= _MAX_KINDS:
        del kinds[min(kinds, key=lambda k: kinds[k].last_decision)]
    kinds[targets] = ExclusiveDemand(float(request.prompt_tokens), decision)


def reserve_room(
    view: VariantView,
    load: Load,
    request: RequestFeatures,
    state: RouterState,
    config: RouterConfig,
    *,
    count_own_kind: bool = True,
) -> float:
    """The room (as a fraction of its targets, 1 = all of it) that a typical exclusive request of ``view``
    of the tightest kind would find left if ``request`` took ``view`` now; 1 when the variant has no recent
    exclusive demand. ``count_own_kind=False`` leaves out the kind with ``request``'s own targets."""
    demand = state.exclusive.get(view.name)
    if not demand:  # most variants keep room for no one: nothing to predict
        return 1.0
    own = _targets(request)
    live = [(t, d) for t, d in _live(demand, state, config) if count_own_kind or t != own]
    if not live:
        return 1.0
    return _room(view, _taking(view, load, request), live, config.error_margin_scale, config.ttft_path_ms)


def holds_exclusive(view: VariantView, candidates: Sequence[VariantView]) -> bool:
    """Whether ``view`` has work on every replica that no other of ``candidates`` could take: a request of the
    ingress's whose prompt + max_tokens is beyond every other candidate's context (``long_inflight_tokens``:
    every replica holds one that long), queued or running.

    A request that another variant is sure to meet does not join it (router.policy): its prefill and decode
    would share that work's steps, and the reservation's room, a prediction, does not see what mixed steps cost
    an engine whose steps mix a long prefill's chunks with decodes. On the transformers CPU engine they cost
    several times the model's figures, so the long prompts that had only this variant missed their TTFT with
    room predicted to spare (docs/routing.md). Presence rather than a prediction: the first such error
    is measured after the decisions it would have changed."""
    needed = view.long_inflight_tokens
    if needed <= 0:
        return False
    others = [v.context_length for v in candidates if v is not view]
    return bool(others) and needed > max(others)


def _targets(request: RequestFeatures) -> Targets:
    return (request.slo.ttft_ms, request.slo.tpot_ms)


def _live(
    demand: dict[Targets, ExclusiveDemand], state: RouterState, config: RouterConfig
) -> list[tuple[Targets, ExclusiveDemand]]:
    """The kinds of exclusive demand seen within the last ``config.reservation_window`` decisions."""
    now, window = state.decisions, config.reservation_window
    return [(t, d) for t, d in demand.items() if now - d.last_decision <= window]


def _taking(view: VariantView, load: Load, request: RequestFeatures) -> Load:
    """``load`` once ``view`` takes ``request``. The request lands on one replica; averaged over the variant
    it adds its share of the prefill queue, of the batch and of the batch's context, as a request routed now
    would find them."""
    replicas = max(view.ready_replicas, view.starting_replicas, 1)
    # Built directly rather than with dataclasses.replace, and positionally (in Load's field order): this runs
    # for every option of every decision.
    return Load(
        min(float(load.max_running), load.running + 1.0 / replicas),  # running
        load.queued,
        load.queued_prompt_tokens + request.prompt_tokens / replicas,  # queued_prompt_tokens
        load.waiting_for_slot,
        load.max_running,
        load.context_tokens + request.prompt_tokens / replicas,  # context_tokens
        load.startup_ms,
        load.prefill_tokens_per_s,
        load.decode_tokens_left,
        load.measured_tpot_ms,
        load.measured_batch,
        load.decode_tokens_left_sd,
    )


def crowded_out(
    view: VariantView, load: Load, request: RequestFeatures, state: RouterState, config: RouterConfig
) -> bool:
    """Whether ``request`` should give ``view`` up to the requests it is kept for, even though ``view`` is
    where ``request`` itself would fare best: some kind of them, with tighter targets than ``request``'s,
    would miss there once ``request`` has taken it (mean prediction).

    Past capacity every variant is short of room and the reservation step has no free variant to move a
    request to, so without this the request that meets its SLO most easily somewhere takes that variant: a
    4k-token loose-SLO prompt, or a standard-tier chat, takes the fast variant that interactive chat has
    nowhere else to go to, and the chats kept there miss. Yielding costs the loose request its SLO (it is
    served late elsewhere, or shed) to save the tight ones. Only when those would miss, so that below
    capacity nothing changes. Cost is not weighed: a rule that yielded only for prompts longer than the
    kept kind's left the tiers fleet at R = 6 at 71.9% where this one gives 76.7% (docs/sim.md).
    """
    return tighter_room(view, load, request, state, config, 0.0) < 0.0


def tighter_room(
    view: VariantView,
    load: Load,
    request: RequestFeatures,
    state: RouterState,
    config: RouterConfig,
    error_margin_scale: float,
) -> float:
    """The least room (fraction of its targets) that a typical request of any kind ``view`` is kept for with
    tighter targets than ``request``'s would find there once ``request`` had taken it, on predictions inflated by
    ``error_margin_scale`` times the learned margins (0: the mean prediction); 1 when it is kept for none such.
    Since the margins are never negative, a larger scale never gives more room.

    :func:`crowded_out` asks it of the mean prediction; the SLO policy also asks it of the conservative one
    (``RouterConfig.error_margin_scale``), to keep a looser request's prefill off a variant where it would
    leave the tighter kinds short (router.policy, "Not at the expense of tighter requests")."""
    demand = state.exclusive.get(view.name)
    if not demand:
        return 1.0
    own = _targets(request)
    kept_for = [(t, d) for t, d in _live(demand, state, config) if _tighter(t, own)]
    if not kept_for:
        return 1.0
    return _room(view, _taking(view, load, request), kept_for, error_margin_scale, config.ttft_path_ms)


def prefill_outweighs_slack(
    view: VariantView, request: RequestFeatures, state: RouterState, config: RouterConfig
) -> bool:
    """Whether ``request``'s own prefill on ``view`` (its prompt at the variant's learned prefill cost) takes more
    than ``reserve_slack`` of the TTFT budget of some kind ``view`` is kept for with tighter targets: the delay it
    alone puts before each request of that kind queued behind it on its replica, which the variant-wide room of
    :func:`tighter_room` spreads over every replica. A prompt shorter than that is not what leaves them short."""
    demand = state.exclusive.get(view.name)
    if not demand:
        return False
    own = _targets(request)
    prefill_ms = request.prompt_tokens * view.latency.prefill_ms_per_token
    path_ms = config.ttft_path_ms
    for targets, _ in _live(demand, state, config):
        ttft_target = targets[0]
        if ttft_target is not None and _tighter(targets, own):
            budget = ttft_budget(ttft_target, path_ms) if path_ms else ttft_target
            if prefill_ms > config.reserve_slack * budget:
                return True
    return False


def _tighter(a: Targets, b: Targets) -> bool:
    """Whether targets ``a`` are at least as tight as ``b`` on both measures and tighter on one (None: no
    target, the loosest)."""

    # Flat rather than with all/any over pairs: asked of every kind a variant keeps room for, per decision.
    a_ttft = _INF if a[0] is None else a[0]
    a_tpot = _INF if a[1] is None else a[1]
    b_ttft = _INF if b[0] is None else b[0]
    b_tpot = _INF if b[1] is None else b[1]
    return a_ttft <= b_ttft and a_tpot <= b_tpot and (a_ttft < b_ttft or a_tpot < b_tpot)


def _room(
    view: VariantView,
    load: Load,
    kinds: list[tuple[Targets, ExclusiveDemand]],
    error_margin_scale: float,
    ttft_path_ms: float = 0.0,
) -> float:
    """The least room (fraction of its targets) a typical request of any of ``kinds`` would find on ``view``
    under ``load``, on predictions inflated by ``error_margin_scale`` times the learned margins; each TTFT
    target less ``ttft_path_ms``, the part of it no latency model sees (RouterConfig.ttft_path_ms)."""
    model = view.latency
    room = 1.0
    for (ttft_target, tpot_target), kind in kinds:
        # Both from one pass (LatencyModel.predict_request), at the kind's mean prompt rounded to a token, judged
        # with the margins of that prompt's class of length (a variant unsure of long prompts keeps more room).
        prompt_tokens = round(kind.prompt_tokens)
        ttft, tpot = model.predict_request(prompt_tokens, load)
        ttft_lift = 1.0 + error_margin_scale * model.ttft_margin_for(prompt_tokens)
        tpot_lift = 1.0 + error_margin_scale * model.tpot_margin_for(prompt_tokens)
        # Conditionals rather than min calls (the same result: min keeps the first of equals).
        if ttft_target is not None:
            # ttft_budget only where there is a path to take off: a call per kind is not free here.
            left = 1.0 - ttft * ttft_lift / (ttft_budget(ttft_target, ttft_path_ms) if ttft_path_ms else ttft_target)
            if left < room:
                room = left
        if tpot_target is not None:
            left = 1.0 - tpot * tpot_lift / tpot_target
            if left < room:
                room = left
    return room
