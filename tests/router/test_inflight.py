"""router.inflight: the ingress's own tickets in the load views, and the feedback they give the models."""

from __future__ import annotations

import pytest

from router import LatencyModel, Load, Prediction
from router.inflight import InflightBook, RouteTicket
from tests.router.views import BIG_PROFILE, big


def book() -> InflightBook:
    return InflightBook({"big": LatencyModel(BIG_PROFILE)})


def _idle() -> Load:
    return Load(running=0.0, queued=0.0, queued_prompt_tokens=0.0, waiting_for_slot=0.0, max_running=16)


def prediction(ttft_ms: float = 100.0, tpot_ms: float = 40.0) -> Prediction:
    return Prediction(ttft_ms=ttft_ms, tpot_ms=tpot_ms, meets_slo=True, batch_size=1.0)


def test_unstarted_prompts_count_until_the_first_token_and_fresh_ones_only_after_the_report():
    b = book()
    early = b.open("big", 300, prediction(), now=10.0)
    late = b.open("big", 500, prediction(), now=10.5)

    view = b.annotate(big(), now=10.6, report_at=10.2)
    assert (view.unstarted_requests, view.unstarted_prompt_tokens) == (2, 800)
    assert view.fresh_prompt_tokens == 500  # only `late` was sent after the report was taken
    assert view.report_age_ms == pytest.approx(400.0)

    b.first_token(early, now=10.7)
    b.first_token(late, now=10.8)
    view = b.annotate(big(), now=10.9, report_at=10.2)
    assert (view.unstarted_requests, view.unstarted_prompt_tokens, view.fresh_prompt_tokens) == (0, 0, 0)
    assert (view.inflight, view.inflight_prompt_tokens) == (2, 800)


def test_a_ticket_closes_once_even_without_a_first_token():
    b = book()
    ticket = b.open("big", 300, None, now=0.0)
    b.close(ticket, 0, now=1.0, ok=False)
    b.close(ticket, 0, now=1.0, ok=False)
    view = b.annotate(big(), now=1.0, report_at=None)
    assert (view.inflight, view.unstarted_prompt_tokens) == (0, 0)


def test_the_longest_open_requests_per_replica_are_in_the_view_until_they_close():
    b = book()
    chat = b.open("big", 100, prediction(), now=0.0, max_tokens=28)
    long = b.open("big", 3000, prediction(), now=0.1, max_tokens=128)
    b.first_token(long, now=0.5)  # running counts as much as queued

    assert b.annotate(big(), now=0.6, report_at=None).long_inflight_tokens == 3128
    # Two replicas: each holds one of the two at best, so the shorter one is what both are sure to hold.
    assert b.annotate(big(ready_replicas=2), now=0.6, report_at=None).long_inflight_tokens == 128
    assert b.annotate(big(ready_replicas=3), now=0.6, report_at=None).long_inflight_tokens == 0

    b.close(long, 128, now=1.0, ok=True)
    assert b.annotate(big(), now=1.0, report_at=None).long_inflight_tokens == 128
    b.close(chat, 28, now=1.1, ok=True)
    assert b.annotate(big(), now=1.1, report_at=None).long_inflight_tokens == 0


def test_the_prompt_token_rate_rises_with_dispatches_and_decays_without():
    b = book()
    for i in range(10):
        b.open("big", 1000, None, now=i * 0.1)
    busy = b.annotate(big(), now=1.0, report_at=None).prefill_tokens_per_s
    later = b.annotate(big(), now=30.0, report_at=None).prefill_tokens_per_s
    assert busy > 1000.0
    assert later < busy / 100


def test_decode_work_left_falls_as_requests_progress():
    b = book()
    ticket = b.open("big", 10, prediction(tpot_ms=10.0), now=0.0, max_tokens=101)
    assert b.annotate(big(), now=0.0, report_at=None).decode_tokens_left is None  # nothing decoding yet
    b.first_token(ticket, now=0.1)
    assert b.annotate(big(), now=0.1, report_at=None).decode_tokens_left == pytest.approx(100.0)
    assert b.annotate(big(), now=0.6, report_at=None).decode_tokens_left == pytest.approx(50.0)
    assert b.annotate(big(), now=5.0, report_at=None).decode_tokens_left == pytest.approx(1.0)  # floored


