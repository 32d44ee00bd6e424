"""The routing decision as it was before the hot path's rewrite (commit 647adb9), kept as an oracle.

``tests/router/test_route_equivalence.py`` runs random requests, loads and model snapshots through this and
through ``router.route`` and requires the same decisions. It predicts with the latency model's long forms
(``predict_ttft_ms`` / ``predict_load_tpot_ms`` / an idle :class:`Load`), which read the model's live
weights, so that a stale per-snapshot cache on the fast path cannot hide here. Do not optimise this file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from router.baselines import BASELINES
from router.config import RouterConfig
from router.latency import Load
from router.load import queue_bound, serving_replicas
from router.policy import _reject_context, _reject_overloaded, _reject_unavailable, missing_fields, reject_unsupported
from router.reservation import ExclusiveDemand, Targets
from router.shedding import is_hopeless
from router.shedding import retry_after_s as shed_retry_after_s
from router.types import Decision, Prediction, Reason, RequestFeatures, RouterState, VariantView

_MAX_KINDS = 16


def idle_ttft_ms(request: RequestFeatures, view: VariantView, load: Load) -> float:
    idle = Load(
        running=0.0,
        queued=0.0,
        queued_prompt_tokens=0.0,
        waiting_for_slot=0.0,
        max_running=load.max_running,
        startup_ms=load.startup_ms,
    )
    return view.latency.predict_ttft_ms(request.prompt_tokens, idle)


def _predict_request(view: VariantView, prompt_tokens: int, load: Load) -> tuple[float, float]:
    model = view.latency
    return model.predict_ttft_ms(prompt_tokens, load), model.predict_load_tpot_ms(load, None, prompt_tokens)


def replica_load(view: VariantView, config: RouterConfig) -> Load:
    """Per-replica load of a variant with at least one serving replica (see :func:`serving_replicas`).

    Called for every candidate of every decision, so written flat: the merges of :func:`queued_prompt_tokens`
    and :func:`decoding_context` inline, conditionals instead of ``min``/``max`` calls.
    """
    ready = view.ready_replicas > 0
    serving = view.ready_replicas if ready else (view.starting_replicas if config.wait_for_starting_replicas else 0)
    replicas = serving if serving > 1 else 1
    slots_per_replica = view.max_running_requests if view.max_running_requests > 1 else 1
    reported_running = view.running_requests

    unseen = view.inflight - view.queued_requests - reported_running
    if unseen < 0:
        unseen = 0
    unseen_tokens = unseen * view.inflight_prompt_tokens / view.inflight if unseen else 0.0

    # A full KV cache admits nothing new until a sequence finishes, however many batch slots are free.
    kv_full = ready and view.kv_used_fraction >= config.kv_full_fraction
    capacity = reported_running if kv_full else slots_per_replica * replicas
    if capacity < reported_running:
        capacity = reported_running
    wanting = reported_running + unseen
    running = wanting if wanting < capacity else capacity
    queued = view.queued_requests + (wanting - running)
    free = capacity - running
    # Serve sends a request to a replica with room when one has it, so any free slot is the request's.
    waiting_for_slot = 0.0 if queued < free else (queued - free) / replicas + 1.0
    # Starting replicas with room for the request (the ones queued ahead take their slots first) serve it by then.
    room_on_starting = queued - free < view.starting_replicas * slots_per_replica
    counted = ready and view.starting_ready_in_ms > 0.0 and room_on_starting
    slot_by_ms = view.starting_ready_in_ms if waiting_for_slot > 0.0 and counted else math.inf

    # Prefill work ahead: the report less what was prefilled since, plus what was sent after it, and never
    # less than the prompts of own requests without a first token (queued_prompt_tokens, the long form).
    reported = float(view.queued_prompt_tokens)
    if reported > 0 and view.report_age_ms > 0:
        prefill_ms = view.latency._ttft.weights[1]
        drained = replicas * view.report_age_ms / (prefill_ms if prefill_ms > 1e-9 else 1e-9)
        reported = reported - drained if reported > drained else 0.0
    fresh = float(view.fresh_prompt_tokens)
    ahead = reported + (fresh if fresh > unseen_tokens else unseen_tokens)
    unstarted = float(view.unstarted_prompt_tokens)
    if ahead < unstarted:
        ahead = unstarted

    own_decoding = view.inflight_prompt_tokens - view.unstarted_prompt_tokens
    context = view.context_tokens if view.context_tokens > own_decoding else own_decoding
    pace = ready and config.pace_floor
    return Load(
        running=running / replicas,
        queued=queued / replicas,
        queued_prompt_tokens=ahead / replicas,
        waiting_for_slot=waiting_for_slot,
        max_running=slots_per_replica,
        startup_ms=0.0 if ready else config.replica_startup_ms,
        prefill_tokens_per_s=view.prefill_tokens_per_s / replicas,
        decode_tokens_left=view.decode_tokens_left,
        decode_tokens_left_sd=view.decode_tokens_left_sd,
        context_tokens=float(context if context > 0 else 0) / replicas,
        measured_tpot_ms=view.recent_tpot_ms if pace else 0.0,
        measured_batch=view.recent_decode_batch / replicas if pace else 0.0,
        slot_by_ms=slot_by_ms,
    )


def route(
    request: RequestFeatures, variants: Sequence[VariantView], config: RouterConfig, state: RouterState
) -> Decision:
    """Picks the variant for ``request`` (see the module docstring for the rules)."""
    state.decisions += 1
    if request.pinned is not None:
        return _route_pinned(request, variants, config)

    if not variants:  # every variant's stats went stale: nothing is known to serve
        return _reject_unavailable("any variant", config)
    if request.sampling_fields:
        capable = [v for v in variants if not missing_fields(request, v)]
        if not capable:
            return reject_unsupported(request, variants)
        variants = capable
    needed = request.prompt_tokens + request.max_tokens
    fitting = [v for v in variants if needed <= v.context_length]
    if not fitting:
        largest_context = max(v.context_length for v in variants)
        return _reject_context(request, largest_context, "the largest context")

    candidates = [v for v in fitting if serving_replicas(v, config) > 0]
    if not candidates:
        return _reject_unavailable(", ".join(v.name for v in fitting), config)

    loads = {v.name: replica_load(v, config) for v in candidates}
    predictions = {v.name: predict(request, v, loads[v.name], config) for v in candidates}
    bound = queue_bound(request.priority, request.sheddable, config)

    if config.policy == "slo":
        return _route_slo(request, candidates, loads, predictions, bound, config, state)
    choose, reason = BASELINES[config.policy]
    chosen = choose(request, candidates, loads, config, state)
    if loads[chosen.name].waiting_for_slot > bound:
        return _reject_overloaded(predictions, config)
    return Decision(chosen.name, reason, predictions)


def predict(request: RequestFeatures, view: VariantView, load: Load, config: RouterConfig) -> Prediction:
    """The latency ``view`` is predicted to give ``request`` under ``load``, judged against its SLO on the
    prediction inflated by the variant's learned error margin (see the module docstring)."""
    model = view.latency
    ttft, tpot = _predict_request(view, request.prompt_tokens, load)
    batch = load.batch_when_running
    ttft_upper = ttft * (1.0 + config.error_margin_scale * model.ttft_margin_for(request.prompt_tokens))
    tpot_upper = tpot * (1.0 + config.error_margin_scale * model.tpot_margin_for(request.prompt_tokens))
    # Targets shrink by the headroom, so a prediction that is a little optimistic still lands inside.
    scale = 1.0 - config.slo_headroom
    violation = 0.0
    slack = 1.0
    # Conditionals rather than min/max calls: this runs for every candidate of every decision.
    slo = request.slo
    if slo.ttft_ms is not None:
        ratio = ttft_upper / (slo.ttft_ms * scale)
        if ratio > 1.0:
            violation += ratio - 1.0
        if 1.0 - ratio < slack:
            slack = 1.0 - ratio
    # A single-token answer has no time per output token to miss.
    if slo.tpot_ms is not None and request.max_tokens > 1:
        ratio = tpot_upper / (slo.tpot_ms * scale)
        if ratio > 1.0:
            violation += ratio - 1.0
        if 1.0 - ratio < slack:
            slack = 1.0 - ratio
    return Prediction(
        ttft_ms=ttft,
        tpot_ms=tpot,
        meets_slo=violation == 0.0,
        violation=violation,
        batch_size=batch,
        queued_tokens_ahead=load.queued_prompt_tokens,
        waiting_for_slot=load.waiting_for_slot,
        context_tokens=load.context_tokens + request.prompt_tokens,
        ttft_upper_ms=ttft_upper,
        tpot_upper_ms=tpot_upper,
        slack=slack,
        slowdown=model.slowdown(load, request.prompt_tokens),
    )


