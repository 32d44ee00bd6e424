"""What a new request would find ahead of it on a variant: engine reports merged with the ingress's own count.

Engine stats arrive every few hundred milliseconds; the ingress's ``inflight`` count is exact but only
covers its own requests. Requests it counts beyond what the engines report are ones the reports have not
caught up with yet: they take free batch slots first (an engine admits a request at once while it has
room), the rest queue.

Prefill work ahead of a new request (prompt tokens not yet prefilled) merges three sources without
counting anything twice:

* the engines' ``queued_prompt_tokens``, less what a replica prefills in the report's age (the model's
  prefill rate; a report is 0.1-0.35 s old, which is thousands of tokens on a GPU);
* plus the prompts of own requests sent *after* the report was taken (``fresh_prompt_tokens``), which no
  report can hold yet (or, with counts only, the in-flight requests beyond the reported ones);
* and never less than the prompts of all own requests still without a first token
  (``unstarted_prompt_tokens``): those are certainly not prefilled, whatever a stale report says.

Running sequences' remaining decode work (``decode_tokens_left``, from the own requests' max_tokens and
progress) sets how soon a batch slot frees; the recent prompt-token rate (``prefill_tokens_per_s``) sets
how much prefill the new request's decode steps will share; and the pace the engines' sequences decoded at
lately (``recent_tpot_ms``, at ``recent_decode_batch``) is the floor under the TPOT the model predicts.
The KV context of the running batch is the engines' report (``context_tokens``) where they give one, and
never less than the prompts of the ingress's own requests that are decoding (:func:`decoding_context`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from router.config import RouterConfig
from router.latency import Load
from router.types import VariantView


def serving_replicas(view: VariantView, config: RouterConfig) -> int:
    """Replicas that can take a request: the ready ones, else the starting ones where waiting is allowed."""
    if view.ready_replicas > 0:
        return view.ready_replicas
    return view.starting_replicas if config.wait_for_starting_replicas else 0


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
    # Replicas being started add their slots when they serve: a request that finds every slot taken waits for the
    # first of the running sequences to finish or for them, whichever is sooner, while the requests queued ahead of
    # it leave one of their slots for it. Without this the router refused, during a step's scale-up, the very
    # requests the replicas about to serve could take in time (docs/autoscaling.md).
    slot_by_ms = math.inf
    starting = view.starting_replicas
    if (
        waiting_for_slot
        and ready
        and starting
        and view.starting_ready_in_ms > 0.0
        and queued - free < starting * slots_per_replica
    ):
        slot_by_ms = view.starting_ready_in_ms

    # Prefill work ahead: the report less what was prefilled since, plus what was sent after it, and never
    # less than the prompts of own requests without a first token (queued_prompt_tokens, the long form).
    reported = float(view.queued_prompt_tokens)
    if reported > 0 and view.report_age_ms > 0:
        prefill_ms = view.latency.prefill_ms_per_token
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
    # Positional, in Load's field order: passing twelve keywords cost a quarter of this function (every
    # field is checked against the keyword form in tests/router/test_route_equivalence.py).
    return Load(
        running / replicas,  # running
        queued / replicas,  # queued
        ahead / replicas,  # queued_prompt_tokens
        waiting_for_slot,
        slots_per_replica,  # max_running
        float(context if context > 0 else 0) / replicas,  # context_tokens
        0.0 if ready else config.replica_startup_ms,  # startup_ms
        view.prefill_tokens_per_s / replicas,  # prefill_tokens_per_s
        view.decode_tokens_left,
        view.recent_tpot_ms if pace else 0.0,  # measured_tpot_ms
        view.recent_decode_batch / replicas if pace else 0.0,  # measured_batch
        view.decode_tokens_left_sd,
        slot_by_ms,
    )


def decoding_context(view: VariantView) -> float:
    """Tokens of KV cache the variant's running sequences hold: the engines' report, and never less than the
    prompts of the ingress's own requests that have started decoding. Prompts still waiting for prefill are
    left out: their cost is prefill (the TPOT model's interference term), and counting them here taught the
    context weight the prefill's cost in the simulator, where decode steps do not grow with context."""
    own_decoding = view.inflight_prompt_tokens - view.unstarted_prompt_tokens
    return float(max(view.context_tokens, own_decoding, 0))


def decode_pace(replicas: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """A variant's pace from its replicas' ``(recent_tpot_ms, recent_decode_batch)``: the mean time between
    tokens over all their decoding sequences (each replica weighted by its batch; 0.0 when none decoded)
    and the total batch."""
    batch = 0.0
    weighted = 0.0
    for tpot_ms, decode_batch in replicas:
        if tpot_ms > 0.0 and decode_batch > 0.0:
            batch += decode_batch
            weighted += tpot_ms * decode_batch
    return (weighted / batch if batch > 0.0 else 0.0), batch


def queued_prompt_tokens(view: VariantView, unseen_tokens: float, replicas: int) -> float:
    """Prompt tokens of the whole variant waiting for prefill (see the module docstring for the merge)."""
    reported = float(view.queued_prompt_tokens)
    if reported > 0 and view.report_age_ms > 0:
        drained = replicas * view.report_age_ms / max(view.latency.prefill_ms_per_token, 1e-9)
        reported = max(0.0, reported - drained)
    since_report = max(float(view.fresh_prompt_tokens), unseen_tokens)
    return max(reported + since_report, float(view.unstarted_prompt_tokens))


def queue_bound(priority: int, sheddable: bool, config: RouterConfig) -> float:
    """How many requests per replica a request accepts waiting for a slot ahead of (and including) itself."""
    base = config.sheddable_queue_bound_per_replica if sheddable else config.queue_bound_per_replica
    return max(0, base + priority * config.queue_bound_per_priority)
