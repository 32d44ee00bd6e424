"""Per-key limits shared by ingress replicas: the ledger alone (its own clock), and two replicas' SharedLimits
against one ledger, called in-process (the Serve deployment around it is tests/serve_app/test_shared_limits_app.py)."""

from __future__ import annotations

import asyncio
import math

import pytest

from core.errors import OverloadedError
from serve_app.auth import ApiKeyConfig, AuthConfig, KeyStore
from serve_app.limiter import LEASE_SHARE, KeyLimits, Ledger, SharedLimits

SECRET = "sk-alice-secret"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Method:
    def __init__(self, fn, clock: Clock) -> None:
        self._fn, self._clock = fn, clock

    async def remote(self, *args):
        await asyncio.sleep(0)  # a real call yields to the loop
        return self._fn(*args, self._clock())


class InProcessLedger:
    """The KeyLimiter deployment's two methods, on a Ledger in this process, with the test's clock."""

    def __init__(self, clock: Clock, fail: bool = False) -> None:
        self.ledger = Ledger()
        self.calls = 0
        self.fail = fail
        self.lease = _Method(self._lease, clock)
        self.settle = _Method(self._settle, clock)

    def _lease(self, *args):
        self.calls += 1
        if self.fail:
            raise ConnectionError("limiter replica gone")
        return self.ledger.lease(*args)

    def _settle(self, *args):
        return self.ledger.settle(*args)


def _keys(**limits) -> KeyStore:
    return KeyStore(AuthConfig(keys=[ApiKeyConfig(name="alice", key=SECRET, **limits)]))


def _replicas(n: int, ledger: InProcessLedger, clock: Clock, **limits) -> list[tuple[SharedLimits, object]]:
    out = []
    for _ in range(n):
        keys = _keys(**limits)  # every ingress replica loads the same keys
        out.append((SharedLimits(keys, ledger, clock), keys.authenticate(f"Bearer {SECRET}")))
    return out


async def _admitted(replicas, tokens: int, attempts: int) -> int:
    ok = 0
    for i in range(attempts):
        limits, caller = replicas[i % len(replicas)]
        try:
            await limits.admit(caller, tokens)
            ok += 1
        except OverloadedError:
            pass
    return ok


# --------------------------------------------------------------------------- the ledger


def test_the_ledger_grants_all_or_nothing_and_a_share_beyond_the_need():
    ledger = Ledger()
    limits = KeyLimits(requests_per_minute=100, tokens_per_minute=1000)
    grant = ledger.lease("a", "alice", limits, 1, 50, 0, now=0.0)
    assert grant.refused is None
    assert grant.requests == pytest.approx(1 + 100 * LEASE_SHARE)
    assert grant.tokens == pytest.approx(50 + 1000 * LEASE_SHARE)
    refused = ledger.lease("b", "alice", limits, 1, 5000, 0, now=0.0)
    assert refused.refused == "Rate limit for key 'alice': tokens per minute."
    assert refused.requests == 0  # nothing taken: the request bucket is as it was
    assert ledger.lease("b", "alice", limits, 89, 0, 0, now=0.0).refused is None  # all that is left


def test_budget_leased_out_does_not_refill_past_the_limit():
    ledger = Ledger()
    limits = KeyLimits(requests_per_minute=60)  # one a second
    assert ledger.lease("a", "alice", limits, 60, 0, 0, now=0.0).requests == 60
    # Five seconds later a bucket would hold 5 again, but all of its capacity is still leased to "a".
    assert ledger.lease("b", "alice", limits, 1, 0, 0, now=5.0).refused is not None
    ledger.settle("a", "alice", (60, 0), (4, 0), 0, now=5.0)  # "a" spent 56, gives 4 back
    assert ledger.lease("b", "alice", limits, 4, 0, 0, now=5.0).requests == 4
    assert ledger.lease("b", "alice", limits, 1, 0, 0, now=5.0).refused is not None
    assert ledger.lease("b", "alice", limits, 1, 0, 0, now=6.0).refused is None  # refilled since