def _route_slo(
    request: RequestFeatures,
    candidates: Sequence[VariantView],
    loads: Mapping[str, Load],
    predictions: dict[str, Prediction],
    bound: float,
    config: RouterConfig,
    state: RouterState,
) -> Decision:
    admissible = [v for v in candidates if loads[v.name].waiting_for_slot <= bound]
    if not admissible:
        return _reject_overloaded(predictions, config)

    sure = [v for v in admissible if predictions[v.name].meets_slo]
    # Those whose *mean* prediction meets the SLO: the best chance of a request no variant is sure to meet
    # (see _expected_ratio), and where a request may go when the sure ones are reserved for others.
    likely_bar = 1.0 - config.slo_headroom if config.on_violation == "reject" else 1.0
    likely = [v for v in admissible if _expected_ratio(request, predictions[v.name]) <= likely_bar]
    meeting = sure or likely
    if len(candidates) == 1 or len(sure) == 1:
        # Only this variant can take the request (by context, or by SLO now): it reserves room there.
        only = candidates[0] if len(candidates) == 1 else sure[0]
        record_exclusive(state.exclusive, only.name, request, state.decisions)
    elif not sure:
        # No variant sure to meet it: the variant that suits it best when idle is where it needs room kept.
        record_exclusive(state.exclusive, _home(request, admissible, loads).name, request, state.decisions)
    missed = Reason.DEGRADED_SMALLEST_VIOLATION
    if meeting:

        def pick(pool: Sequence[VariantView]) -> tuple[VariantView, Reason]:
            return _best_meeting(pool, predictions, config) if sure else _most_likely(pool, request, predictions)

        best, reason = pick(meeting)
        meeting_names = {v.name for v in meeting}
        options = meeting + [v for v in likely if v.name not in meeting_names]
        if len(options) > 1 and config.reserve_slack > 0:
            # A request never leaves its best variant for the sake of its own kind (the next one of them would
            # face the same choice); where it might go, its own kind's demand counts like any other.
            room = {
                v.name: _reserve_room(v, loads[v.name], request, state, config, count_own_kind=v.name != best.name)
                for v in options
            }
            if room[best.name] < config.reserve_slack:
                free = [v for v in options if room[v.name] >= config.reserve_slack]
                pool = (
                    [v for v in free if v.name in meeting_names] or free or [max(meeting, key=lambda v: room[v.name])]
                )
                kept, _ = pick(pool)
                if kept.name != best.name:
                    best, reason = kept, Reason.SLO_MET_AROUND_RESERVATION
        # With on_violation: reject a request is met or refused, never served late: it neither yields nor goes
        # around tighter requests to a variant merely likely to meet it.
        if config.reserve_slack <= 0 or config.on_violation == "reject":
            return Decision(best.name, reason, predictions)
        # Not at the expense of tighter requests (router.policy): where ``best`` would be left short of room for
        # a tighter kind on the conservative prediction by a prefill longer than that room, a likely variant that
        # it leaves no tighter kind short on.
        room = {v.name: _tighter_room(v, loads[v.name], request, state, config) for v in [best, *likely]}
        if room[best.name] < config.reserve_slack and _prefill_outweighs_slack(best, request, state, config):
            around = [v for v in likely if v.name != best.name and room[v.name] >= config.reserve_slack]
            if around:
                chosen = min(around, key=lambda v: (_expected_ratio(request, predictions[v.name]), -v.quality))
                return Decision(chosen.name, Reason.SLO_MET_AROUND_RESERVATION, predictions)
        if not _crowded_out(best, loads[best.name], request, state, config):
            return Decision(best.name, reason, predictions)
        # Tighter requests already miss on ``best`` (router.reservation.crowded_out): the request gives it up
        # to them for a variant where it crowds out no one, and from here on is a request no variant meets.
        # Where every other variant is as crowded, yielding would only move the harm: it stays.
        others = [
            v for v in admissible if v.name != best.name and not _crowded_out(v, loads[v.name], request, state, config)
        ]
        if not others:
            return Decision(best.name, reason, predictions)
        admissible, missed = others, Reason.YIELDED_TO_RESERVATION

    if config.on_violation == "reject":
        return Decision(
            None,
            Reason.REJECTED_SLO,
            predictions,
            retry_after_s=config.retry_after_s,
            detail="No variant can meet this request's latency targets now; retry later or relax them.",
        )
    if config.shed_ttft_ratio is not None and is_hopeless(
        request, admissible, loads, predictions, config.shed_ttft_ratio
    ):
        return Decision(
            None,
            Reason.SHED_HOPELESS,
            predictions,
            retry_after_s=shed_retry_after_s(request, admissible, predictions, config.retry_after_s),
            detail="Every variant that could take this request has so much work queued that it would miss "
            "its time-to-first-token target several times over; retry after the Retry-After interval.",
        )
    best = min(admissible, key=lambda v: (_expected_ratio(request, predictions[v.name]), -v.quality))
    return Decision(best.name, missed, predictions)


