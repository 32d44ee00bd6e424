"""Iteration-level continuous batching without a clock: who is admitted, and what the next iteration does.

The one implementation of an engine's scheduling that both clocks share: the simulator (``sim/replica.py``)
steps it in virtual time, the emulated backend (``engines/emulated.py``) on the real clock. An iteration
decodes one token of every decoding sequence and prefills up to the token budget of admitted prompts, first
come first served (chunked prefill, as TensorRT-LLM and vLLM do); its duration is
:meth:`EngineProfile.step_ms <engines.profile.EngineProfile.step_ms>`.

Admission follows TensorRT-LLM's default (GUARANTEED_NO_EVICT) scheduler: a request takes a batch slot and
reserves its whole context (prompt + max_tokens) in the KV cache, in arrival order; the head of the queue
blocks the rest when it does not fit (alone, it always runs).

With a :class:`~engines.prefix_cache.PrefixCache` (the profile's ``block_reuse``), an admitted prompt takes its
cached leading blocks and only the rest is prefilled; its blocks are stored when its prefill completes and stay
cached after it ends, in the KV that running sequences have not reserved.

The owner keeps the decoding sequences (the simulator in a heap by finish step, the emulator in a list) and
tells this class when one finishes; here only their number matters.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from engines.prefix_cache import PrefixCache
from engines.profile import EngineProfile


class Batchable(Protocol):
    """What the scheduler reads and writes on a request."""

    prompt_tokens: int
    remaining_prefill: int  # prompt tokens not yet prefilled; set on admission
    cached_tokens: int  # prompt tokens taken from the prefix cache; set on admission
    held_blocks: int  # leading blocks it references in the prefix cache

    @property
    def block_hashes(self) -> Sequence[int]:
        """The prompt's whole KV blocks (engines.kv_blocks); empty: nothing to reuse."""
        ...

    @property
    def kv_tokens(self) -> int:
        """The KV cache the request reserves while it runs: prompt + max_tokens."""
        ...


R = TypeVar("R", bound=Batchable)


@dataclass(slots=True)
class Iteration(Generic[R]):
    """One planned iteration: the prompt tokens each prefilling request gets, and how long it takes."""

    chunk: list[tuple[R, int]] = field(default_factory=list)
    decoding: int = 0  # sequences that make a token in this iteration
    duration_s: float = 0.0

    @property
    def prefill_tokens(self) -> int:
        return sum(tokens for _, tokens in self.chunk)


class ContinuousBatch(Generic[R]):
    """The waiting queue, the prefilling requests, the decode batch's size and the KV cache they hold."""

    def __init__(self, profile: EngineProfile) -> None:
        self.profile = profile
        self.cache = PrefixCache(profile.kv_block_tokens) if profile.block_reuse else None
        self.waiting: deque[R] = deque()  # no slot or KV room yet
        self.prefilling: deque[R] = deque()  # admitted, prompt not fully prefilled
        self.decoding = 0  # admitted, prompt done, making a token per iteration
        self.kv_used = 0  # tokens reserved by admitted requests
        self.queued_prompt_tokens = 0  # prompt tokens not yet prefilled (waiting + prefilling)

    @property
    def running(self) -> int:
        return len(self.prefilling) + self.decoding

    @property
    def idle(self) -> bool:
        return not (self.waiting or self.prefilling or self.decoding)

    def enqueue(self, request: R) -> None:
        self.waiting.append(request)
        self.queued_prompt_tokens += request.prompt_tokens

    def admit(self) -> list[R]:
        """Moves waiting requests into the batch while slots and KV allow; returns those admitted."""
        profile = self.profile
        waiting = self.waiting
        admitted = []
        while waiting and self.running < profile.max_running_requests:
            request = waiting[0]
            if self.kv_used + request.kv_tokens > profile.kv_cache_tokens and self.running > 0:
                break  # head-of-line: waits for running sequences to free KV (alone, it always runs)
            waiting.popleft()
            self.kv_used += request.kv_tokens
            request.remaining_prefill = request.prompt_tokens
            if self.cache is not None and request.block_hashes:
                request.held_blocks, reused = self.cache.acquire(request.block_hashes, request.prompt_tokens)
                request.cached_tokens = reused
                request.remaining_prefill -= reused
                self.queued_prompt_tokens -= reused
            self.prefilling.append(request)
            admitted.append(request)
        if admitted:
            self._fit_cache()
        return admitted

    def _fit_cache(self) -> None:
        """Cached blocks no sequence uses live in the KV that admitted sequences have not reserved."""
        if self.cache is not None:
            self.cache.fit(self.profile.kv_cache_tokens - self.kv_used)

    def plan(self) -> Iteration[R] | None:
        """The next iteration from the current batch, or None when there is nothing to run."""
        decoding = self.decoding
        chunk: list[tuple[R, int]] = []
        taken = 0
        if self.prefilling:
            budget = max(self.profile.max_num_tokens - decoding, 1)
            for request in self.prefilling:
                tokens = min(request.remaining_prefill, budget - taken)
                chunk.append((request, tokens))
                taken += tokens
                if taken >= budget:
                    break
        elif not decoding:
            return None
        return Iteration(chunk=chunk, decoding=decoding, duration_s=1e-3 * self.profile.step_ms(decoding, taken))

    def complete_prefill(self, iteration: Iteration[R]) -> list[R]:
        """Applies an iteration's prefill; returns the requests whose prompt it completed, in order.

        They made their first token in this iteration and count as decoding from now on (the owner calls
        :meth:`finish` for one that needs no more tokens)."""
        done = []
        for request, tokens in iteration.chunk:
            request.remaining_prefill -= tokens
            self.queued_prompt_tokens -= tokens
            if request.remaining_prefill == 0:
                # Prefill completes in FIFO order, so the finished prompt is at the head.
                self.prefilling.popleft()
                self.decoding += 1
                if self.cache is not None and request.block_hashes:
                    request.held_blocks = self.cache.store(request.block_hashes, request.held_blocks)
                done.append(request)
        return done

    def finish(self, request: R) -> None:
        """A decoding request is done: its slot and KV reservation are free (its prompt's blocks stay cached)."""
        self.decoding -= 1
        self._free(request)

    def _free(self, request: R) -> None:
        self.kv_used -= request.kv_tokens
        if self.cache is not None and request.held_blocks:
            self.cache.release(request.block_hashes, request.held_blocks)
            request.held_blocks = 0
        self._fit_cache()

    def cancel(self, request: R, *, decoding: bool) -> None:
        """Removes a request wherever it is (aborted by its client), freeing what it held."""
        if decoding:
            self.finish(request)
        elif request in self.prefilling:
            self.prefilling.remove(request)
            self.queued_prompt_tokens -= request.remaining_prefill
            self._free(request)
        elif request in self.waiting:
            self.waiting.remove(request)
            self.queued_prompt_tokens -= request.prompt_tokens
