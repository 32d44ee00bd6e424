"""Per-key limits that hold for the whole endpoint, however many ingress replicas run.

One :class:`Ledger` (in the :class:`KeyLimiter` deployment, one replica) is the authority over each key's
requests-per-minute and tokens-per-minute buckets and its stream slots. An ingress replica does not ask it per
request: it *leases* a share (what the request needs plus a tenth of the key's per-minute limit in whole units, and only
the need once the key's budget runs low) and spends it locally (:class:`SharedLimits`), so most requests cost no
call at all; what it has not spent goes back within a lease period (``LEASE_PERIOD_S``), so that an idle replica
does not strand a key's budget.

Why the sums hold: the ledger refills a bucket only up to its capacity less what is leased out, so what every
replica can spend at once never exceeds one key's limit. Stream slots are leased one at a time; an idle slot
is kept for the replica's next request of that key until the period ends, or given back at once when another
replica was refused one (the ledger says so in its grants: ``contended``).

A replica that goes away without giving back (killed) loses its leases after ``HOLDER_TTL_S``: replicas call in
every period while they hold anything. When the ledger cannot be reached, a replica falls back to enforcing each
key's limits alone (``auth.KeyStore``) and logs it: limits protect the endpoint, they should not take it down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ray import serve

from core.errors import OverloadedError
from serve_app.auth import KeyStore, Principal, too_many_streams

logger = logging.getLogger("ray.serve")

LEASE_PERIOD_S = 1.0  # the longest a replica keeps budget it has not spent
LEASE_SHARE = 0.1  # leased beyond a request's need: this share of the key's per-minute limit
HOLDER_TTL_S = 10.0  # a replica silent this long (gone) loses what it held
CONTENDED_S = 2.0  # after a stream refusal, replicas give idle slots of that key back at once for this long


@dataclass(frozen=True, slots=True)
class KeyLimits:
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    max_streams: int | None = None

    @classmethod
    def of(cls, principal: Principal) -> KeyLimits:
        return cls(
            requests_per_minute=principal.requests.capacity if principal.requests else None,
            tokens_per_minute=principal.tokens.capacity if principal.tokens else None,
            max_streams=principal.max_streams,
        )

    @property
    def any(self) -> bool:
        return self != KeyLimits()


@dataclass(slots=True)
class Grant:
    """The ledger's answer to a lease: what it granted, or why not (``refused``: the message for the client)."""

    requests: float = 0.0
    tokens: float = 0.0
    streams: int = 0
    refused: str | None = None
    retry_after_s: float = 0.0
    contended: bool = False  # a replica was refused a stream slot of this key lately: give idle slots back at once


@dataclass(slots=True)
class _Pool:
    """A token bucket whose refill stops at its capacity less what is leased out (``outstanding``)."""

    capacity: float
    level: float
    updated: float

    def refill(self, outstanding: float, now: float) -> None:
        ceiling = self.capacity - outstanding
        self.level = max(self.level, min(ceiling, self.level + (now - self.updated) * self.capacity / 60.0))
        self.updated = now

    def wait_s(self, amount: float) -> float:
        return 0.0 if amount <= self.level else (amount - self.level) * 60.0 / self.capacity


@dataclass(slots=True)
class _Held:
    """What one replica holds of one key: leased budget (spent or not, until it settles) and stream slots."""

    requests: float = 0.0
    tokens: float = 0.0
    streams: int = 0
    seen: float = 0.0


@dataclass(slots=True)
class _Key:
    limits: KeyLimits
    requests: _Pool | None
    tokens: _Pool | None
    holders: dict[str, _Held] = field(default_factory=dict)
    contended_until: float = 0.0


