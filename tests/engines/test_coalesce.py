"""engines.coalesce: first delta at once, later ones merged, nothing lost, closing aborts the source."""

from __future__ import annotations

import asyncio

import pytest

from engines.coalesce import Cadence, coalesce, interval_s, merge_deltas, next_due
from engines.config import CoalesceConfig, HFEngineConfig
from engines.protocol import Delta, TokenLogprob


def _delta(i: int, finish: str | None = None) -> Delta:
    return Delta(text=f"t{i} ", token_ids=[i], finish_reason=finish, completion_tokens=i + 1)


class _Source:
    """An async iterator fed by the test, recording whether it was closed."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Delta | None] = asyncio.Queue()
        self.closed = False

    def __aiter__(self):
        return self

    async def __anext__(self) -> Delta:
        item = await self.queue.get()
        if item is None:
            raise StopAsyncIteration
        return item

    async def aclose(self) -> None:
        self.closed = True


def test_merge_concatenates_text_and_ids_and_keeps_last_figures():
    merged = merge_deltas([_delta(0), _delta(1), _delta(2, "length")])
    assert merged.text == "t0 t1 t2 "
    assert merged.token_ids == [0, 1, 2]
    assert merged.finish_reason == "length"
    assert merged.completion_tokens == 3


async def test_first_delta_is_not_held_back():
    source = _Source()
    out = coalesce(source, interval_s=3600)  # an interval no test would wait for
    await source.queue.put(_delta(0))
    first = await asyncio.wait_for(anext(out), timeout=30)
    assert first.token_ids == [0]
    await out.aclose()


async def test_later_deltas_are_merged_and_the_final_one_flushes():
    source = _Source()
    out = coalesce(source, interval_s=3600)
    await source.queue.put(_delta(0))
    assert (await anext(out)).token_ids == [0]
    for i in range(1, 5):
        await source.queue.put(_delta(i))
    await source.queue.put(_delta(5, "stop"))
    rest = [d async for d in out]
    assert len(rest) == 1  # everything after the first token left as one chunk, at the finish
    assert rest[0].token_ids == [1, 2, 3, 4, 5]
    assert rest[0].finish_reason == "stop"
    assert source.closed


async def test_interval_elapsing_sends_what_is_buffered():
    source = _Source()
    out = coalesce(source, interval_s=0.01)
    await source.queue.put(_delta(0))
    await anext(out)
    await source.queue.put(_delta(1))
    # The source now stalls; the buffered delta must still come out once the interval passes.
    second = await asyncio.wait_for(anext(out), timeout=30)
    assert second.token_ids == [1]
    await out.aclose()
    assert source.closed


async def test_closing_early_closes_the_source():
    source = _Source()
    out = coalesce(source, interval_s=0.005)
    await source.queue.put(_delta(0))
    await anext(out)
    await out.aclose()
    assert source.closed


async def test_source_error_after_tokens_delivers_them_then_raises():
    class Failing(_Source):
        async def __anext__(self) -> Delta:
            item = await self.queue.get()
            if item is None:
                raise RuntimeError("engine died")
            return item

    source = Failing()
    out = coalesce(source, interval_s=3600)
    await source.queue.put(_delta(0))
    await anext(out)
    await source.queue.put(_delta(1))
    await source.queue.put(None)
    assert (await anext(out)).token_ids == [1]
    with pytest.raises(RuntimeError, match="engine died"):
        await anext(out)


async def test_zero_interval_passes_every_delta_through():
    source = _Source()
    out = coalesce(source, interval_s=0)
    for i in range(3):
        await source.queue.put(_delta(i))
    await source.queue.put(None)
    assert [d.token_ids for d in [x async for x in out]] == [[0], [1], [2]]
    assert source.closed


def test_merged_deltas_keep_every_tokens_logprob_in_order():
    from engines.coalesce import merge_deltas

    a, b = TokenLogprob("a", -0.1), TokenLogprob("b", -0.2)
    merged = merge_deltas([Delta("a", [1], logprobs=[a]), Delta("", []), Delta("b", [2], logprobs=[b])])
    assert merged.logprobs == [a, b]
    assert merge_deltas([Delta("a", [1]), Delta("b", [2])]).logprobs is None


def test_the_next_message_is_due_an_interval_after_the_last_was_due_not_after_it_left():
    assert next_due(0.0, 10.0, 0.05) == pytest.approx(10.05)  # the first message anchors the cadence
    assert next_due(10.05, 10.07, 0.05) == pytest.approx(10.10)  # sent 20 ms late: the next one keeps the cadence
    assert next_due(10.05, 10.2, 0.05) == pytest.approx(10.25)  # more than an interval behind: one after now
    assert next_due(10.05, 10.07, 0.0) == pytest.approx(10.07)  # no interval: always due
    assert next_due(10.05, 10.04, 0.05) == pytest.approx(10.09)  # sent 10 ms early: the next interval starts then


def test_a_message_leaves_at_the_last_engine_step_before_it_is_due_when_the_next_step_would_be_late():
    cadence = Cadence(0.05)
    cadence.sent(10.0)  # due next at 10.05
    assert not cadence.due(10.04)  # no next step known: wait for the first one at or after the due time
    assert not cadence.due(10.04, next_at=10.05)  # the next step ends on time: wait for it
    assert cadence.due(10.04, next_at=10.052)  # it would end 2 ms late: send now, no token held over 50 ms
    cadence.sent(10.04)
    assert not cadence.due(10.085, next_at=10.089)  # the interval counts from when the early one left
    assert cadence.due(10.085, next_at=10.095)


def test_a_cadence_sends_the_first_and_a_finished_message_at_once_the_others_an_interval_apart():
    cadence = Cadence(0.05)
    assert cadence.due(10.0)  # the first message
    cadence.sent(10.0)
    assert not cadence.due(10.03)
    assert cadence.due(10.03, finished=True)  # the last one does not wait
    assert cadence.due(10.06)
    cadence.sent(10.07)  # left 20 ms late: the next one keeps the cadence (next_due)
    assert not cadence.due(10.09)  # due at 10.10, not 10.12
    assert cadence.due(10.11)


def test_the_interval_is_the_configs_coalesce_interval_and_none_without_one():
    assert interval_s(HFEngineConfig(model="builtin:tiny", coalesce=CoalesceConfig(interval_ms=25))) == 0.025
    assert interval_s(HFEngineConfig(model="builtin:tiny", coalesce=CoalesceConfig(interval_ms=0))) == 0.0
    assert interval_s(object()) == 0.0


def test_a_message_a_client_cannot_read_leaves_the_next_one_due_at_once():
    cadence = Cadence(0.05)
    cadence.sent(10.0, readable=False)  # the first token was half a character: no text yet
    assert cadence.due(10.01)  # the token that completes it goes at once, not 50 ms later
    cadence.sent(10.01)
    assert not cadence.due(10.03)  # from the first text on, the cadence as usual
    assert cadence.due(10.06)
    cadence.sent(10.06)
    cadence.sent(10.07, readable=False)  # early (a step before its due time), and unreadable
    assert cadence.due(10.08)  # what it held back goes with the next token


async def test_a_first_delta_without_text_does_not_hold_back_the_one_that_completes_it():
    source = _Source()
    out = coalesce(source, interval_s=3600)
    await source.queue.put(Delta(text="", token_ids=[0], completion_tokens=1))  # half of a character
    assert (await anext(out)).token_ids == [0]
    await source.queue.put(Delta(text="é", token_ids=[1], completion_tokens=2))
    second = await asyncio.wait_for(anext(out), timeout=30)  # not after the hour-long interval
    assert second.text == "é"
    await source.queue.put(_delta(2))
    await source.queue.put(_delta(3, "length"))
    third = await asyncio.wait_for(anext(out), timeout=30)  # the cadence runs from the text: these two wait
    assert third.token_ids == [2, 3]
    await out.aclose()


def test_a_delta_is_readable_with_text_logprobs_or_a_finish_and_not_with_ids_alone():
    assert not Delta(text="", token_ids=[7]).readable
    assert Delta(text="a", token_ids=[7]).readable
    assert Delta(text="", token_ids=[], finish_reason="stop").readable
    assert Delta(text="", token_ids=[7], logprobs=[TokenLogprob("\\xe9", -0.1)]).readable