def _home(request: RequestFeatures, variants: Sequence[VariantView], loads: Mapping[str, Load]) -> VariantView:
    """The variant whose idle replica would give ``request`` the most room under its targets."""

    def idle_ratio(view: VariantView) -> float:
        ratio = 0.0
        if request.slo.ttft_ms is not None:
            ratio = idle_ttft_ms(request, view, loads[view.name]) / request.slo.ttft_ms
        if request.slo.tpot_ms is not None:
            ratio = max(ratio, view.latency.predict_tpot_ms(1.0) / request.slo.tpot_ms)
        return ratio

    return min(variants, key=idle_ratio)


def _expected_ratio(request: RequestFeatures, prediction: Prediction) -> float:
    """The *mean* prediction's largest ratio to a target (above 1: a miss): where a request that no variant
    is sure to meet has its best chance. The conservative figures judge "sure to meet"; they are the wrong
    measure here, because a busy variant's error margin is wide and would make it look worse than a slower
    variant that will in fact miss. A ratio, not an overshoot, so that among variants whose mean prediction
    meets the targets the one with the most room wins."""
    ratio = 0.0
    slo = request.slo
    if slo.ttft_ms is not None:
        ratio = prediction.ttft_ms / slo.ttft_ms
    if slo.tpot_ms is not None and request.max_tokens > 1:
        tpot_ratio = prediction.tpot_ms / slo.tpot_ms
        if tpot_ratio > ratio:
            ratio = tpot_ratio
    return ratio