class Ledger:
    """The authority over every key's budget; pure (time is passed in), so tests drive it with their own clock."""

    def __init__(self) -> None:
        self._keys: dict[str, _Key] = {}

    def lease(
        self, holder: str, key: str, limits: KeyLimits, requests: float, tokens: float, streams: int, now: float
    ) -> Grant:
        """Grants ``requests``, ``tokens`` and ``streams`` (plus a share more budget), all or nothing."""
        state = self._key(key, limits, now)
        held = state.holders.setdefault(holder, _Held())
        held.seen = now
        self._expire(state, now)
        self._refill(state, now)
        contended = now < state.contended_until
        if streams and limits.max_streams is not None:
            in_use = sum(h.streams for h in state.holders.values())
            if in_use + streams > limits.max_streams:
                state.contended_until = now + CONTENDED_S
                return Grant(
                    refused=f"Key '{key}' already has {in_use} requests in flight (limit {limits.max_streams}).",
                    retry_after_s=1.0,
                    contended=True,
                )
        if requests and state.requests is not None and (wait := state.requests.wait_s(requests)):
            return Grant(refused=f"Rate limit for key '{key}': requests per minute.", retry_after_s=wait)
        if tokens and state.tokens is not None and (wait := state.tokens.wait_s(tokens)):
            return Grant(refused=f"Rate limit for key '{key}': tokens per minute.", retry_after_s=wait)
        grant = Grant(streams=streams, contended=contended)
        if state.requests is not None and requests:
            grant.requests = self._take(state.requests, requests)
            held.requests += grant.requests
        if state.tokens is not None and tokens:
            grant.tokens = self._take(state.tokens, tokens)
            held.tokens += grant.tokens
        held.streams += streams
        return grant

    def settle(
        self,
        holder: str,
        key: str,
        leased: tuple[float, float],
        unused: tuple[float, float],
        streams: int,
        now: float,
    ) -> bool:
        """Ends ``holder``'s leases of (requests, tokens) ``leased`` since it last settled, giving back ``unused``
        of them, and gives back ``streams`` slots. Returns whether the key is contended (see ``Grant``)."""
        state = self._keys.get(key)
        if state is None:
            return False
        held = state.holders.get(holder)
        if held is None:  # expired meanwhile: what it held was dropped already
            return now < state.contended_until
        held.seen = now
        held.requests = max(0.0, held.requests - leased[0])
        held.tokens = max(0.0, held.tokens - leased[1])
        held.streams = max(0, held.streams - streams)
        if state.requests is not None:
            state.requests.level += unused[0]
        if state.tokens is not None:
            state.tokens.level += unused[1]
        self._refill(state, now)
        return now < state.contended_until

    def holders(self, key: str) -> dict[str, dict[str, float]]:
        """Who holds what of ``key`` (for operators and tests)."""
        state = self._keys.get(key)
        if state is None:
            return {}
        return {h: {"requests": v.requests, "tokens": v.tokens, "streams": v.streams} for h, v in state.holders.items()}

    def _key(self, key: str, limits: KeyLimits, now: float) -> _Key:
        state = self._keys.get(key)
        if state is None or state.limits != limits:  # new, or redeployed with other limits: start full
            rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
            state = _Key(
                limits=limits,
                requests=_Pool(rpm, rpm, now) if rpm else None,
                tokens=_Pool(tpm, tpm, now) if tpm else None,
                holders=state.holders if state is not None else {},
            )
            self._keys[key] = state
        return state

    @staticmethod
    def _take(pool: _Pool, need: float) -> float:
        # The share beyond the need is whole units (a fraction of a request left in each of two replicas is a
        # request neither can admit), and none is given once the pool runs low: at the end of a key's budget
        # each grant is exactly what a request needs, so the last units are not stranded in another replica.
        share = math.floor(pool.capacity * LEASE_SHARE)
        if pool.level - need < 2 * share:
            share = 0
        amount = min(pool.level, need + share)
        pool.level -= amount
        return amount

    @staticmethod
    def _expire(state: _Key, now: float) -> None:
        for holder in [h for h, held in state.holders.items() if now - held.seen > HOLDER_TTL_S]:
            del state.holders[holder]

    @staticmethod
    def _refill(state: _Key, now: float) -> None:
        if state.requests is not None:
            state.requests.refill(sum(h.requests for h in state.holders.values()), now)
        if state.tokens is not None:
            state.tokens.refill(sum(h.tokens for h in state.holders.values()), now)


