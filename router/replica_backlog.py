"""Prefill work still ahead on one replica, from what a router sent it: for choosing a replica within a variant.

Serve's default replica choice (power of two choices) compares ongoing requests, so a short interactive request
lands behind a replica's 10k-token prefill as readily as behind ten decoding chats, and misses its TTFT. The
router sees the prompts it sends, so it can estimate each replica's unprefilled prompt tokens: a replica
prefills first come first served at ``tokens_per_s``; a request's prompt is done ``tokens / tokens_per_s``
after the previous one's (or after its own send, if the replica was idle by then). In the simulator this
choice raised attainment where long and short prompts share replicas (docs/sim.md has the figures).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def prefill_backlog(sent: Iterable[tuple[int, float]], now: float, tokens_per_s: float) -> float:
    """Prompt tokens not yet prefilled at ``now`` of the requests ``sent`` as (prompt tokens, send time)."""
    rate = max(tokens_per_s, 1e-9)
    free_at = float("-inf")  # when the replica finishes the prefills queued so far
    backlog = 0.0
    for tokens, sent_at in sorted(sent, key=lambda item: item[1]):
        done_at = max(free_at, sent_at) + tokens / rate
        free_at = done_at
        backlog += min(float(tokens), max(0.0, (done_at - now) * rate))
    return backlog


def seen_backlog(
    sent: Iterable[tuple[int, float]], reported: tuple[int, float] | None, now: float, tokens_per_s: float
) -> float:
    """The prefill backlog a router sees on one replica: from the prompts *it* sent, or, where larger, from what
    the replica last ``reported`` (its unprefilled prompt tokens, and when it measured them) plus this router's
    prompts sent after that.

    With several ingress replicas each handle sends only part of a replica's prompts, so its own estimate misses
    the long prefill another ingress just sent; the replica's report holds every ingress's prompts up to when it
    was taken. Simulated at the two_variant fleet's capacity, slo's attainment rose from 95.6% to 97.7% with two
    ingress replicas and from 93.2% to 96.1% with four, and not at all with one (docs/routing.md). The
    larger of the two keeps today's estimate where a backend reports no queued prompt tokens (0).
    """
    sent = list(sent)
    own = prefill_backlog(sent, now, tokens_per_s)
    if reported is None:
        return own
    tokens, measured_at = reported
    since = [item for item in sent if item[1] > measured_at]
    return max(own, prefill_backlog([(tokens, measured_at), *since], now, tokens_per_s))


def prefill_ahead(backlog: float, prompt_tokens: int, cached_tokens: int) -> float:
    """Prompt tokens a replica prefills before a request's first token: what is queued there, and the part of the
    request's own prompt it has not cached. Ranking replicas by it weighs cache affinity against load in one unit:
    a replica holding the prefix wins until its queue outgrows what its cache saves, and then the prefix spreads to
    the next replica, which caches it from then on."""
    return backlog + prompt_tokens - cached_tokens


def best_cached(backlogs: Mapping[str, float], cached: Mapping[str, int], prompt_tokens: int) -> int:
    """The cached prompt tokens on the replica with the least prefill ahead of the request (0: none cached, or no
    replica known): what the variant's latency prediction should assume the request finds."""
    if not cached:
        return 0
    best = min(backlogs, key=lambda r: prefill_ahead(backlogs[r], prompt_tokens, cached.get(r, 0)), default=None)
    return 0 if best is None else cached.get(best, 0)