def _most_likely(
    likely: Sequence[VariantView], request: RequestFeatures, predictions: Mapping[str, Prediction]
) -> tuple[VariantView, Reason]:
    """Among variants whose mean prediction meets the SLO while none is sure to, the one with the most room
    (the best quality on a tie). With no variant sure, the chance of meeting comes before the objective: in
    the simulator's two_variant fleet at capacity, the best-quality pick sent interactive chat to the 70B,
    where its mean TPOT sat at the target and 45% missed (docs/sim.md)."""
    return min(likely, key=lambda v: (_expected_ratio(request, predictions[v.name]), -v.quality)), Reason.SLO_LIKELY


def _best_meeting(
    meeting: Sequence[VariantView], predictions: Mapping[str, Prediction], config: RouterConfig
) -> tuple[VariantView, Reason]:
    """The objective's pick among variants that meet the SLO; near-equal ones are split by slack."""

    def by_slack(v: VariantView) -> tuple[float, float, float]:
        return (predictions[v.name].slack, v.quality, -predictions[v.name].ttft_ms)

    if config.objective == "quality":
        floor = max(v.quality for v in meeting) - config.quality_tolerance
        return max((v for v in meeting if v.quality >= floor), key=by_slack), Reason.SLO_MET_BEST_QUALITY
    cheapest = min(v.cost_per_1k_tokens for v in meeting)
    return max((v for v in meeting if v.cost_per_1k_tokens <= cheapest), key=by_slack), Reason.SLO_MET_LOWEST_COST


