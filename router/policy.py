"""The routing decision: which variant takes a request, or why none does.

``route`` is a pure function of the request, the variants' views and the config, apart from the small
explicit :class:`~router.types.RouterState` (the round-robin position). It never raises for load: an
overloaded or unavailable system is a rejection :class:`~router.types.Decision` with a reason and a
Retry-After; ``router.rejections`` names the error each reason is, which each protocol then answers.

Order of the checks, for every policy:

1. A pinned request goes to its variant or is rejected (404 unknown, 400 a sampling field its backend does not
   implement, 400 too long, 503, 429).
2. Only variants whose backend implements every optional sampling field the request asks for (penalties,
   logit_bias, ...: ``RequestFeatures.sampling_fields``) are candidates (none: 400 naming a field), and of them
   only those whose context holds prompt + max_tokens (none: 400).
3. Only variants with a serving replica are candidates (none: 503): ready ones, or starting ones when
   ``wait_for_starting_replicas`` (their predicted TTFT then carries the startup time).
4. The policy picks. ``slo``: among the variants within the request's queue bound (none: 429), the best
   quality (or lowest cost) predicted to meet the SLO; else degrade to the smallest predicted violation
   or reject (429). Baselines pick by their rule, then the pick must be within the queue bound (429).

How ``slo`` judges, and why:

* **Conservatively.** A variant meets the SLO only if its prediction *inflated by its own error margin*
  does: ``predicted * (1 + error_margin_scale * margin)`` (scale 1.5 by default), where ``margin`` is the
  upper quantile (0.97 by default) of how far outcomes exceeded that variant's decision-time
  predictions, learned online per class of prompt length (``LatencyModel.ttft_margin_for`` /
  ``tpot_margin_for``). Missing an SLO costs the whole request while an unneeded spill to a smaller variant
  costs a little quality, so the
  decision hedges against the errors the model actually makes (load arriving after the decision,
  stale reports), and by as much as they are, per variant: a well-predicted variant keeps a small
  margin, an erratic one a large one. ``slo_headroom`` stays as a fixed margin on top, for a model
  with no errors seen yet. The defaults were chosen in the simulator's built-in scenario, where they left the
  fewest interactive misses (docs/measurements.md).
* **Quality first, with a tolerance.** Variants whose quality is within ``quality_tolerance`` of the
  best meeting one count as equal; among them the one with the most *slack* (relative room under the
  targets) wins, which spreads load toward the less loaded of near-equal variants instead of filling
  one to the edge of its SLO. Objective ``cost`` takes the cheapest meeting variant, ties by slack.
* **Spill before degrading.** Every admissible variant meeting the SLO (the smaller ones included) is
  tried before any degrades; only when none meets does the request go to the smallest predicted
  (conservative) violation, or get rejected with ``on_violation: reject``. A request the queues make
  hopeless everywhere is shed with a 429 rather than degraded (``shed_ttft_ratio``, ``router.shedding``).
* **Sure, then likely.** When no variant is sure to meet the SLO, those whose *mean* prediction meets it
  are chosen from by the most room (``slo_likely``): the chance of meeting comes before quality. Under
  ``on_violation: reject`` the mean must clear ``slo_headroom`` too: a request refused is better than a bet
  that loses and holds a slot meanwhile.
* **Room for those with nowhere else to go** (``router.reservation``). A variant recently the only one sure
  to meet some kind of request (or, when none is sure, the one suiting it best idle) keeps room for that kind:
  a request that meets its SLO elsewhere goes there instead, and so does one sure to be met elsewhere while the
  variant holds work that only it could take (``holds_exclusive``). Past capacity, a request looser than a kind
  it would make miss on its variant yields the variant to them (``yielded_to_reservation``).
* **Not at the expense of tighter requests.** A request that would leave a tighter kind kept on its variant with
  less than ``reserve_slack`` of room (conservative prediction), with a prefill longer than that room, goes to a
  variant likely to meet it where it leaves no tighter kind short (``slo_met_around_reservation``): it has the
  slack to take a likely variant, and the kept kind's mean room understates what a long prefill does to the
  short requests queued behind it on a replica.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from router.baselines import BASELINES
from router.config import RouterConfig
from router.latency import (
    _MAX_PREFILL_SHARE,
    LatencyModel,
    Load,
    clamp_slowdown,
    margin_class,
    slot_wait_tokens,
)
from router.load import queue_bound, replica_load, serving_replicas
from router.reservation import (
    crowded_out,
    holds_exclusive,
    prefill_outweighs_slack,
    record_exclusive,
    reserve_room,
    tighter_room,
)
from router.shedding import is_hopeless
from router.shedding import retry_after_s as shed_retry_after_s
from router.types import Decision, Prediction, Reason, RequestFeatures, RouterState, VariantView, ttft_budget


def route(
    request: RequestFeatures, variants: Sequence[VariantView], config: RouterConfig, state: RouterState
) -> Decision:
    """Picks the variant for ``request`` (see the module docstring for the rules)."""
    return _decide(request, variants, config, state, idle=False)


def route_idle(request: RequestFeatures, variants: Sequence[VariantView], config: RouterConfig) -> Decision:
    """The decision :func:`route` would make with a fresh :class:`RouterState` if every variant had a free
    ready replica and nothing running or queued (``router.redirect.idle``'s views): where a request would go
    on an idle fleet. The same Decision as ``route(request, [idle(v) for v in variants], config,
    RouterState())`` (tests/router/test_route_idle.py), without building those views: at sixteen variants
    building them costs more than the decision on them (docs/measurements.md)."""
    return _decide(request, variants, config, RouterState(), idle=True)


def _idle_load(view: VariantView) -> Load:
    """``replica_load`` of ``router.redirect.idle(view)``: only the batch slots are left of the view's figures."""
    slots = view.max_running_requests if view.max_running_requests > 1 else 1
    return Load(0.0, 0.0, 0.0, 0.0, slots)


def _decide(
    request: RequestFeatures, variants: Sequence[VariantView], config: RouterConfig, state: RouterState, *, idle: bool
) -> Decision:
    state.decisions += 1
    if request.pinned is not None:
        return _route_pinned(request, variants, config, idle=idle)

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

    candidates = fitting  # an idle fleet has a ready replica of every variant
    if not idle:
        waits = config.wait_for_starting_replicas  # serving_replicas(v, config) > 0, inline
        candidates = [v for v in fitting if v.ready_replicas > 0 or (waits and v.starting_replicas > 0)]
    if not candidates:
        return _reject_unavailable(", ".join(v.name for v in fitting), config)

    # One pass over the candidates: each one's load and prediction, and for the SLO policy which are within
    # the queue bound (admissible) and of those sure to meet the SLO. The rest of the decision reads these.
    bound = queue_bound(request.priority, request.sheddable, config)
    judge = _Judge(request, config)
    loads: dict[str, Load] = {}
    predictions: dict[str, Prediction] = {}
    admissible: list[VariantView] = []
    sure: list[VariantView] = []
    # Of the admissible ones also the mean prediction's ratio to the targets and which are likely to meet (see
    # _route_slo): a division or two each here, against a second pass over them that most decisions made
    # (for the likely pick, the reservation's other options, the degrade).
    likely: list[VariantView] = []
    expected: dict[str, float] = {}
    # Under 'reject' a request admitted on the mean alone is a bet that holds a slot; judged at the targets
    # themselves it lost more than half the time at a 10x step (15 of 27 on the real stack), each loss late and in
    # the way of a request on time. There it must clear the same headroom a sure one does, on the mean (simulator,
    # 20 seeds: step +0.9, bursts +3.2 points; docs/autoscaling.md).
    likely_bar = 1.0 - config.slo_headroom if config.on_violation == "reject" else 1.0
    for view in candidates:
        load = _idle_load(view) if idle else replica_load(view, config)
        prediction = judge.predict(view.latency, load, view.cached_prompt_tokens)
        name = view.name
        loads[name] = load
        predictions[name] = prediction
        if load.waiting_for_slot <= bound:
            admissible.append(view)
            if prediction.meets_slo:
                sure.append(view)
            ratio = judge.ratio
            expected[name] = ratio
            if ratio <= likely_bar:
                likely.append(view)

    if config.policy == "slo":
        return _route_slo(
            request, candidates, loads, predictions, admissible, sure, likely, expected, config, state, idle=idle
        )
    choose, reason = BASELINES[config.policy]
    chosen = choose(request, candidates, loads, config, state)
    if loads[chosen.name].waiting_for_slot > bound:
        return _reject_overloaded(predictions, config)
    return Decision(chosen.name, reason, predictions)


def predict(request: RequestFeatures, view: VariantView, load: Load, config: RouterConfig) -> Prediction:
    """The latency ``view`` is predicted to give ``request`` under ``load``, judged against its SLO on the
    prediction inflated by the variant's learned error margin (see the module docstring)."""
    return _Judge(request, config).predict(view.latency, load, view.cached_prompt_tokens)


class _Judge:
    """Predicts and judges one request on each candidate: what depends only on the request and the config
    (its targets shrunk by the headroom, the margin scale) is worked out once per decision, not per candidate.

    :meth:`predict` is ``LatencyModel.predict_request`` with the judging written into it, reading the model's
    snapshot (``LatencyModel._coefficients``) directly: one call per candidate instead of three, and each load
    figure read once (tests/router/test_route_equivalence.py holds it to the long forms)."""

    __slots__ = (
        "margin_class",
        "margin_scale",
        "prompt_tokens",
        "ratio",
        "tpot_limit",
        "tpot_target",
        "ttft_limit",
        "ttft_target",
    )

    def __init__(self, request: RequestFeatures, config: RouterConfig) -> None:
        slo = request.slo
        # Targets shrink by the headroom, so a prediction that is a little optimistic still lands inside.
        scale = 1.0 - config.slo_headroom
        self.prompt_tokens = request.prompt_tokens
        self.margin_scale = config.error_margin_scale
        # Each variant's margins for this prompt's class of length (LatencyModel.ttft_margin_for): the same for
        # every candidate, so found once.
        self.margin_class = margin_class(request.prompt_tokens)
        # The part of the client's TTFT that no latency model sees (RouterConfig.ttft_path_ms) comes off the target.
        self.ttft_target = None if slo.ttft_ms is None else ttft_budget(slo.ttft_ms, config.ttft_path_ms)
        self.ttft_limit = None if self.ttft_target is None else self.ttft_target * scale
        # A single-token answer has no time per output token to miss.
        self.tpot_target = slo.tpot_ms if request.max_tokens > 1 else None
        self.tpot_limit = None if self.tpot_target is None else self.tpot_target * scale
        # The last prediction's mean figures' largest ratio to a target (see _route_slo), set by predict.
        self.ratio = 0.0

    def predict(self, model: LatencyModel, load: Load, cached_tokens: int = 0) -> Prediction:
        prompt_tokens = self.prompt_tokens
        # LatencyModel.predict_request, inline (keep the two in step; tests/router/test_latency.py checks it).
        (
            at_batch_1,
            per_extra_seq,
            ms_per_prefill_token,
            per_context_token,
            base,
            ms_per_token,
            mean_output_tokens,
            steps,
        ) = model._coefficients
        running_now = load.running
        rate = load.prefill_tokens_per_s
        share = ms_per_prefill_token * (rate if rate > 0.0 else 0.0) / 1000.0
        free = 1.0 - (share if share < _MAX_PREFILL_SHARE else _MAX_PREFILL_SHARE)
        context = load.context_tokens
        max_running = load.max_running
        batch = running_now + load.queued + 1.0  # Load.batch_when_running, inline
        if max_running < batch:
            batch = float(max_running)
        batch_ms = per_extra_seq * (batch - 1.0 if batch > 1.0 else 0.0)
        context_ms = per_context_token * (context + prompt_tokens)
        tpot = (at_batch_1 + batch_ms + context_ms) / free
        measured_tpot_ms = load.measured_tpot_ms
        margin_class = self.margin_class
        tpot_margin = model._tpot_errors[margin_class].value
        slow = 1.0
        if measured_tpot_ms > 0.0:
            measured_batch = load.measured_batch if load.measured_batch > 1.0 else 1.0
            at_measured = (at_batch_1 + per_extra_seq * (measured_batch - 1.0) + per_context_token * context) / free
            lift = 1.0 + tpot_margin
            measured = measured_tpot_ms * tpot / at_measured / lift
            if measured > tpot:
                tpot = measured
            # LatencyModel.slowdown: the measured pace stretches the TTFT's step-bound work too.
            slow = clamp_slowdown(measured_tpot_ms / at_measured / lift)
        waiting_for_slot = load.waiting_for_slot
        slot_wait = 0.0
        if waiting_for_slot:
            # The running batch's TPOT, for the wait for a slot (only then: most candidates have a free one).
            running = running_now if running_now > 1.0 else 1.0
            tpot_running = (at_batch_1 + per_extra_seq * (running - 1.0) + per_context_token * context) / free
            if measured_tpot_ms > 0.0:
                measured = measured_tpot_ms * tpot_running / at_measured / lift
                if measured > tpot_running:
                    tpot_running = measured
            # Not inlined like the rest of the judge: this branch runs only for a variant with no free slot.
            tokens_left = load.decode_tokens_left
            slot_tokens = slot_wait_tokens(
                waiting_for_slot,
                running,
                None if tokens_left is None else (tokens_left if tokens_left > 1.0 else 1.0),
                mean_output_tokens,
                load.decode_tokens_left_sd,
            )
            slot_wait = slot_tokens * tpot_running / running
            if slot_wait > load.slot_by_ms:  # replicas starting with room for it serve sooner (router.load)
                slot_wait = load.slot_by_ms
        queued_prompt_tokens = load.queued_prompt_tokens
        ttft = (
            base
            + slow
            * ((prompt_tokens - cached_tokens + queued_prompt_tokens) * ms_per_token + steps * (batch_ms + context_ms))
            + slot_wait
            + load.startup_ms
        )

        margin_scale = self.margin_scale
        ttft_upper = ttft * (1.0 + margin_scale * model._ttft_errors[margin_class].value)
        tpot_upper = tpot * (1.0 + margin_scale * tpot_margin)
        violation = 0.0
        slack = 1.0
        # Conditionals rather than min/max calls: this runs for every candidate of every decision.
        limit = self.ttft_limit
        if limit is not None:
            ratio = ttft_upper / limit
            if ratio > 1.0:
                violation += ratio - 1.0
            if 1.0 - ratio < slack:
                slack = 1.0 - ratio
        limit = self.tpot_limit
        if limit is not None:
            ratio = tpot_upper / limit
            if ratio > 1.0:
                violation += ratio - 1.0
            if 1.0 - ratio < slack:
                slack = 1.0 - ratio
        # The mean figures' largest ratio to a target (a single-token answer has no TPOT target here either).
        target = self.ttft_target
        mean_ratio = 0.0 if target is None else ttft / target
        target = self.tpot_target
        if target is not None and tpot / target > mean_ratio:
            mean_ratio = tpot / target
        self.ratio = mean_ratio
        # Positional, in Prediction's field order (keywords cost more than the judging above).
        return Prediction(
            ttft,
            tpot,
            violation == 0.0,  # meets_slo
            violation,
            batch,  # batch_size
            queued_prompt_tokens,  # queued_tokens_ahead
            waiting_for_slot,
            context + prompt_tokens,  # context_tokens
            ttft_upper,  # ttft_upper_ms
            tpot_upper,  # tpot_upper_ms
            slack,
            slow,  # slowdown
            cached_tokens,
        )


def _route_slo(
    request: RequestFeatures,
    candidates: Sequence[VariantView],
    loads: Mapping[str, Load],
    predictions: dict[str, Prediction],
    admissible: list[VariantView],
    sure: list[VariantView],
    likely: list[VariantView],
    expected: dict[str, float],
    config: RouterConfig,
    state: RouterState,
    *,
    idle: bool = False,
) -> Decision:
    """The SLO policy's pick among ``candidates`` (``idle``: as on an idle fleet, :func:`route_idle`).

    ``likely`` are the admissible variants whose *mean* prediction meets the SLO, and ``expected`` each
    admissible one's mean prediction's largest ratio to a target (above 1: a miss), both from the candidates'
    pass in :func:`_decide`: where a request that no variant is sure to meet has its best chance, and where a
    request may go when the sure ones are reserved for others. The conservative figures judge "sure to meet";
    they are the wrong measure here, because a busy variant's error margin is wide and would make it look worse
    than a slower variant that will in fact miss. A ratio, not an overshoot, so that among variants whose mean
    prediction meets the targets the one with the most room wins."""
    if not admissible:
        return _reject_overloaded(predictions, config)

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
            return _best_meeting(pool, predictions, config) if sure else _most_likely(pool, expected)

        best, reason = pick(meeting)
        # A request never leaves its best variant for the sake of its own kind (the next one of them would
        # face the same choice); where it might go, its own kind's demand counts like any other. The other
        # options (and which are likely, where some are sure) are asked only when the best one's room is
        # short: reserve_room and the ratios are pure, so not working them out where they would not be read
        # changes nothing.
        if config.reserve_slack > 0:
            best_room = reserve_room(best, loads[best.name], request, state, config, count_own_kind=False)
            short = best_room < config.reserve_slack
            # Work that only ``best`` could take is on it (router.reservation.holds_exclusive) and another variant
            # is sure to meet this request: it goes there rather than into that work's steps, whatever the
            # predicted room says (the mixed steps are what the model under-predicts). Not on an idle fleet.
            mixing = not idle and len(sure) > 1 and holds_exclusive(best, candidates)
            if short or mixing:
                meeting_names = {v.name for v in meeting}
                options = meeting + [v for v in likely if v.name not in meeting_names]
                if len(options) > 1:
                    room = {best.name: best_room}
                    for v in options:
                        if v.name != best.name:
                            room[v.name] = reserve_room(v, loads[v.name], request, state, config, count_own_kind=True)
                    free = [v for v in options if room[v.name] >= config.reserve_slack]
                    if short:
                        pool = (
                            [v for v in free if v.name in meeting_names]
                            or free
                            or [max(meeting, key=lambda v: room[v.name])]
                        )
                    else:  # room enough on ``best``: only a sure variant with room and no such work of its own
                        pool = [
                            v
                            for v in free
                            if v.name in meeting_names and v.name != best.name and not holds_exclusive(v, candidates)
                        ] or [best]
                    kept, _ = pick(pool)
                    if kept.name != best.name:
                        best, reason = kept, Reason.SLO_MET_AROUND_RESERVATION
        # With on_violation: reject a request is met or refused, never served late: it neither yields nor goes
        # around tighter requests to a variant merely likely to meet it.
        if config.reserve_slack <= 0 or config.on_violation == "reject":
            return Decision(best.name, reason, predictions)
        # Not at the expense of tighter requests: where taking ``best`` would leave a tighter kind kept there
        # short of room on the conservative prediction, and the request's own prefill alone would take more than
        # that room (reserve_slack of the kind's TTFT target), the request goes to a variant likely to meet it
        # (mean prediction) where it leaves no tighter kind short. Each decision judges only the request in hand,
        # and the mean room, spread over the replicas, understates what a long prefill does to the short requests
        # queued behind it on its replica: in the simulator's two_variant fleet at capacity the 8B took long RAG
        # prompts while its interactive chat was short of room, and 88% of the chats that missed their TTFT there
        # had such a prefill ahead of them (docs/sim.md, "Not at the expense of tighter requests"). The looser
        # request has the slack to take a likely rather than a sure variant. Short prompts are left out: moving
        # them spares the kept kind little, and in the tiers fleet, where standard chat is as short as the
        # interactive chat, moving it too cost attainment.
        load = loads[best.name]
        scale, slack = config.error_margin_scale, config.reserve_slack
        if tighter_room(best, load, request, state, config, scale) >= slack:
            return Decision(best.name, reason, predictions)  # the mean leaves room too: not crowded out either
        if prefill_outweighs_slack(best, request, state, config):
            around = [
                v
                for v in likely
                if v.name != best.name and tighter_room(v, loads[v.name], request, state, config, scale) >= slack
            ]
            if around:
                best = _least_expected(around, expected)
                return Decision(best.name, Reason.SLO_MET_AROUND_RESERVATION, predictions)
        if not crowded_out(best, load, request, state, config):
            return Decision(best.name, reason, predictions)
        # Tighter requests already miss on ``best`` (router.reservation.crowded_out): the request gives it up
        # to them for a variant where it crowds out no one, and from here on is a request no variant meets.
        # Where every other variant is as crowded, yielding would only move the harm: it stays.
        others = [
            v for v in admissible if v.name != best.name and not crowded_out(v, loads[v.name], request, state, config)
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
    best = _least_expected(admissible, expected)
    return Decision(best.name, missed, predictions)


def _home(request: RequestFeatures, variants: Sequence[VariantView], loads: Mapping[str, Load]) -> VariantView:
    """The variant whose idle replica would give ``request`` the most room under its targets."""
    ttft_target = request.slo.ttft_ms
    tpot_target = request.slo.tpot_ms
    home = variants[0]
    least = float("inf")
    # min(variants, key=idle ratio) written out: the first of the least ratio wins, as with min. The idle
    # predictions come from the model's snapshot (LatencyModel.predict_idle_ttft_ms, idle_tpot_ms).
    prompt_tokens = request.prompt_tokens
    for i, view in enumerate(variants):
        ratio = 0.0
        model = view.latency
        if ttft_target is not None:
            # router.shedding.idle_ttft_ms, i.e. LatencyModel.predict_idle_ttft_ms, inline (the same arithmetic in
            # the same order: it is asked of every candidate of a decision no variant is sure of).
            _, _, _, per_context_token, base, ms_per_token, _, steps = model._coefficients
            idle_ttft = (
                base
                + (prompt_tokens * ms_per_token + steps * (per_context_token * prompt_tokens))
                + loads[view.name].startup_ms
            )
            ratio = idle_ttft / ttft_target
        if tpot_target is not None:
            tpot_ratio = model.idle_tpot_ms / tpot_target
            if tpot_ratio > ratio:
                ratio = tpot_ratio
        if i == 0 or ratio < least:
            home, least = view, ratio
    return home


def _most_likely(likely: Sequence[VariantView], expected: Mapping[str, float]) -> tuple[VariantView, Reason]:
    """Among variants whose mean prediction meets the SLO while none is sure to, the one with the most room
    (the best quality on a tie). With no variant sure, the chance of meeting comes before the objective: in
    the simulator's two_variant fleet at capacity, the best-quality pick sent interactive chat to the 70B,
    where its mean TPOT sat at the target and much of it missed (docs/sim.md)."""
    return _least_expected(likely, expected), Reason.SLO_LIKELY


def _least_expected(variants: Sequence[VariantView], expected: Mapping[str, float]) -> VariantView:
    """``min(variants, key=lambda v: (expected[v.name], -v.quality))`` without a call per variant: the same
    comparisons of the same keys, the first of equals kept."""
    best = variants[0]
    best_key = (expected[best.name], -best.quality)
    for v in variants[1:]:
        key = (expected[v.name], -v.quality)
        if key < best_key:
            best, best_key = v, key
    return best


def _best_meeting(
    meeting: Sequence[VariantView], predictions: Mapping[str, Prediction], config: RouterConfig
) -> tuple[VariantView, Reason]:
    """The objective's pick among variants that meet the SLO; near-equal ones are split by slack."""

    # max(..., key=by (slack, quality, -ttft)) over the pool, written out: the same comparisons of the same keys
    # (the first of equals kept), without a key call per variant.
    best: VariantView | None = None
    best_key = (0.0, 0.0, 0.0)
    if config.objective == "quality":
        top = meeting[0].quality
        for v in meeting:
            if v.quality > top:
                top = v.quality
        floor = top - config.quality_tolerance
        for v in meeting:
            if v.quality >= floor:
                p = predictions[v.name]
                key = (p.slack, v.quality, -p.ttft_ms)
                if best is None or key > best_key:
                    best, best_key = v, key
        reason = Reason.SLO_MET_BEST_QUALITY
    else:
        cheapest = meeting[0].cost_per_1k_tokens
        for v in meeting:
            if v.cost_per_1k_tokens < cheapest:
                cheapest = v.cost_per_1k_tokens
        for v in meeting:
            if v.cost_per_1k_tokens <= cheapest:
                p = predictions[v.name]
                key = (p.slack, v.quality, -p.ttft_ms)
                if best is None or key > best_key:
                    best, best_key = v, key
        reason = Reason.SLO_MET_LOWEST_COST
    if best is None:  # only with a NaN figure, where max() raised
        raise ValueError("no variant to pick among")
    return best, reason


def _route_pinned(
    request: RequestFeatures, variants: Sequence[VariantView], config: RouterConfig, *, idle: bool
) -> Decision:
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
    if not idle and serving_replicas(view, config) == 0:
        return _reject_unavailable(view.name, config)
    load = _idle_load(view) if idle else replica_load(view, config)
    predictions = {view.name: predict(request, view, load, config)}
    if load.waiting_for_slot > queue_bound(request.priority, request.sheddable, config):
        return _reject_overloaded(predictions, config)
    return Decision(view.name, Reason.PINNED, predictions)


def missing_fields(request: RequestFeatures, view: VariantView) -> list[str]:
    """The sampling fields ``request`` asks for that ``view``'s backend does not implement, sorted."""
    if view.sampling_fields is None:
        return []
    return sorted(request.sampling_fields - view.sampling_fields)


def reject_unsupported(request: RequestFeatures, variants: Sequence[VariantView]) -> Decision:
    """A 400 naming a field: one no variant implements, else (each is somewhere, never all in one) the first
    field the first variant lacks."""
    wanted = request.sampling_fields
    implemented = set().union(*(wanted if v.sampling_fields is None else v.sampling_fields for v in variants))
    nowhere = sorted(wanted - implemented)
    name = nowhere[0] if nowhere else missing_fields(request, variants[0])[0]
    if len(variants) == 1:
        detail = f"'{name}' is not implemented by variant {variants[0].name!r}'s engine"
    elif nowhere:
        detail = f"'{name}' is not implemented by the engine of any variant"
    else:
        detail = f"No variant's engine implements {', '.join(sorted(wanted))} together ('{name}' is one)"
    return Decision(
        None,
        Reason.REJECTED_UNSUPPORTED_FIELD,
        {},
        detail=f"{detail}, so the request is refused rather than the field ignored: remove it, or send the "
        "request to a model whose engine implements it.",
        param=name,
    )


def _reject_context(request: RequestFeatures, context_length: int, what: str) -> Decision:
    return Decision(
        None,
        Reason.REJECTED_CONTEXT,
        {},
        detail=f"The prompt ({request.prompt_tokens} tokens) plus max_tokens ({request.max_tokens}) "
        f"needs {request.prompt_tokens + request.max_tokens} tokens, more than {what} "
        f"({context_length}). Shorten the prompt or lower max_tokens.",
    )


def _reject_unavailable(names: str, config: RouterConfig) -> Decision:
    return Decision(
        None,
        Reason.REJECTED_UNAVAILABLE,
        {},
        retry_after_s=config.retry_after_s,
        detail=f"No replica of {names} is serving now.",
    )


def _reject_overloaded(predictions: dict[str, Prediction], config: RouterConfig) -> Decision:
    return Decision(
        None,
        Reason.REJECTED_OVERLOADED,
        predictions,
        retry_after_s=config.retry_after_s,
        detail="Every variant that could take this request is at its queue limit; retry later.",
    )