@serve.deployment(
    num_replicas=1,
    ray_actor_options={"num_cpus": 0},
    max_ongoing_requests=10_000,
    logging_config={"enable_access_log": False},
)
class KeyLimiter:
    """The ledger as a Serve deployment. Its methods are async with no await inside: each runs to its end on the
    replica's event loop, so no two interleave."""

    def __init__(self) -> None:
        self._ledger = Ledger()

    async def lease(
        self, holder: str, key: str, limits: KeyLimits, requests: float, tokens: float, streams: int
    ) -> Grant:
        return self._ledger.lease(holder, key, limits, requests, tokens, streams, time.monotonic())

    async def settle(
        self, holder: str, key: str, leased: tuple[float, float], unused: tuple[float, float], streams: int
    ) -> bool:
        return self._ledger.settle(holder, key, leased, unused, streams, time.monotonic())

    async def holders(self, key: str) -> dict[str, dict[str, float]]:
        return self._ledger.holders(key)


@dataclass(slots=True)
class _Lease:
    """One key's budget in one ingress replica."""

    requests: float = 0.0  # unspent
    tokens: float = 0.0
    leased_requests: float = 0.0  # granted since the last settle, spent or not
    leased_tokens: float = 0.0
    slots: int = 0  # stream slots held
    busy: int = 0  # of which in use
    contended: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one lease call at a time per key

    def idle(self) -> bool:
        return not (self.requests or self.tokens or self.leased_requests or self.leased_tokens or self.slots)


class Admission:
    """What one admitted request holds of its key: a stream slot per choice (each prompt's ``n``). Each choice
    gives its slot back when it ends (:meth:`release`); :meth:`release_all`, when the request ends, gives back the
    slots of choices that never started."""

    __slots__ = ("_release", "_slots")

    def __init__(self, release: Callable[[], None], slots: int = 1) -> None:
        self._release = release  # gives one slot back
        self._slots = slots

    def release(self) -> None:
        """Gives one slot back; nothing once every slot is back."""
        if self._slots > 0:
            self._slots -= 1
            self._release()

    def release_all(self) -> None:
        while self._slots > 0:
            self.release()


def _nothing() -> None:
    return None