def _reserve_room(
    view: VariantView,
    load: Load,
    request: RequestFeatures,
    state: RouterState,
    config: RouterConfig,
    *,
    count_own_kind: bool,
) -> float:
    return reserve_room(
        view,
        load,
        request,
        state.exclusive.get(view.name),
        now=state.decisions,
        window=config.reservation_window,
        error_margin_scale=config.error_margin_scale,
        count_own_kind=count_own_kind,
    )


def _crowded_out(
    view: VariantView, load: Load, request: RequestFeatures, state: RouterState, config: RouterConfig
) -> bool:
    return crowded_out(
        view, load, request, state.exclusive.get(view.name), now=state.decisions, window=config.reservation_window
    )


def _tighter_room(
    view: VariantView, load: Load, request: RequestFeatures, state: RouterState, config: RouterConfig
) -> float:
    """The least room a typical request of a kind ``view`` is kept for with tighter targets than ``request``'s
    would find once ``request`` took it, on the conservative prediction; 1 when there is no such kind."""
    own = _targets(request)
    kept_for = [(t, d) for t, d in _live(state.exclusive.get(view.name), state.decisions, config.reservation_window)]
    kept_for = [(t, d) for t, d in kept_for if _tighter(t, own)]
    if not kept_for:
        return 1.0
    return _room(view, _taking(view, load, request), kept_for, config.error_margin_scale)


def _prefill_outweighs_slack(
    view: VariantView, request: RequestFeatures, state: RouterState, config: RouterConfig
) -> bool:
    """Whether ``request``'s prefill on ``view`` takes more than reserve_slack of the TTFT target of a kind kept
    there with tighter targets."""
    own = _targets(request)
    kinds = _live(state.exclusive.get(view.name), state.decisions, config.reservation_window)
    targets = [t[0] for t, _ in kinds if t[0] is not None and _tighter(t, own)]
    prefill_ms = request.prompt_tokens * view.latency.prefill_ms_per_token
    return any(prefill_ms > config.reserve_slack * target for target in targets)


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
    demand: dict[Targets, ExclusiveDemand] | None,
    *,
    now: int,
    window: int,
    error_margin_scale: float,
    count_own_kind: bool = True,
) -> float:
    """The room (as a fraction of its targets, 1 = all of it) that a typical exclusive request of ``view``
    of the tightest kind would find left if ``request`` took ``view`` now; 1 when the variant has no recent
    exclusive demand. ``count_own_kind=False`` leaves out the kind with ``request``'s own targets."""
    own = _targets(request)
    live = [(t, d) for t, d in _live(demand, now, window) if count_own_kind or t != own]
    if not live:
        return 1.0
    return _room(view, _taking(view, load, request), live, error_margin_scale)


def _targets(request: RequestFeatures) -> Targets:
    return (request.slo.ttft_ms, request.slo.tpot_ms)


def _live(
    demand: dict[Targets, ExclusiveDemand] | None, now: int, window: int
) -> list[tuple[Targets, ExclusiveDemand]]:
    """The kinds of exclusive demand seen within the last ``window`` decisions."""
    return [(t, d) for t, d in (demand or {}).items() if now - d.last_decision <= window]