def test_stream_slots_are_counted_over_every_holder_and_a_refusal_marks_the_key_contended():
    ledger = Ledger()
    limits = KeyLimits(max_streams=2)
    assert ledger.lease("a", "alice", limits, 0, 0, 1, now=0.0).streams == 1
    assert ledger.lease("b", "alice", limits, 0, 0, 1, now=0.0).streams == 1
    refused = ledger.lease("a", "alice", limits, 0, 0, 1, now=0.0)
    assert refused.refused == "Key 'alice' already has 2 requests in flight (limit 2)."
    assert ledger.settle("b", "alice", (0, 0), (0, 0), 1, now=0.5) is True  # contended: others give back at once
    assert ledger.lease("a", "alice", limits, 0, 0, 1, now=0.5).refused is None


def test_a_holder_that_stops_calling_loses_what_it_held():
    ledger = Ledger()
    limits = KeyLimits(requests_per_minute=6, max_streams=1)
    ledger.lease("gone", "alice", limits, 6, 0, 1, now=0.0)
    assert ledger.lease("b", "alice", limits, 0, 0, 1, now=5.0).refused is not None
    later = ledger.lease("b", "alice", limits, 1, 0, 1, now=30.0)  # "gone" expired: its slot and lease dropped
    assert later.refused is None and later.streams == 1


# --------------------------------------------------------------------------- replicas sharing one ledger


async def test_two_replicas_share_one_keys_request_limit():
    clock = Clock()
    ledger = InProcessLedger(clock)
    replicas = _replicas(2, ledger, clock, requests_per_minute=10)
    assert await _admitted(replicas, tokens=1, attempts=30) == 10  # one key's limit, not one per replica
    assert set(ledger.ledger.holders("alice")) == {limits._holder for limits, _ in replicas}


@pytest.mark.parametrize("requests_per_minute", [3, 6, 25])
async def test_every_request_of_a_small_limit_is_admitted_whichever_replica_takes_it(requests_per_minute):
    # A share of 0.6 requests left in each of two replicas used to be a request neither could admit: the
    # endpoint gave 5 of 6 (in CI).
    clock = Clock()
    ledger = InProcessLedger(clock)
    replicas = _replicas(2, ledger, clock, requests_per_minute=requests_per_minute)
    assert await _admitted(replicas, tokens=1, attempts=3 * requests_per_minute) == requests_per_minute


def test_grants_are_whole_requests_and_exact_once_the_budget_runs_low():
    ledger = Ledger()
    limits = KeyLimits(requests_per_minute=25)  # a share of 2.5 requests: 2
    grants = [ledger.lease(h, "alice", limits, 1, 0, 0, now=0.0).requests for h in "ab" * 5]
    assert grants == [3] * 7 + [1] * 3  # 4 left, under the need and two shares: from there on, only the need
    assert all(g == int(g) for g in grants)


async def test_two_replicas_share_one_keys_token_limit_and_unspent_budget_comes_back():
    clock = Clock()
    ledger = InProcessLedger(clock)
    replicas = _replicas(2, ledger, clock, tokens_per_minute=1000)
    assert await _admitted(replicas[:1], tokens=300, attempts=5) == 3  # replica 0 holds the rest of its lease
    for limits, _ in replicas:
        await limits.sync()  # a lease period later: unspent budget back at the ledger
    assert await _admitted(replicas[1:], tokens=100, attempts=5) == 1  # 100 of 1000 left, wherever it was leased


async def test_most_requests_are_admitted_without_a_call_to_the_ledger():
    clock = Clock()
    ledger = InProcessLedger(clock)
    replicas = _replicas(1, ledger, clock, requests_per_minute=1000, tokens_per_minute=1_000_000)
    assert await _admitted(replicas, tokens=100, attempts=100) == 100
    assert ledger.calls <= math.ceil(100 / (1000 * LEASE_SHARE))  # one lease per ~LEASE_SHARE of the limit


