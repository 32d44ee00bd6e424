"""The embedded engine: transformers' continuous batching (``ContinuousBatchingManager``), CPU or CUDA.

One background thread (transformers') runs the batch loop; every request registers an asyncio callback that
receives its outputs on our event loop. Each output carries *all* tokens so far, so we keep a cursor per
request and turn the new tokens into text incrementally.

transformers' ``ContinuousBatchingManager.cancel_request`` (5.x) emits no final output and never removes the
request's result handler, so whoever cancels must end the stream and unregister the handler: ``_release`` does
both, whichever way a request ends (``tests/engines/test_hf.py``: a cancelled stream frees its slot).

Prefix caching is transformers' own (5.2x, ``ContinuousBatchingConfig.allow_block_sharing``, on by default, for
models whose layers are all full attention): every whole ``page_size`` block a forward pass completes gets a chained
content hash in its allocator's ``BlockLedger`` (``cache_allocators/cache_allocator.py``), a finished request's
hashed blocks stay there as ``cached_blocks`` until memory pressure evicts them all, and a new request takes the
longest run of hashed leading blocks of its prompt (``PagedAttentionCache.search_prefix_match``, never the block
holding the prompt's last token). transformers reports none of it, so :class:`_KvBlockIndex` reads the ledgers' hashes
and names them as the router does (``engines.kv_blocks``), and the engine wraps ``search_prefix_match`` on its cache to
learn each request's reused tokens (``Delta.cached_tokens``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from core.errors import EngineConfigError, EngineDeadError, OverloadedError
from engines.coalesce import coalesce, interval_s
from engines.config import HFEngineConfig
from engines.kv_blocks import ROOT_HASH, KvEvents, chain_hash
from engines.output import OutputStream, stop_token_ids
from engines.protocol import (
    FINISH_ABORT,
    Delta,
    Engine,
    EngineStats,
    GenerationRequest,
    check_fits_context,
    check_sampling_fields,
    validate_request,
)
from engines.rate import TokenRate

logger = logging.getLogger(__name__)

# How long start() waits for the batch loop to build its processor (KV cache, scheduler): on a GPU the cache
# takes most of its memory, which may take a while; a loop that needs longer than this is stuck.
LOOP_START_TIMEOUT_S = 300.0


class HFEngine(Engine):
    """A transformers model behind continuous batching."""

    def __init__(self, config: HFEngineConfig, *, loop_start_timeout_s: float = LOOP_START_TIMEOUT_S) -> None:
        self.config = config
        self.loop_start_timeout_s = loop_start_timeout_s
        self.tokenizer: Any = None
        self.model: Any = None
        self._manager: Any = None
        self._context_length = 0
        self._vocab_size: int | None = None
        self._eos_ids: list[int] = []
        self._ids = itertools.count()
        self._live: set[str] = set()  # engine request ids registered with the manager
        self._rate = TokenRate()
        self._last_step = -1  # the batch loop's step counter at the last health check, and when it last moved
        self._last_step_at = time.monotonic()
        self._stopped = False
        # transformers' prefix cache, where it keeps one (see the module docstring); None: it does not
        self._kv_index: _KvBlockIndex | None = None
        self._matched: dict[str, int] = {}  # request id -> prompt tokens it took from the cache (batch loop writes)
        self._hit_tokens = 0  # since the start: prompt tokens taken from the prefix cache, prompt tokens scheduled
        self._prompt_tokens = 0

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        await asyncio.to_thread(self._load)

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
        from transformers.generation import ContinuousBatchingConfig

        from engines.model_ref import resolve_model

        cfg = self.config
        path = resolve_model(cfg.model)
        device = cfg.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise EngineConfigError("engine.device: 'cuda' was asked for but no GPU is visible to this process.")
        dtype = {"auto": torch.bfloat16 if device == "cuda" else torch.float32}.get(cfg.dtype) or getattr(
            torch, cfg.dtype
        )
        # Ray pins OMP_NUM_THREADS=1 in replicas with fractional CPUs; choose the thread count on purpose (on the GPU
        # too: the batch loop's CPU side runs torch ops, HFEngineConfig.for_replica).
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        elif device == "cpu":
            torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            model_kwargs: dict[str, Any] = {"dtype": dtype}
            if cfg.attn_implementation:
                model_kwargs["attn_implementation"] = cfg.attn_implementation
            self.model = AutoModelForCausalLM.from_pretrained(path, **model_kwargs).to(device)  # type: ignore[arg-type]
        except (OSError, ValueError) as e:
            raise EngineConfigError(f"engine.model: cannot load {cfg.model!r} ({path}): {e}") from e
        self.model.eval()

        text_config = self.model.config.get_text_config()
        model_context = int(getattr(text_config, "max_position_embeddings", 0) or 2048)
        if cfg.context_length and cfg.context_length > model_context:
            raise EngineConfigError(
                f"engine.context_length: {cfg.context_length} exceeds the model's "
                f"max_position_embeddings ({model_context})."
            )
        self._context_length = cfg.context_length or model_context
        self._vocab_size = int(getattr(text_config, "vocab_size", 0)) or None
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self._eos_ids = [e for e in (eos if isinstance(eos, list) else [eos]) if e is not None]

        # Sampling processors exist only for non-default values, and each request then carries its own
        # temperature / top_p / top_k (per_request_processors). Greedy is top_k=1.
        gen_config = GenerationConfig(
            do_sample=True,
            temperature=0.7,
            top_p=0.9,
            top_k=50,
            max_new_tokens=16,
            eos_token_id=self._eos_ids or -1,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        num_blocks, max_batch_tokens = cfg.num_blocks, cfg.max_batch_tokens
        if device == "cpu":
            # On CPU transformers sizes the cache and the step from free RAM, which on a laptop means gigabytes.
            # Budget ~1k tokens of KV per running sequence (at least two full contexts) and 256-token steps.
            if num_blocks is None:
                num_blocks = max(
                    math.ceil(cfg.max_running_requests * 1024 / cfg.page_size),
                    math.ceil(2 * self._context_length / cfg.page_size),
                )
            max_batch_tokens = max_batch_tokens or 256
        cb_config = ContinuousBatchingConfig(
            page_size=cfg.page_size,
            num_blocks=num_blocks,
            max_batch_tokens=max_batch_tokens,
            max_requests_per_batch=cfg.max_running_requests,
            per_request_processors=True,
            seed=cfg.seed,
        )
        with torch.inference_mode():
            self._manager = self.model.init_continuous_batching(
                generation_config=gen_config, continuous_batching_config=cb_config
            )
            self._manager.start()
        self._wait_for_batch_processor()
        self._watch_prefix_cache()
        logger.info("hf engine ready: %s on %s/%s, context %d", cfg.model, device, dtype, self._context_length)

    def _wait_for_batch_processor(self) -> None:
        """Blocks until the batch loop has built its processor, so that stats() reports the real KV cache from
        the moment start() returns (a replica the router and the autoscaler see with no capacity is no use).

        transformers 5.24 builds the processor (cache, scheduler) on the loop's own thread after
        ``manager.start()`` has returned (``ContinuousBatchingManager._run_generation_loop``) and signals nothing
        when it is done, hence a bounded poll; a loop that dies first records its error in the thread status.
        """
        manager = self._manager
        deadline = time.monotonic() + self.loop_start_timeout_s
        while manager.batch_processor is None:
            status = manager.background_thread_status
            if status.fatal_error is not None or not manager.is_running():
                self._abandon_manager()
                raise EngineConfigError(
                    "engine: the batch loop failed while building its KV cache and scheduler "
                    f"(engine.num_blocks, engine.max_batch_tokens): {status.fatal_error or 'it exited'}"
                )
            if time.monotonic() > deadline:
                self._abandon_manager()
                raise EngineDeadError(
                    f"The engine's batch loop did not build its KV cache within {self.loop_start_timeout_s:g} s."
                )
            time.sleep(0.01)

    def _watch_prefix_cache(self) -> None:
        """Sets up what the engine tells of transformers' prefix cache, where it keeps one (module docstring).

        The wrapper runs on the batch loop's thread, before a request's first forward pass; it only writes to a dict
        and two counters. Every pending request the scheduler takes passes through it once (``Scheduler.
        _infer_request_tokens``); a preempted one that comes back keeps its first figure.
        """
        cache = self._manager.batch_processor.cache
        allocators = list(getattr(cache, "cache_allocators", {}).values())
        pages = {int(getattr(a, "tokens_per_page", 0)) for a in allocators}
        search = getattr(cache, "search_prefix_match", None)
        if not (getattr(cache, "use_prefix_sharing", False) and search is not None and len(pages) == 1 and min(pages)):
            return
        if not all(hasattr(getattr(a, "ledger", None), "hash_to_block") for a in allocators):
            return
        try:
            from transformers.generation.continuous_batching.cache_allocators.cache_allocator import (
                compute_block_hash,
            )
        except ImportError:
            return
        matched, live = self._matched, self._live

        def search_prefix_match(request_id: str, prompt_ids: list[int]) -> int:
            reused = int(search(request_id, prompt_ids))
            if request_id in live and request_id not in matched:
                matched[request_id] = reused
                self._hit_tokens += reused
                self._prompt_tokens += len(prompt_ids)
            return reused

        cache.search_prefix_match = search_prefix_match
        self._kv_index = _KvBlockIndex([a.ledger for a in allocators], pages.pop(), compute_block_hash)

    def _abandon_manager(self) -> None:
        """Stops a manager whose loop failed to start (bounded: a stuck loop must not hold start() forever)."""
        manager, self._manager = self._manager, None
        self._stopped = True
        manager.stop(block=True, timeout=10.0)

    async def shutdown(self) -> None:
        self._stopped = True
        manager, self._manager = self._manager, None
        if manager is not None:
            await asyncio.to_thread(manager.stop, True, 30.0)

    async def check_health(self) -> None:
        if self._stopped or self._manager is None:
            raise EngineDeadError("The engine is not running.")
        status = self._manager.background_thread_status
        if not self._manager.is_running() or status.fatal_error is not None:
            raise EngineDeadError(f"The engine's batch loop has stopped: {status.fatal_error or 'exited'}")
        # A loop that is alive but stuck: work is pending and no step has completed for too long.
        now = time.monotonic()
        step = getattr(self._manager, "current_batch", 0)
        stats = self.stats()
        if step != self._last_step or not (stats.running_requests or stats.queued_requests):
            self._last_step, self._last_step_at = step, now
        elif now - self._last_step_at > self.config.hang_timeout_s:
            raise EngineDeadError(
                f"The engine's batch loop made no progress for {now - self._last_step_at:.0f} s "
                f"with {stats.running_requests} running and {stats.queued_requests} queued requests."
            )

    @property
    def context_length(self) -> int:
        return self._context_length

    @property
    def kv_block_tokens(self) -> int | None:
        return self._kv_index.block_tokens if self._kv_index is not None else None

    def kv_events(self) -> KvEvents | None:
        return self._kv_index.drain() if self._kv_index is not None else None

    # ---------------------------------------------------------------- stats

    def stats(self) -> EngineStats:
        manager = self._manager
        processor = manager.batch_processor if manager is not None else None
        if processor is None:
            # The batch loop has not built its processor yet: no load, but the limits are already known.
            return EngineStats(
                queued_requests=manager.input_queue.qsize() if manager is not None else 0,
                healthy=manager is not None and not self._stopped,
                context_length=self._context_length,
                max_running_requests=self.config.max_running_requests,
            )
        scheduler, cache = processor.scheduler, processor.cache
        # Plain reads of dict sizes from another thread: a snapshot, possibly one step old, which is fine.
        waiting = list(scheduler.waiting_requests.values())
        active = list(scheduler.active_requests.values())
        total_blocks = int(getattr(cache, "num_blocks", 0))
        used_blocks = round(_held_fraction(cache) * total_blocks)
        now = time.monotonic()
        return EngineStats(
            queued_requests=len(waiting) + manager.input_queue.qsize(),
            running_requests=len(active),
            # position_offset: the tokens of the sequence already in the cache (transformers' RequestState)
            context_tokens=sum(getattr(state, "position_offset", 0) for state in active),
            queued_prompt_tokens=sum(len(s.initial_tokens) for s in waiting),
            kv_blocks_used=used_blocks,
            kv_blocks_total=total_blocks,
            tokens_per_s=self._rate.rate(now),
            recent_tpot_ms=self._rate.tpot_ms(now),
            recent_decode_batch=self._rate.decode_batch(now),
            healthy=manager.is_running() and manager.background_thread_status.fatal_error is None,
            context_length=self._context_length,
            max_running_requests=self.config.max_running_requests,
            registered_requests=self.registered_requests(),
            cached_blocks=self._kv_index.blocks_held() if self._kv_index is not None else 0,
            cache_hit_tokens=self._hit_tokens,
            cache_prompt_tokens=self._prompt_tokens,
        )

    def registered_requests(self) -> int:
        """Requests this engine still tracks anywhere (ours and transformers'): 0 when idle, or something leaked."""
        if self._manager is None:
            return len(self._live)
        with self._manager.output_router._lock:
            handlers = len(self._manager.output_router.result_handlers)
        return len(self._live) + handlers

    # ---------------------------------------------------------------- generation

    def generate(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        return coalesce(self._stream(request), interval_s(self.config))

    def _admit(self, request: GenerationRequest) -> None:
        if self._manager is None or self._stopped:
            raise EngineDeadError("The engine is not running.")
        validate_request(request, context_length=self._context_length, vocab_size=self._vocab_size)
        check_sampling_fields(request, self.config.sampling_fields(), "the transformers engine (backend hf)")
        check_fits_context(request, self._context_length)
        stats = self.stats()
        if stats.queued_requests >= self.config.max_queued_requests:
            raise OverloadedError(
                f"The engine has {stats.queued_requests} requests waiting (limit {self.config.max_queued_requests}).",
                retry_after_s=1.0,
            )

    def _sampling_kwargs(self, request: GenerationRequest) -> dict[str, Any]:
        s = request.sampling
        vocab = self._vocab_size or 1 << 30
        if s.greedy:
            return {"temperature": 1.0, "top_p": 1.0, "top_k": 1}
        return {
            "temperature": float(s.temperature),
            "top_p": float(s.top_p),
            "top_k": int(min(s.top_k, vocab)) if s.top_k > 0 else int(vocab),
        }

    async def _stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        self._admit(request)
        s = request.sampling
        manager = self._manager
        rid = f"{request.request_id}#{next(self._ids)}"
        outputs: asyncio.Queue[Any] = asyncio.Queue()
        stop_ids = stop_token_ids(s, self._eos_ids)
        output = OutputStream(request, self._rate, tokenizer=self.tokenizer, stop_ids=stop_ids)

        manager.register_result_handler(rid, outputs.put_nowait)
        self._live.add(rid)
        kv_index = self._kv_index
        prompt = list(request.prompt_token_ids)
        finished = False
        try:
            if kv_index is not None:
                kv_index.track(rid, prompt)
            added = manager.add_request(
                prompt,
                request_id=rid,
                max_new_tokens=s.max_tokens,
                streaming=True,
                eos_token_id=sorted(stop_ids) if stop_ids else -1,
                **self._sampling_kwargs(request),
            )
            if added is None:  # the manager logs and drops requests while it is stopping
                raise OverloadedError("The engine is not accepting requests right now.", retry_after_s=2.0)
            seen = 0
            while True:
                out = await outputs.get()
                while True:  # every output carries all ids so far: when several piled up, the last one will do
                    if out.error is not None or int(out.status) == 4:  # RequestStatus.FAILED
                        raise EngineDeadError(f"The engine failed this request: {out.error or 'unknown error'}")
                    if outputs.empty() or out.is_finished():
                        break
                    out = outputs.get_nowait()
                new_ids = list(out.generated_tokens[seen:])
                if not new_ids and not out.is_finished():
                    continue
                seen += len(new_ids)
                delta = output.from_ids(
                    new_ids,
                    completion_tokens=seen,
                    engine_finished=out.is_finished(),
                    length_reached=seen >= s.max_tokens,
                )
                if kv_index is not None:
                    # Blocks of generated tokens are hashed too: name them as they fill (those of a prompt that
                    # continues this conversation token for token are then found).
                    kv_index.extend(rid, new_ids)
                    delta.cached_tokens = self._matched.get(rid, 0)
                if delta.finished:
                    finished = out.is_finished()  # a stop string ends us before the manager does
                yield delta
                if delta.finished:
                    return
        finally:
            self._release(rid, finished)

    def _release(self, rid: str, finished: bool) -> None:
        """Frees everything a request holds, however it ended (finished, stopped early, cancelled, failed)."""
        self._live.discard(rid)
        self._matched.pop(rid, None)
        if self._kv_index is not None:
            self._kv_index.forget(rid)
        manager = self._manager
        if manager is None:
            return
        if not finished:
            manager.cancel_request(rid)
        # The cancel path never unregisters the handler (see module docstring); the finish path already did.
        with manager.output_router._lock:
            manager.output_router.result_handlers.pop(rid, None)


__all__ = ["FINISH_ABORT", "HFEngine"]


class _KvBlockIndex:
    """transformers' prefix-cache blocks under the names the router gives them (``engines.kv_blocks``).

    The hashed blocks of the ledgers (``BlockLedger.hash_to_block``: those running requests hold and the
    ``cached_blocks`` kept after them) are the ones a new prompt can take; a block counts where every allocator has
    it. transformers hashes a block with blake2b chained from its parent (``compute_block_hash``), which the router
    cannot recompute from a prompt without transformers, so this index hashes each request's tokens both ways as
    they come (:meth:`track`, :meth:`extend`) and translates. A block whose tokens it has not seen yet (a generated
    block before its output has arrived) is reported by a later :meth:`drain`.

    Only :meth:`drain` and :meth:`blocks_held` read the ledgers, which the batch loop's thread changes: ``set(d)`` of
    a dict of ints is one step under the interpreter lock, so each read is a consistent snapshot. Everything else
    runs on the engine's event loop.
    """

    def __init__(self, ledgers: list[Any], block_tokens: int, engine_hash: Any) -> None:
        self.block_tokens = block_tokens
        self._ledgers = ledgers
        self._engine_hash = engine_hash  # transformers' compute_block_hash(parent | None, tokens) -> int
        self._chains: dict[str, _Chain] = {}  # live requests
        self._retired: list[_Chain] = []  # requests ended since the last drain (their last blocks may come late)
        self._names: dict[int, int] = {}  # transformers' hash -> ours, for the blocks of live and retired requests
        self._reported: dict[int, int] = {}  # transformers' hash -> ours: the blocks readers were told are stored
        self._events = KvEvents(cleared=True)  # a new cache: readers start from empty

    def track(self, rid: str, prompt: list[int]) -> None:
        chain = _Chain()
        self._chains[rid] = chain
        self._extend(chain, prompt)

    def extend(self, rid: str, token_ids: list[int]) -> None:
        chain = self._chains.get(rid)
        if chain is not None and token_ids:
            self._extend(chain, token_ids)

    def forget(self, rid: str) -> None:
        chain = self._chains.pop(rid, None)
        if chain is not None:
            self._retired.append(chain)

    def _extend(self, chain: _Chain, token_ids: list[int]) -> None:
        block = self.block_tokens
        tail = chain.tail
        tail.extend(token_ids)
        if len(tail) < block:
            return
        names, engine_hash = self._names, self._engine_hash
        start = 0
        while start + block <= len(tail):
            tokens = tail[start : start + block]
            chain.engine_parent = engine_hash(chain.engine_parent, tokens)
            chain.our_parent = chain_hash(chain.our_parent, tokens)
            names[chain.engine_parent] = chain.our_parent
            chain.hashes.append(chain.engine_parent)
            start += block
        del tail[:start]

    def _snapshot(self) -> set[int]:
        ledgers = self._ledgers
        held = set(ledgers[0].hash_to_block)
        for ledger in ledgers[1:]:
            held &= set(ledger.hash_to_block)
        return held

    def blocks_held(self) -> int:
        """Blocks a new prompt could take now (running requests' and the cached ones)."""
        return len(self._snapshot())

    def drain(self) -> KvEvents:
        held = self._snapshot()
        events, reported, names = self._events, self._reported, self._names
        for engine_hash in [h for h in reported if h not in held]:
            events.remove(reported.pop(engine_hash))
        for engine_hash in held:
            if engine_hash not in reported:
                name = names.get(engine_hash)
                if name is not None:
                    reported[engine_hash] = name
                    events.store(name)
        # Keep the names still needed: those of reported blocks, of live requests, and (until this drain) of ended ones
        keep = set(reported)
        for chain in itertools.chain(self._chains.values(), self._retired):
            keep.update(chain.hashes)
        self._names = {h: n for h, n in names.items() if h in keep}
        self._retired = []
        self._events = KvEvents()
        return events


class _Chain:
    """One request's tokens, hashed block by block both ways."""

    __slots__ = ("engine_parent", "hashes", "our_parent", "tail")

    def __init__(self) -> None:
        self.engine_parent: int | None = None  # transformers' first block has no parent
        self.our_parent = ROOT_HASH
        self.hashes: list[int] = []  # transformers' hashes of its whole blocks
        self.tail: list[int] = []  # tokens of its partial last block


def _held_fraction(cache: Any) -> float:
    """The share of the KV cache that running requests hold.

    transformers keeps a finished request's complete blocks as a prefix cache (``BlockLedger.cached_blocks``) and
    ``compute_free_capacity`` counts them as used, though they are evicted as soon as a request needs the room: counted
    as used, a replica's cache read as filling with every request it had finished, and the autoscaler's ``kv`` signal
    kept replicas the load no longer needed (tests/serve_app/test_autoscaling.py).
    """
    free = float(cache.compute_free_capacity(relative=True))
    total_bytes = cache.num_sectors * cache.bytes_per_sector
    if total_bytes:
        for allocator in getattr(cache, "cache_allocators", {}).values():
            ledger = getattr(allocator, "ledger", None)
            if ledger is not None:
                free += len(ledger.cached_blocks) * allocator.bytes_per_block / total_bytes
    return min(1.0, max(0.0, 1.0 - free))