def _taking(view: VariantView, load: Load, request: RequestFeatures) -> Load:
    """``load`` once ``view`` takes ``request``. The request lands on one replica; averaged over the variant
    it adds its share of the prefill queue, of the batch and of the batch's context, as a request routed now
    would find them."""
    replicas = max(view.ready_replicas, view.starting_replicas, 1)
    # Built directly rather than with dataclasses.replace: this runs for every option of every decision.
    return Load(
        running=min(float(load.max_running), load.running + 1.0 / replicas),
        queued=load.queued,
        queued_prompt_tokens=load.queued_prompt_tokens + request.prompt_tokens / replicas,
        waiting_for_slot=load.waiting_for_slot,
        max_running=load.max_running,
        context_tokens=load.context_tokens + request.prompt_tokens / replicas,
        startup_ms=load.startup_ms,
        prefill_tokens_per_s=load.prefill_tokens_per_s,
        decode_tokens_left=load.decode_tokens_left,
        decode_tokens_left_sd=load.decode_tokens_left_sd,
        measured_tpot_ms=load.measured_tpot_ms,
        measured_batch=load.measured_batch,
    )


def crowded_out(
    view: VariantView,
    load: Load,
    request: RequestFeatures,
    demand: dict[Targets, ExclusiveDemand] | None,
    *,
    now: int,
    window: int,
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
    own = _targets(request)
    kept_for = [(t, d) for t, d in _live(demand, now, window) if _tighter(t, own)]
    return bool(kept_for) and _room(view, _taking(view, load, request), kept_for, error_margin_scale=0.0) < 0.0


def _tighter(a: Targets, b: Targets) -> bool:
    """Whether targets ``a`` are at least as tight as ``b`` on both measures and tighter on one (None: no
    target, the loosest)."""

    def bound(value: float | None) -> float:
        return float("inf") if value is None else value

    pairs = [(bound(x), bound(y)) for x, y in zip(a, b, strict=True)]
    return all(x <= y for x, y in pairs) and any(x < y for x, y in pairs)


def _room(
    view: VariantView, load: Load, kinds: list[tuple[Targets, ExclusiveDemand]], error_margin_scale: float
) -> float:
    """The least room (fraction of its targets) a typical request of any of ``kinds`` would find on ``view``
    under ``load``, on predictions inflated by ``error_margin_scale`` times the learned margins."""
    model = view.latency
    room = 1.0
    for (ttft_target, tpot_target), kind in kinds:
        # Both from one pass (LatencyModel.predict_request), at the kind's mean prompt rounded to a token.
        ttft, tpot = _predict_request(view, round(kind.prompt_tokens), load)
        ttft_lift = 1.0 + error_margin_scale * model.ttft_margin_for(round(kind.prompt_tokens))
        tpot_lift = 1.0 + error_margin_scale * model.tpot_margin_for(round(kind.prompt_tokens))
        if ttft_target is not None:
            room = min(room, 1.0 - ttft * ttft_lift / ttft_target)
        if tpot_target is not None:
            room = min(room, 1.0 - tpot * tpot_lift / tpot_target)
    return room


def _route_pinned(request: RequestFeatures, variants: Sequence[VariantView], config: RouterConfig) -> Decision:
    view = next((v for v in variants if v.name == request.pinned), None)
    if view is None:
        return Decision(
            None,
            Reason.REJECTED_UNKNOWN_VARIANT,
            {},
            detail=f"There is no variant {request.pinned!r}.",
        )
    if missing_fields(request, view):
        return reject_unsupported(request, [view])
    if request.prompt_tokens + request.max_tokens > view.context_length:
        return _reject_context(request, view.context_length, f"variant {view.name!r}'s context")
    if serving_replicas(view, config) == 0:
        return _reject_unavailable(view.name, config)
    load = replica_load(view, config)
    predictions = {view.name: predict(request, view, load, config)}
    if load.waiting_for_slot > queue_bound(request.priority, request.sheddable, config):
        return _reject_overloaded(predictions, config)
    return Decision(view.name, Reason.PINNED, predictions)