async def test_stream_slots_across_replicas_are_released_and_reused():
    clock = Clock()
    ledger = InProcessLedger(clock)
    (a, caller_a), (b, caller_b) = _replicas(2, ledger, clock, max_concurrent_streams=1)
    held = await a.admit(caller_a, 1)
    with pytest.raises(OverloadedError, match="in flight"):
        await b.admit(caller_b, 1)
    await a.sync()  # a lease period: a's stream is still busy, and a learns that b was refused
    held.release()  # contended: a gives its slot back at once instead of keeping it for its next request
    await asyncio.sleep(0.01)
    second = await b.admit(caller_b, 1)
    second.release()
    second.release()  # a second release is a no-op
    calls = ledger.calls
    third = await b.admit(caller_b, 1)  # arrived before b gave its idle slot back: it takes that slot
    assert ledger.calls == calls
    third.release()
    await asyncio.sleep(0.01)  # contended: b gives the slot back once it is idle
    assert ledger.ledger.holders("alice")[b._holder]["streams"] == 0


async def test_an_idle_slot_goes_back_at_the_end_of_the_lease_period():
    clock = Clock()
    ledger = InProcessLedger(clock)
    (a, caller_a), (b, caller_b) = _replicas(2, ledger, clock, max_concurrent_streams=1)
    (await a.admit(caller_a, 1)).release()
    calls = ledger.calls
    (await a.admit(caller_a, 1)).release()  # not contended: a kept the slot for its next request
    assert ledger.calls == calls
    await a.sync()
    (await b.admit(caller_b, 1)).release()


async def test_concurrent_requests_on_one_replica_never_overspend():
    clock = Clock()
    ledger = InProcessLedger(clock)
    [(limits, caller)] = _replicas(1, ledger, clock, requests_per_minute=5)

    async def one() -> bool:
        try:
            await limits.admit(caller, 1)
            return True
        except OverloadedError:
            return False

    assert sum(await asyncio.gather(*(one() for _ in range(20)))) == 5


async def test_a_request_above_the_tokens_per_minute_is_refused_without_a_call():
    clock = Clock()
    ledger = InProcessLedger(clock)
    [(limits, caller)] = _replicas(1, ledger, clock, tokens_per_minute=100)
    with pytest.raises(OverloadedError, match="more than key 'alice' may use per minute"):
        await limits.admit(caller, 101)
    assert ledger.calls == 0


async def test_without_the_ledger_each_replica_enforces_the_limits_alone():
    clock = Clock()
    ledger = InProcessLedger(clock, fail=True)
    replicas = _replicas(2, ledger, clock, requests_per_minute=3)
    assert await _admitted(replicas, tokens=1, attempts=10) == 6  # degraded: per replica, as before the ledger


async def test_keys_without_limits_and_open_endpoints_cost_nothing():
    clock = Clock()
    ledger = InProcessLedger(clock)
    [(limits, caller)] = _replicas(1, ledger, clock)
    (await limits.admit(caller, 10**6)).release()
    (await limits.admit(None, 10)).release()
    assert ledger.calls == 0


@pytest.mark.parametrize("ledger_up", [True, False])
async def test_a_requests_choices_are_one_request_with_a_slot_each_given_back_one_by_one(ledger_up):
    clock = Clock()
    ledger = InProcessLedger(clock, fail=not ledger_up)  # down: the replica enforces alone, the same way
    [(limits, caller)] = _replicas(1, ledger, clock, requests_per_minute=2, max_concurrent_streams=4)
    batch = await limits.admit(caller, 10, streams=3)  # three choices: one request, three slots
    with pytest.raises(OverloadedError, match="in flight"):
        await limits.admit(caller, 10, streams=2)
    batch.release()  # one choice ended: its slot is free
    (await limits.admit(caller, 10, streams=2)).release_all()  # the key's second request of the minute
    batch.release_all()  # the choices that never started
    batch.release()  # nothing left to give back
    with pytest.raises(OverloadedError, match="requests per minute"):
        await limits.admit(caller, 10)
    clock.now += 60.0
    await limits.sync()
    (await limits.admit(caller, 10, streams=4)).release_all()  # every slot was back


async def test_a_request_with_more_choices_than_the_keys_streams_is_refused_without_a_call():
    clock = Clock()
    ledger = InProcessLedger(clock)
    [(limits, caller)] = _replicas(1, ledger, clock, max_concurrent_streams=4)
    with pytest.raises(OverloadedError, match="needs 5 streams"):
        await limits.admit(caller, 1, streams=5)
    assert ledger.calls == 0