def test_the_spread_of_decode_work_left_is_known_from_the_first_tokens():
    """Requests that started decoding together have the same work left (spread 0); started apart, they spread by
    their progress, and the spread is their remaining work's standard deviation."""
    b = book()
    together = [b.open("big", 10, prediction(tpot_ms=10.0), now=0.0, max_tokens=101) for _ in range(3)]
    for t in together:
        b.first_token(t, now=0.1)
    view = b.annotate(big(), now=0.3, report_at=None)
    assert view.decode_tokens_left == pytest.approx(80.0)
    assert view.decode_tokens_left_sd == pytest.approx(0.0, abs=1e-3)  # float rounding, square-rooted
    late = b.open("big", 10, prediction(tpot_ms=10.0), now=0.5, max_tokens=101)
    b.first_token(late, now=0.6)
    # Left at 0.7 s: 40, 40, 40 and 90 tokens.
    view = b.annotate(big(), now=0.7, report_at=None)
    assert view.decode_tokens_left == pytest.approx(52.5)
    assert view.decode_tokens_left_sd == pytest.approx((3 * 12.5**2 + 37.5**2) ** 0.5 / 2)
    for t in together:
        b.close(t, 100, now=1.1, ok=True)
    view = b.annotate(big(), now=1.1, report_at=None)
    assert view.decode_tokens_left == pytest.approx(50.0)
    assert view.decode_tokens_left_sd == pytest.approx(0.0, abs=1e-3)  # float rounding, square-rooted
    b.close(late, 100, now=1.6, ok=True)
    assert b.annotate(big(), now=1.6, report_at=None).decode_tokens_left_sd is None  # nothing decoding


def test_ttft_is_learned_at_the_first_token():
    b = book()
    model = b.models["big"]
    before = model.predict_ttft_ms(100, _idle())
    for i in range(30):
        ticket = b.open("big", 100, prediction(ttft_ms=before), now=float(i))
        b.first_token(ticket, now=i + 1.0)  # 1000 ms, far slower than the ~150 ms predicted
    assert model.predict_ttft_ms(100, _idle()) > 2 * before
    assert model.ttft_margin_for(100) > 0  # outcomes above the decision-time predictions widen the margin


def _learned_ttft_ms(*, with_arrival: bool) -> float:
    b = book()
    for i in range(30):
        # The ingress took it at i, dispatched it 0.4 s later (a busy event loop), the first token came 0.15 s after.
        arrived_at = float(i) if with_arrival else None
        ticket = b.open("big", 100, prediction(ttft_ms=150.0), now=i + 0.4, arrived_at=arrived_at)
        b.first_token(ticket, now=i + 0.55)
    return b.models["big"].predict_ttft_ms(100, _idle())


def test_ttft_is_timed_from_the_requests_arrival_at_the_ingress_when_known():
    assert _learned_ttft_ms(with_arrival=False) == pytest.approx(150.0, rel=0.1)  # dispatch to first token
    assert _learned_ttft_ms(with_arrival=True) > 2 * _learned_ttft_ms(with_arrival=False)  # toward 550 ms


def test_a_timeout_before_the_first_token_teaches_a_lower_bound():
    b = book()
    model = b.models["big"]
    before = model.predict_ttft_ms(100, _idle())
    for i in range(30):
        ticket = b.open("big", 100, prediction(ttft_ms=before), now=float(i))
        b.close(ticket, 0, now=i + 5.0, ok=False)  # gave up after 5 s without a token
    assert model.predict_ttft_ms(100, _idle()) > 5 * before


def test_an_early_failure_below_the_prediction_teaches_nothing():
    b = book()
    model = b.models["big"]
    before = model.profile()
    ticket = b.open("big", 100, prediction(ttft_ms=5000.0), now=0.0)
    b.close(ticket, 0, now=0.01, ok=False)  # the client left after 10 ms
    assert model.profile() == before
    assert model.ttft_margin_for(100) == 0.0


def test_tpot_learns_the_prefill_its_decode_steps_shared():
    b = book()
    model = b.models["big"]
    # Each request decodes 100 tokens while 100 x 500 prompt tokens arrive: 500 tokens per step, which at
    # 1 ms per prompt token (BIG_PROFILE) adds ~500 ms a step. Observed TPOT: 40 + 500 ms.
    t = 0.0
    for _ in range(20):
        ticket = b.open("big", 10, prediction(tpot_ms=40.0), now=t, max_tokens=101)
        b.first_token(ticket, now=t + 0.05)
        for k in range(100):
            b.first_token(b.open("big", 500, None, now=t + 0.05 + k * 0.001), now=t + 0.06 + k * 0.001)
        t += 0.05 + 100 * 0.54
        b.close(ticket, 101, now=t, ok=True)
    assert model.predict_tpot_ms(1.0) == pytest.approx(40.0, rel=0.2)  # decode alone stays as it was
    # 500 tokens a 540 ms step is ~926 prompt tokens/s: the prediction under that rate matches what it saw.
    assert model.predict_tpot_ms(1.0, prefill_tokens_per_s=500 / 0.54) == pytest.approx(540.0, rel=0.2)


def decoding_long_answer(b: InflightBook):
    """A 256-token request predicted at 40 ms a token, its first token out at 0 s."""
    ticket = b.open("big", 10, prediction(tpot_ms=40.0), now=0.0, max_tokens=256)
    b.first_token(ticket, now=0.0)
    return ticket


