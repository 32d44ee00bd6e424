"""The ingress's own book of routed requests: what they add to the load views, and what they teach.

Pure bookkeeping with the clock passed in (``now``, seconds on any monotonic clock), so that the serve
app (``time.monotonic()``) and the simulator (simulated time) run the same code.

Per variant it keeps, cheaply enough for every decision:

* open requests and their prompt tokens (``inflight``), and the ones with no first token yet
  (``unstarted``): prefill work that is certainly still ahead of a new request;
* per ticket its send time, so that :meth:`InflightBook.annotate` can tell which unstarted prompts were
  sent after an engine report was taken (a report cannot hold them yet);
* a decaying rate of prompt tokens sent (``prefill_tokens_per_s``): the prefill a new request's decode
  steps will share; and a running total, from which each request measures the prefill its own decode
  steps actually shared (the TPOT model's interference feature);
* sums over decoding requests of ``max_tokens``, predicted speed and first-token times, from which the
  mean decode work they have left follows in O(1) (each progressing at its predicted TPOT).

Feedback: TTFT is learned at the first token (not at the end of a long answer); TPOT once midway, at
:data:`TPOT_CHECKPOINT_TOKENS` generated tokens or half the answer (:meth:`InflightBook.progress`), and for the
rest at the close;
failures and timeouts teach a *censored* value — the time already waited is a lower bound, which moves
the model only when it is above the prediction (see ``LatencyModel``), so the worst cases are not
silently dropped while an early client disconnect teaches nothing.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace

from router.latency import LatencyModel
from router.types import Prediction, VariantView

# Time constant of the prompt-token rate: long enough to smooth single arrivals, short enough to follow
# a spike within a few seconds (a request's decode lasts seconds).
RATE_TIME_CONSTANT_S = 5.0
# A request teaches TPOT for its first tokens once it has this many (or half its max_tokens, if fewer), rather
# than only when it ends: at load one answer can outlast half a bench point, and until then the router decides
# on its seed figures (docs/measurements.md).
TPOT_CHECKPOINT_TOKENS = 16


@dataclass(slots=True, eq=False)
class RouteTicket:
    """One routed request: what its decision assumed, and its times as they come back."""

    variant: str
    prompt_tokens: int
    prediction: Prediction | None
    start: float
    max_tokens: int = 0
    replicas: int = 1  # serving replicas when it was sent: the share of the variant's prefill it sees
    first_token_at: float | None = None
    # When its TTFT clock started: its arrival at the ingress, so that the model learns the ingress's own work
    # before dispatch (parsing, tokenizing, a busy event loop) as part of TTFT. None: at dispatch (``start``).
    arrived_at: float | None = None
    prefill_sent_at_first_token: float = 0.0  # the variant's prompt-token total when its decode began
    # Where the TPOT checkpoint (InflightBook.progress) cut its decode: the close teaches only what follows.
    checkpoint_at: float | None = None
    checkpoint_tokens: int = 1
    prefill_sent_at_checkpoint: float = 0.0
    done: bool = False

    @property
    def checkpoint(self) -> int:
        """Generated tokens at which :meth:`InflightBook.progress` teaches TPOT (0: never; too short)."""
        tokens = min(TPOT_CHECKPOINT_TOKENS, self.max_tokens // 2)
        return tokens if tokens >= 3 else 0

    def headers(self) -> dict[str, str]:
        """``x-route-predicted-ttft-ms`` / ``x-route-predicted-tpot-ms`` of the chosen variant (empty
        without a prediction): the mean predictions, which a client can compare with what it measures."""
        if self.prediction is None:
            return {}
        return {
            "x-route-predicted-ttft-ms": f"{self.prediction.ttft_ms:.0f}",
            "x-route-predicted-tpot-ms": f"{self.prediction.tpot_ms:.1f}",
        }


def _long_inflight(needed: dict[int, int], replicas: int) -> int:
    """The ``replicas``-th largest of the open requests' prompt + max_tokens (0: fewer open than that): spread over
    the replicas, each one holds a request at least this long. One replica: the longest."""
    if replicas <= 1:
        return max(needed.values()) if needed else 0
    if len(needed) < replicas:
        return 0
    return heapq.nlargest(replicas, needed.values())[-1]


@dataclass(slots=True)
class _VariantBook:
    requests: int = 0
    prompt_tokens: int = 0
    unstarted: dict[int, RouteTicket] = field(default_factory=dict)  # id(ticket) -> ticket
    unstarted_prompt_tokens: int = 0
    # id(ticket) -> prompt + max_tokens of every open request: what a replica must hold for it (the longest
    # ones tell the policy which requests only this variant could take are on it, router.reservation.holds_exclusive).
    needed: dict[int, int] = field(default_factory=dict)
    decoding: int = 0  # started, not closed, more than one token asked for
    decoding_max_tokens: float = 0.0  # sum of their max_tokens - 1
    decoding_rate: float = 0.0  # sum of their predicted tokens per second
    decoding_rate_first_at: float = 0.0  # sum of first-token time x predicted tokens per second
    # For the spread of their remaining work (decode_tokens_left_sd): with a_i = max_tokens - 1 + speed x (first-token
    # time - decoding_origin), a request's remaining work at ``now`` is a_i - speed x (now - decoding_origin); the sums
    # of a_i^2, a_i x speed and speed^2 give the sum of its squares in O(1). The origin (the first token of the
    # oldest batch still decoding) keeps the squares small; it moves only while nothing decodes.
    decoding_origin: float = 0.0
    decoding_a2: float = 0.0
    decoding_a_rate: float = 0.0
    decoding_rate2: float = 0.0
    prefill_sent: float = 0.0  # prompt tokens sent, ever
    rate: float = 0.0  # prompt tokens per second, decaying
    rate_at: float = 0.0

    def decayed_rate(self, now: float) -> float:
        return self.rate * math.exp(-max(0.0, now - self.rate_at) / RATE_TIME_CONSTANT_S)


class InflightBook:
    """The routed requests of one ingress, per variant, and the latency models they train."""

    def __init__(self, models: dict[str, LatencyModel]) -> None:
        self.models = models
        self._books = {name: _VariantBook() for name in models}

    # ------------------------------------------------------------------ requests

    def open(
        self,
        variant: str,
        prompt_tokens: int,
        prediction: Prediction | None,
        now: float,
        *,
        max_tokens: int = 0,
        replicas: int = 1,
        arrived_at: float | None = None,
        cached_tokens: int = 0,
    ) -> RouteTicket:
        """Books a request of ``prompt_tokens``, ``cached_tokens`` of which its replica is expected to take from its
        prefix cache: the ticket counts (and its TTFT teaches) only the rest, the prefill it really costs."""
        book = self._books[variant]
        needed = prompt_tokens + max_tokens
        prompt_tokens -= cached_tokens
        book.requests += 1
        book.prompt_tokens += prompt_tokens
        book.unstarted_prompt_tokens += prompt_tokens
        book.rate = book.decayed_rate(now) + prompt_tokens / RATE_TIME_CONSTANT_S
        book.rate_at = now
        book.prefill_sent += prompt_tokens
        ticket = RouteTicket(
            variant, prompt_tokens, prediction, now, max_tokens, max(replicas, 1), arrived_at=arrived_at
        )
        book.unstarted[id(ticket)] = ticket
        book.needed[id(ticket)] = needed
        return ticket

    def first_token(self, ticket: RouteTicket, now: float) -> None:
        """The request's first token reached the ingress: its prefill is done; TTFT is learned now."""
        if ticket.first_token_at is not None or ticket.done:
            return
        ticket.first_token_at = now
        book = self._books[ticket.variant]
        self._started(book, ticket)
        ticket.prefill_sent_at_first_token = book.prefill_sent
        if ticket.max_tokens > 1:
            speed = self._tokens_per_s(ticket)
            if book.decoding == 0:
                book.decoding_origin = now
            book.decoding += 1
            book.decoding_max_tokens += ticket.max_tokens - 1
            book.decoding_rate += speed
            book.decoding_rate_first_at += now * speed
            a = ticket.max_tokens - 1 + speed * (now - book.decoding_origin)
            book.decoding_a2 += a * a
            book.decoding_a_rate += a * speed
            book.decoding_rate2 += speed * speed
        self._observe_ttft(ticket, now, censored=False)

    def progress(self, ticket: RouteTicket, completion_tokens: int, now: float) -> None:
        """The request has generated ``completion_tokens`` tokens by ``now``: at its checkpoint, the TPOT of
        its decode so far is learned (once per request)."""
        if (
            ticket.done
            or ticket.checkpoint_at is not None
            or ticket.first_token_at is None
            or not 0 < ticket.checkpoint <= completion_tokens
        ):
            return
        book = self._books[ticket.variant]
        ticket.checkpoint_at, ticket.checkpoint_tokens = now, completion_tokens
        ticket.prefill_sent_at_checkpoint = book.prefill_sent
        self._observe_tpot(
            ticket,
            ticket.first_token_at,
            1,
            ticket.prefill_sent_at_first_token,
            completion_tokens,
            now,
            ok=True,
            margin=False,
        )

    def close(self, ticket: RouteTicket, completion_tokens: int, now: float, *, ok: bool) -> None:
        """Ends a ticket once. A success teaches TPOT; a failure teaches the time waited as a lower bound
        (of TTFT before a first token, of TPOT after it)."""
        if ticket.done:
            return
        ticket.done = True
        book = self._books[ticket.variant]
        book.requests -= 1
        book.prompt_tokens -= ticket.prompt_tokens
        book.needed.pop(id(ticket), None)
        if ticket.first_token_at is None:
            self._started(book, ticket)
            if not ok:
                self._observe_ttft(ticket, now, censored=True)
            return
        if ticket.max_tokens > 1:
            speed = self._tokens_per_s(ticket)
            book.decoding -= 1
            book.decoding_max_tokens -= ticket.max_tokens - 1
            book.decoding_rate -= speed
            book.decoding_rate_first_at -= ticket.first_token_at * speed
            if book.decoding == 0:  # nothing decodes: the sums restart from zero, not from their rounding
                book.decoding_a2 = book.decoding_a_rate = book.decoding_rate2 = 0.0
            else:
                a = ticket.max_tokens - 1 + speed * (ticket.first_token_at - book.decoding_origin)
                book.decoding_a2 -= a * a
                book.decoding_a_rate -= a * speed
                book.decoding_rate2 -= speed * speed
        first_at, sent_then = ticket.first_token_at, ticket.prefill_sent_at_first_token
        if ticket.checkpoint_at is None:
            self._observe_tpot(ticket, first_at, 1, sent_then, completion_tokens, now, ok=ok, margin=True)
            return
        # The checkpoint taught the weights the decode before it; these learn the rest. The error margin learns
        # the whole decode, once: what the SLO scores, and what the decision predicted. Scored against the same
        # prediction, a 15-token window after the prefill varies far more than a whole decode, and it widened the
        # real stack's TPOT margins to two or three times the simulator's (which learned only at the end): the slow
        # variant was then rarely sure to meet a standard request, and long prompts went to the fast variant,
        # whose interactive requests missed (docs/routing.md).
        since, then, sent = ticket.checkpoint_at, ticket.checkpoint_tokens, ticket.prefill_sent_at_checkpoint
        self._observe_tpot(ticket, since, then, sent, completion_tokens, now, ok=ok, margin=False)
        self._observe_tpot(ticket, first_at, 1, sent_then, completion_tokens, now, ok=ok, weights=False)

    def _observe_tpot(
        self,
        ticket: RouteTicket,
        since: float,
        tokens_then: int,
        prefill_sent_then: float,
        completion_tokens: int,
        now: float,
        *,
        ok: bool,
        margin: bool = True,
        weights: bool = True,
    ) -> None:
        """Teaches the TPOT of the decode from ``since`` (``tokens_then`` generated) to ``now`` (a lower bound
        when not ``ok``: a failed stream had at most max_tokens tokens left to decode in that time): to the
        model's ``weights``, and against the decision's prediction to its error ``margin``."""
        pred = ticket.prediction
        if pred is None:
            return
        steps = completion_tokens - tokens_then if ok else max(ticket.max_tokens, completion_tokens) - tokens_then
        decode_s = now - since
        if steps < 1 or decode_s <= 0:
            return
        model = self.models[ticket.variant]
        tpot_ms = 1000.0 * decode_s / steps
        if not weights:
            model.track_tpot_error(tpot_ms, pred.tpot_ms, prompt_tokens=ticket.prompt_tokens, censored=not ok)
            return
        shared = (self._books[ticket.variant].prefill_sent - prefill_sent_then) / ticket.replicas
        model.observe_tpot(
            tpot_ms,
            pred.batch_size,
            prefill_tokens_per_step=shared / steps,
            context_tokens=pred.context_tokens,
            predicted_ms=pred.tpot_ms if margin else None,
            censored=not ok,
            prompt_tokens=ticket.prompt_tokens,
        )

    def _observe_ttft(self, ticket: RouteTicket, now: float, *, censored: bool) -> None:
        """Teaches the variant's model the time from arrival (else dispatch) to now as TTFT (a lower bound when
        ``censored``)."""
        pred = ticket.prediction
        if pred is None:
            return
        started = ticket.start if ticket.arrived_at is None else ticket.arrived_at
        self.models[ticket.variant].observe_ttft(
            ticket.prompt_tokens,
            1000.0 * (now - started),
            queued_tokens_ahead=pred.queued_tokens_ahead,
            waiting_for_slot=pred.waiting_for_slot,
            batch_size=pred.batch_size,
            context_tokens=pred.context_tokens,
            predicted_ms=pred.ttft_ms,
            censored=censored,
            slowdown=pred.slowdown,
        )

    def _tokens_per_s(self, ticket: RouteTicket) -> float:
        pred = ticket.prediction
        tpot_ms = pred.tpot_ms if pred is not None else self.models[ticket.variant].predict_tpot_ms(1.0)
        return 1000.0 / max(tpot_ms, 1e-6)

    @staticmethod
    def _started(book: _VariantBook, ticket: RouteTicket) -> None:
        if book.unstarted.pop(id(ticket), None) is not None:
            book.unstarted_prompt_tokens -= ticket.prompt_tokens

    # ------------------------------------------------------------------ views

    def annotate(self, view: VariantView, now: float, report_at: float | None) -> VariantView:
        """``view`` (engine figures as of ``report_at``; None: no report) with this ingress's own load."""
        book = self._books.get(view.name)
        if book is None:
            return view
        fresh = 0
        if report_at is not None:
            fresh = sum(t.prompt_tokens for t in book.unstarted.values() if t.start > report_at)
        tokens_left = None
        tokens_left_sd = None
        if book.decoding > 0:
            # Each decoding request has progressed (now - first token) at its predicted TPOT; summed in O(1).
            # One that outran its prediction counts negative, so the mean is floored, not each term.
            progressed = now * book.decoding_rate - book.decoding_rate_first_at
            mean_left = (book.decoding_max_tokens - progressed) / book.decoding
            tokens_left = max(1.0, mean_left)
            # The spread of the remaining work about its mean: sum of squares over n, less the squared mean.
            u = now - book.decoding_origin
            squares = book.decoding_a2 - 2.0 * u * book.decoding_a_rate + u * u * book.decoding_rate2
            variance = squares / book.decoding - mean_left * mean_left
            tokens_left_sd = math.sqrt(variance) if variance > 0.0 else 0.0
        return replace(
            view,
            inflight=book.requests,
            inflight_prompt_tokens=book.prompt_tokens,
            report_age_ms=0.0 if report_at is None else max(0.0, 1000.0 * (now - report_at)),
            unstarted_requests=len(book.unstarted),
            unstarted_prompt_tokens=book.unstarted_prompt_tokens,
            fresh_prompt_tokens=fresh,
            prefill_tokens_per_s=book.decayed_rate(now),
            decode_tokens_left=tokens_left,
            decode_tokens_left_sd=tokens_left_sd,
            long_inflight_tokens=_long_inflight(book.needed, view.ready_replicas),
        )