class SharedLimits:
    """The ingress side: admits requests against leased budget, leasing more from the ledger when it runs out.

    ``ledger`` is the ``KeyLimiter`` handle, or None for limits kept by this replica alone (``keys``)."""

    def __init__(self, keys: KeyStore, ledger: Any | None, clock: Callable[[], float] = time.monotonic) -> None:
        self._keys = keys
        self._ledger = ledger
        self._clock = clock
        self._holder = f"ingress-{uuid.uuid4().hex[:12]}"
        self._leases: dict[str, _Lease] = {}
        self._limits: dict[str, KeyLimits] = {}
        self._tasks: set[asyncio.Task] = set()
        self._loop_task: asyncio.Task | None = None

    async def admit(self, principal: Principal | None, tokens: int, streams: int = 1) -> Admission:
        """Charges one request of ``tokens`` tokens and ``streams`` stream slots (one per choice) to the key, all or
        nothing, or raises ``OverloadedError``."""
        if principal is None:
            return Admission(_nothing, streams)
        limits = self._limits.get(principal.name) or self._limits.setdefault(principal.name, KeyLimits.of(principal))
        if not limits.any:
            return Admission(_nothing, streams)
        if self._ledger is None:
            return self._admit_locally(principal, tokens, streams)
        if limits.tokens_per_minute is not None and tokens > limits.tokens_per_minute:  # no lease can ever cover it
            raise OverloadedError(
                f"This request needs {tokens} tokens, more than key '{principal.name}' may use per minute.",
                retry_after_s=60.0,
            )
        if limits.max_streams is not None and streams > limits.max_streams:  # nor can any number of slots
            raise OverloadedError(too_many_streams(principal.name, streams, limits.max_streams), retry_after_s=60.0)
        lease = self._leases.setdefault(principal.name, _Lease())
        if self._needs(lease, limits, tokens, streams) != (0.0, 0.0, 0):
            async with lease.lock:
                need = self._needs(lease, limits, tokens, streams)  # another request may have leased meanwhile
                if need != (0.0, 0.0, 0):
                    try:
                        grant = await self._ledger.lease.remote(self._holder, principal.name, limits, *need)
                    except Exception as exc:  # the ledger is gone or restarting: this replica enforces alone
                        logger.warning("key limiter unreachable (%s): limits enforced per ingress replica", exc)
                        return self._admit_locally(principal, tokens, streams)
                    if grant.refused is not None:
                        raise OverloadedError(grant.refused, retry_after_s=grant.retry_after_s)
                    lease.requests += grant.requests
                    lease.leased_requests += grant.requests
                    lease.tokens += grant.tokens
                    lease.leased_tokens += grant.tokens
                    lease.slots += grant.streams
                    lease.contended = grant.contended
        if limits.requests_per_minute is not None:
            lease.requests -= 1
        if limits.tokens_per_minute is not None:
            lease.tokens -= tokens
        if limits.max_streams is None:
            return Admission(_nothing, streams)
        lease.busy += streams
        return Admission(lambda: self._release_slot(principal.name, lease), streams)

    @staticmethod
    def _needs(lease: _Lease, limits: KeyLimits, tokens: int, streams: int) -> tuple[float, float, int]:
        requests = max(0.0, 1.0 - lease.requests) if limits.requests_per_minute is not None else 0.0
        more_tokens = max(0.0, tokens - lease.tokens) if limits.tokens_per_minute is not None else 0.0
        more_streams = max(0, lease.busy + streams - lease.slots) if limits.max_streams is not None else 0
        return requests, more_tokens, more_streams

    def _admit_locally(self, principal: Principal, tokens: int, streams: int) -> Admission:
        self._keys.admit(principal, tokens, self._clock(), streams)
        return Admission(lambda: self._keys.release(principal), streams)

    def _release_slot(self, key: str, lease: _Lease) -> None:
        lease.busy -= 1
        if lease.contended:  # another replica was refused a slot of this key: give idle ones back now
            self._spawn(self._give_back_idle_slots(key, lease))

    async def _give_back_idle_slots(self, key: str, lease: _Lease) -> None:
        # Run after the release, not in it: a request of this replica that arrived meanwhile has taken the slot.
        async with lease.lock:
            idle = lease.slots - lease.busy
            if idle > 0:
                lease.slots -= idle
                await self._settle(key, lease, (0.0, 0.0), (0.0, 0.0), idle)

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _settle(
        self, key: str, lease: _Lease, leased: tuple[float, float], unused: tuple[float, float], streams: int
    ) -> None:
        if self._ledger is None:
            return
        try:
            lease.contended = await self._ledger.settle.remote(self._holder, key, leased, unused, streams)
        except Exception as exc:  # what it held expires at the ledger after HOLDER_TTL_S
            logger.warning("could not give back key %s's lease (%s)", key, exc)

    async def sync(self) -> None:
        """Gives back every key's unspent budget and idle slots (and says this replica is alive)."""
        for key, lease in list(self._leases.items()):
            if lease.lock.locked():  # a lease call is in flight: its grant must meet the balance it was asked for
                continue
            leased, unused = (lease.leased_requests, lease.leased_tokens), (lease.requests, lease.tokens)
            idle_slots = lease.slots - lease.busy
            if lease.idle() and not lease.busy:
                del self._leases[key]
                continue
            lease.requests = lease.tokens = lease.leased_requests = lease.leased_tokens = 0.0
            lease.slots -= idle_slots
            await self._settle(key, lease, leased, (max(0.0, unused[0]), max(0.0, unused[1])), idle_slots)

    def start(self) -> None:
        if self._ledger is not None and self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._sync_forever())

    async def _sync_forever(self) -> None:
        while True:
            await asyncio.sleep(LEASE_PERIOD_S)
            try:
                await self.sync()
            except Exception:
                logger.warning("key limits: sync failed", exc_info=True)

    async def stop(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