def observed_tpots(b: InflightBook, monkeypatch) -> list[float]:
    """The TPOT values ``b`` teaches its model, in order."""
    seen: list[float] = []
    model = b.models["big"]
    learn = model.observe_tpot

    def spy(tpot_ms: float, *args, **kwargs) -> None:
        seen.append(tpot_ms)
        learn(tpot_ms, *args, **kwargs)

    monkeypatch.setattr(model, "observe_tpot", spy)
    return seen


def test_tpot_is_learned_at_the_checkpoint_before_a_long_answer_ends(monkeypatch):
    b = book()
    seen = observed_tpots(b, monkeypatch)
    # An answer of 256 tokens decoding at 80 ms a token: its 16th token comes 1.2 s in, 19 s before its end.
    ticket = decoding_long_answer(b)
    b.progress(ticket, 8, now=0.56)  # before its checkpoint: nothing yet
    assert seen == []
    b.progress(ticket, 16, now=1.2)
    assert seen == [pytest.approx(80.0)]
    b.progress(ticket, 17, now=1.28)  # once per request
    assert len(seen) == 1


def test_after_a_checkpoint_the_close_teaches_only_the_rest_of_the_decode(monkeypatch):
    b = book()
    seen = observed_tpots(b, monkeypatch)
    # 15 steps of 120 ms to the checkpoint, then 240 of 40 ms: the close teaches 40, not the mean (44.7).
    ticket = decoding_long_answer(b)
    b.progress(ticket, 16, now=1.8)
    b.close(ticket, 256, now=1.8 + 240 * 0.04, ok=True)
    assert seen == [pytest.approx(120.0), pytest.approx(40.0)]


def test_a_request_failing_after_its_checkpoint_teaches_a_lower_bound_for_the_rest(monkeypatch):
    b = book()
    seen = observed_tpots(b, monkeypatch)
    ticket = decoding_long_answer(b)
    b.progress(ticket, 16, now=0.6)
    b.close(ticket, 20, now=10.6, ok=False)  # cut off 10 s later with 240 tokens still to go at most
    assert seen[-1] == pytest.approx(10_000 / 240)


def test_the_error_margin_learns_a_checkpointed_request_once_from_its_whole_decode(monkeypatch):
    # The SLO scores the whole decode, and the decision predicted it: a 15-token window after the prefill, scored
    # against that prediction, widened the real stack's margins to two or three times the simulator's.
    b = book()
    margin_seen: list[tuple[float, float | None]] = []
    model = b.models["big"]
    track = model.track_tpot_error

    def spy(tpot_ms: float, predicted_ms: float | None, **kwargs) -> None:
        margin_seen.append((tpot_ms, predicted_ms))
        track(tpot_ms, predicted_ms, **kwargs)

    monkeypatch.setattr(model, "track_tpot_error", spy)
    before = model.tpot_margin_for(10)
    ticket = decoding_long_answer(b)
    b.progress(ticket, 16, now=1.8)  # 15 steps of 120 ms: the weights learn 120, the margin nothing
    assert margin_seen == [] and model.tpot_margin_for(10) == before
    b.close(ticket, 256, now=1.8 + 240 * 0.04, ok=True)
    assert margin_seen == [(pytest.approx((1.8 + 9.6) / 255 * 1000), 40.0)]  # the mean over all 255 steps


def test_a_request_without_a_checkpoint_teaches_weights_and_margin_from_its_whole_decode(monkeypatch):
    b = book()
    taught: list[tuple[float, float | None]] = []
    model = b.models["big"]
    learn = model.observe_tpot

    def spy(tpot_ms: float, *args, predicted_ms: float | None = None, **kwargs) -> None:
        taught.append((tpot_ms, predicted_ms))
        learn(tpot_ms, *args, predicted_ms=predicted_ms, **kwargs)

    monkeypatch.setattr(model, "observe_tpot", spy)
    ticket = b.open("big", 10, prediction(tpot_ms=40.0), now=0.0, max_tokens=4)  # too short for a checkpoint
    b.first_token(ticket, now=0.0)
    b.close(ticket, 4, now=0.15, ok=True)
    assert taught == [(pytest.approx(50.0), 40.0)]  # the prediction given: the margin learns it too


def test_short_answers_have_no_checkpoint():
    assert RouteTicket("big", 10, None, start=0.0, max_tokens=4).checkpoint == 0
    assert RouteTicket("big", 10, None, start=0.0, max_tokens=20).checkpoint == 10
    assert RouteTicket("big", 10, None, start=0.0, max_tokens=256).checkpoint == 16


def test_ticket_headers_carry_the_chosen_prediction():
    ticket = RouteTicket("big", 10, prediction(ttft_ms=123.4, tpot_ms=12.34), start=0.0)
    assert ticket.headers() == {"x-route-predicted-ttft-ms": "123", "x-route-predicted-tpot-ms": "12.3"}
    assert RouteTicket("big", 10, None, start=0.0).headers() == {}
