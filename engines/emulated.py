"""The emulated engine: a real engine's time on the real clock, without its work.

It runs the same continuous batch as the simulator (:class:`engines.batching.ContinuousBatch`, timed by an
:class:`~engines.profile.EngineProfile`) with **one asyncio timer per iteration**, never one per token: at an
iteration's end every decoding sequence gets its next token, the prompts it prefilled get their first one,
finished sequences free their slot and KV reservation, the queue is admitted and the next iteration is
planned. Tokens are real ids of the variant's tokenizer (:class:`engines.token_source.TokenSource`) and each
request's stream turns them into text through the same detokenizer and stop-string path as the real backends
(:class:`engines.output.OutputStream`), at the token rates of the engine the profile describes. A stream is
woken once per message, as TensorRT-LLM's ``stream_interval`` does: with its first token at once, then with
everything it made before any of it has waited ``coalesce.interval_ms`` (at the last iteration end within it:
the next iteration's end is planned, so the loop knows when waiting longer would be late), and with its last
token at once; a consumer that is behind takes everything that piled up in one message.

Iteration ends are timed by :class:`engines.iteration_timer.IterationTimer` (a timerfd on Linux: asyncio's own
timers fire up to a millisecond late) on the engine's own timeline (the next one starts where the last one was
planned to end), so an event loop that is a little late now and then does not slow the engine down; one that falls
behind by more than an iteration restarts the timeline from now, as a real engine on a starved host would, and
that is counted (``late_restarts``, ``late_lost_s``) and logged: the emulation is then slower than its profile.

What it costs is kept apart from the stream path it shares with the real backends: ``scheduler_cpu_s`` is
the CPU spent in the iteration callbacks (scheduling, drawing tokens, waking streams), ``generated_tokens``
the tokens they made.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections import deque
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from core.errors import EngineConfigError, EngineDeadError, OverloadedError
from engines.batching import ContinuousBatch, Iteration
from engines.coalesce import Cadence, interval_s
from engines.config import EmulatedEngineConfig
from engines.iteration_timer import IterationTimer
from engines.kv_blocks import KvEvents, block_hashes
from engines.output import OutputStream, stop_token_ids
from engines.protocol import (
    Delta,
    Engine,
    EngineStats,
    GenerationRequest,
    check_fits_context,
    check_sampling_fields,
    validate_request,
)
from engines.rate import TokenRate
from engines.token_source import TokenSource

logger = logging.getLogger(__name__)

LATE_REPORT_S = 10.0  # the shortest time between two log lines about a late event loop
STEP_HISTORY = 1 << 16  # iterations whose durations are kept (step_durations_s): minutes of a busy engine


@dataclass(eq=False, slots=True)
class _Sequence:
    """One request inside the emulated engine (what :class:`ContinuousBatch` schedules)."""

    prompt_tokens: int
    max_tokens: int
    cursor: int  # the next position in the token source
    block_hashes: list[int]  # the prompt's whole KV blocks, for the prefix cache (empty without block reuse)
    stop_ids: frozenset[int]
    eos_id: int | None  # what the "model" says at a paragraph's end; None: ignore_eos (read on)
    min_tokens: int = 0  # no EOS and no stop token id before this many tokens (the walk reads past them)
    remaining_prefill: int = 0
    cached_tokens: int = 0  # prompt tokens the prefix cache supplied
    held_blocks: int = 0
    generated: int = 0
    decoding: bool = False
    finished: bool = False  # the engine ended it (max_tokens, EOS, a stop token id)
    aborted: bool = False  # its stream closed first
    new_ids: list[int] = field(default_factory=list)  # made since its stream last took them
    first_token_time: float | None = None
    last_token_at: float = 0.0  # loop time of its previous token, for the decode pace
    waiter: asyncio.Future[None] | None = None
    # When its stream is woken with what it made (monotonic): the first token and the last at once, the rest once
    # per stream interval, so the stream's work is per message, not per token.
    cadence: Cadence = field(default_factory=lambda: Cadence(0.0))

    @property
    def kv_tokens(self) -> int:
        return self.prompt_tokens + self.max_tokens


class EmulatedEngine(Engine):
    """See the module docstring."""

    def __init__(self, config: EmulatedEngineConfig) -> None:
        self.config = config
        self.profile = config.engine_profile()
        self.tokenizer: Any = None
        self._source: TokenSource | None = None
        self._eos_ids: list[int] = []
        self._vocab_size = 0
        self._batch: ContinuousBatch[_Sequence] = ContinuousBatch(self.profile)
        self._decoding: list[_Sequence] = []
        self._aborted: list[_Sequence] = []  # admitted sequences whose stream closed: freed at the iteration's end
        self._live: set[_Sequence] = set()  # every sequence whose stream is open
        self._iteration: Iteration[_Sequence] | None = None
        self._iteration_end = 0.0  # time.monotonic() at which the current iteration ends
        self._timer: IterationTimer | None = None
        self._busy = False  # an iteration is running
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rng = random.Random(config.seed)
        self._rate = TokenRate()
        self._started = False
        self._stopped = False
        self.scheduler_cpu_s = 0.0
        self.generated_tokens = 0
        self.iterations = 0
        # The last iterations' durations (s) as the profile planned them, the engine's own steps: what a stream's
        # message gap is judged against (its p99 step plus the stream interval, bench overhead). One append per
        # iteration, bounded.
        self.step_durations_s: deque[float] = deque(maxlen=STEP_HISTORY)
        self.late_restarts = 0  # iterations whose loop came back over an iteration late: the timeline restarted
        self.late_lost_s = 0.0  # the time those restarts cost the engine
        self._late_reported_at = 0.0

    # ---------------------------------------------------------------- lifecycle

    @property
    def expected_startup_s(self) -> float:
        """The profile's cold start, scaled (its tokenizer loads in a fraction of a second)."""
        return self.profile.startup_s * self.config.startup_time_scale

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._timer = IterationTimer(self._loop, self._end_iteration)
        self._late_reported_at = time.monotonic()
        self.tokenizer, self._source = await asyncio.to_thread(self._load_tokens)
        eos = self.tokenizer.eos_token_id
        self._eos_ids = [] if eos is None else [int(eos)]
        self._vocab_size = len(self.tokenizer)
        # A real engine's cold start (weights, warm-up), so that autoscaling sees what it would in production.
        await asyncio.sleep(self.profile.startup_s * self.config.startup_time_scale)
        self._started = True
        logger.info(
            "emulated engine ready: %s (%s), context %d, %d batch slots",
            self.config.model,
            self.profile.source or "inline figures",
            self.profile.context_length,
            self.profile.max_running_requests,
        )

    def _load_tokens(self) -> tuple[Any, TokenSource]:
        from engines.model_ref import resolve_model
        from engines.tokenizer import FastTokenizer

        path = resolve_model(self.config.tokenizer)
        try:
            if (Path(path) / "tokenizer.json").is_file():
                # The tokenizers library alone: importing transformers (and torch with it) costs ~3.5 s of CPU and
                # loading its tokenizer ~1.2 s more, nearly all of a replica's start on a small CPU, where new
                # replicas start side by side while the spike runs; this engine only encodes, decodes and reads EOS
                # (the same ids and text: checked against AutoTokenizer in tests/engines/test_emulated.py).
                tokenizer: Any = FastTokenizer.from_dir(path)
            else:
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as e:
            raise EngineConfigError(f"engine.tokenizer: cannot load {self.config.tokenizer!r}: {e}") from e
        return tokenizer, TokenSource(tokenizer)

    async def shutdown(self) -> None:
        self._stopped = True
        self._busy = False
        if self._timer is not None:
            self._timer.close()
        for seq in list(self._live):  # open streams end with EngineDeadError, as the contract says
            seq.finished = True
            self._wake(seq)

    async def check_health(self) -> None:
        if self._stopped or not self._started:
            raise EngineDeadError("The engine is not running.")

    @property
    def context_length(self) -> int:
        return self.profile.context_length

    @property
    def kv_block_tokens(self) -> int | None:
        return self.profile.kv_block_tokens if self._batch.cache is not None else None

    def kv_events(self) -> KvEvents | None:
        cache = self._batch.cache
        return None if cache is None else cache.drain_events()

    # ---------------------------------------------------------------- stats

    def stats(self) -> EngineStats:
        batch, profile = self._batch, self.profile
        block = profile.kv_block_tokens
        cache = batch.cache
        running = [*self._decoding, *batch.prefilling]
        now = time.monotonic()
        return EngineStats(
            queued_requests=len(batch.waiting),
            running_requests=batch.running,
            queued_prompt_tokens=batch.queued_prompt_tokens,
            # GUARANTEED_NO_EVICT reserves a sequence's whole context at admission: that is what is "used".
            kv_blocks_used=math.ceil(batch.kv_used / block),
            kv_blocks_total=profile.kv_cache_tokens // block,
            tokens_per_s=self._rate.rate(now),
            recent_tpot_ms=self._rate.tpot_ms(now),
            recent_decode_batch=self._rate.decode_batch(now),
            context_tokens=sum(s.prompt_tokens - s.remaining_prefill + s.generated for s in running),
            healthy=self._started and not self._stopped,
            context_length=profile.context_length,
            max_running_requests=profile.max_running_requests,
            # Streams still open and sequences still scheduled, each once: 0 when idle, more means a leak.
            registered_requests=len(self._live.union(running, batch.waiting, self._aborted)),
            cached_blocks=len(cache) if cache is not None else 0,
            cache_hit_tokens=cache.hit_tokens if cache is not None else 0,
            cache_prompt_tokens=cache.prompt_tokens if cache is not None else 0,
        )

    # ---------------------------------------------------------------- generation

    def generate(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        # No coalesce() around it: the batch loop itself wakes a stream once per interval (``_wake_due``), as
        # TensorRT-LLM's stream_interval does, and whatever piled up while the consumer was busy goes out whole.
        return self._stream(request)

    def _admit_check(self, request: GenerationRequest) -> None:
        if not self._started or self._stopped:
            raise EngineDeadError("The engine is not running.")
        validate_request(request, context_length=self.context_length, vocab_size=self._vocab_size)
        check_sampling_fields(request, self.config.sampling_fields(), "the emulated engine (backend emulated)")
        check_fits_context(request, self.context_length)
        batch = self._batch
        must_wait = bool(batch.waiting) or batch.running >= self.profile.max_running_requests
        if must_wait and len(batch.waiting) >= self.config.max_queued_requests:
            raise OverloadedError(
                f"The engine has {len(self._batch.waiting)} requests waiting "
                f"(limit {self.config.max_queued_requests}).",
                retry_after_s=1.0,
            )

    async def _stream(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        self._admit_check(request)
        assert self._source is not None and self._loop is not None
        s = request.sampling
        stop_ids = stop_token_ids(s, self._eos_ids)
        cache = self._batch.cache
        seq = _Sequence(
            prompt_tokens=len(request.prompt_token_ids),
            max_tokens=s.max_tokens,
            cursor=self._source.start(request.prompt_token_ids, s.seed, s.greedy, self._rng),
            block_hashes=[] if cache is None else block_hashes(request.prompt_token_ids, cache.block_tokens),
            stop_ids=frozenset(stop_ids),
            eos_id=None if s.ignore_eos or not self._eos_ids else self._eos_ids[0],
            min_tokens=s.min_tokens,
        )
        # No rate here: the batch loop counts tokens once per iteration, for all its sequences at once.
        output = OutputStream(request, None, tokenizer=self.tokenizer, stop_ids=stop_ids)
        # Stop strings are matched on the text as it is made: a request with them sees every token at once, so
        # that it ends (and counts its usage) at the token that completes one, not a message later.
        seq.cadence = Cadence(0.0 if s.stop else interval_s(self.config))
        self._live.add(seq)
        self._batch.enqueue(seq)
        self._batch.admit()  # as the simulator does; its prefill starts with the next iteration
        if not self._busy:  # idle: that iteration starts now
            self._plan(time.monotonic())
        try:
            while True:
                # Wait for the next message to be due, even when tokens are already here: a consumer that comes back
                # within the interval (its last message took a while to send) must not send one token at a time.
                if not seq.finished and (
                    not seq.new_ids or not seq.cadence.due(time.monotonic(), next_at=self._next_end())
                ):
                    seq.waiter = self._loop.create_future()
                    await seq.waiter
                if self._stopped:
                    raise EngineDeadError("The engine shut down during this request.")
                new_ids, seq.new_ids = seq.new_ids, []
                delta = output.from_ids(
                    new_ids,
                    completion_tokens=seq.generated,
                    engine_finished=seq.finished,
                    length_reached=seq.generated >= s.max_tokens,
                    first_token_time=seq.first_token_time,
                )
                if cache is not None:
                    delta.cached_tokens = seq.cached_tokens
                # the next one an interval after this one was due (at once if this one showed no text)
                seq.cadence.sent(time.monotonic(), readable=delta.readable)
                yield delta
                if delta.finished:
                    return
        finally:
            self._live.discard(seq)
            seq.waiter = None
            if not seq.finished:
                self._abort(seq)

    def _abort(self, seq: _Sequence) -> None:
        seq.aborted = True
        if seq in self._batch.waiting:
            self._batch.cancel(seq, decoding=False)  # not in any iteration yet: free it now
        elif not self._busy:
            self._batch.cancel(seq, decoding=seq.decoding)
        else:
            self._aborted.append(seq)  # it may be in the running iteration's chunk: free it at its end

    @staticmethod
    def _wake(seq: _Sequence) -> None:
        waiter = seq.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _next_end(self) -> float | None:
        """When the running iteration ends (monotonic), the next chance to send a stream's message; None when idle."""
        return self._iteration_end if self._busy else None

    def _wake_due(self, decoding: Iterable[_Sequence], now: float) -> None:
        """Wakes the decoding streams whose message is due: their interval over, or over before the next iteration
        ends (a first or last token wakes its stream at once, in ``_end_iteration``). Called once the next
        iteration is planned; one pass, the next iteration's end read once."""
        next_at = self._next_end()
        for seq in decoding:
            if seq.cadence.due(now, next_at=next_at):
                self._wake(seq)

    # ---------------------------------------------------------------- the iteration loop

    def _plan(self, start: float) -> None:
        """Plans the next iteration from ``start`` (monotonic) and sets its one timer; idle when nothing runs."""
        assert self._timer is not None
        iteration = self._iteration = self._batch.plan()
        self._busy = iteration is not None and not self._stopped
        if iteration is None or self._stopped:
            return
        self._iteration_end = start + iteration.duration_s
        self._timer.set(self._iteration_end)

    def _end_iteration(self) -> None:
        cpu_started = time.thread_time()
        assert self._loop is not None and self._source is not None and self._iteration is not None
        iteration, planned_end = self._iteration, self._iteration_end
        wall = time.time()
        now = time.monotonic()
        made = 0
        decode_s = 0.0
        # Every sequence that decoded during the iteration makes its next token.
        still: list[_Sequence] = []
        for seq in self._decoding:
            if seq.aborted:
                continue
            self._next_token(seq)
            decode_s += now - seq.last_token_at
            seq.last_token_at = now
            made += 1
            if seq.finished:
                self._batch.finish(seq)
                self._wake(seq)
            else:
                still.append(seq)
        decoded = len(still)  # the streams woken once the next iteration is planned (its end decides who is due)
        self._decoding = still
        if made:
            self._rate.add(made, now, decode_s)
        # The prompts it completed make their first token.
        first = 0
        for seq in self._batch.complete_prefill(iteration):
            seq.decoding = True
            if seq.aborted:
                continue
            seq.first_token_time = wall
            seq.last_token_at = now
            self._next_token(seq)
            first += 1
            if seq.finished:
                self._batch.finish(seq)
            else:
                self._decoding.append(seq)
            self._wake(seq)
        if first:
            self._rate.add(first, now)  # a first token's wait is TTFT, not decode
        for seq in self._aborted:
            self._batch.cancel(seq, decoding=seq.decoding)
        self._aborted.clear()
        self.generated_tokens += made + first
        self.iterations += 1
        self.step_durations_s.append(iteration.duration_s)
        self._batch.admit()
        # The engine's own timeline; a loop that fell more than an iteration behind restarts it from now.
        late = time.monotonic() - planned_end
        if late < iteration.duration_s:
            self._plan(planned_end)
        else:
            self._count_late_restart(late)
            self._plan(planned_end + late)
        self._wake_due(islice(still, decoded), now)  # not the first tokens appended since: woken at once
        self.scheduler_cpu_s += time.thread_time() - cpu_started

    def _count_late_restart(self, late_s: float) -> None:
        """Counts what the engine lost because its event loop came back more than an iteration late, and says so
        in the log at most every ``LATE_REPORT_S``: an emulation on a starved host is slower than its profile, and
        a bench that compares it with the simulator must know."""
        self.late_restarts += 1
        self.late_lost_s += late_s
        now = time.monotonic()
        if now - self._late_reported_at >= LATE_REPORT_S:
            self._late_reported_at = now
            logger.warning(
                "emulated engine: its event loop came back over an iteration late %d times since it started and the "
                "engine lost %.3f s of its timeline (a busy host: slower than the profile)",
                self.late_restarts,
                self.late_lost_s,
            )

    def _next_token(self, seq: _Sequence) -> None:
        """Appends the sequence's next token and decides whether the engine ends it there."""
        source = self._source
        assert source is not None
        ids = source.ids
        early = seq.generated < seq.min_tokens  # min_tokens masks EOS and stop ids, as a real sampler does
        if seq.eos_id is not None and seq.generated and seq.cursor in source.paragraph_ends and not early:
            token = seq.eos_id  # the paragraph is over: the "model" says EOS
        else:
            token = ids[seq.cursor % len(ids)]
            for _ in range(len(ids) if early and seq.stop_ids else 0):
                if token not in seq.stop_ids:
                    break
                seq.cursor = seq.cursor % len(ids) + 1  # the masked stop id: the walk reads on to the next token
                token = ids[seq.cursor % len(ids)]
        seq.cursor = seq.cursor % len(ids) + 1
        seq.generated += 1
        seq.new_ids.append(token)
        if seq.generated >= seq.max_tokens or token in seq.stop_ids:
            seq.finished = True
