"""The engine in-process, driven like a server: a closed loop of requests, measured into the same records.

This is path (a) of ``python -m bench overhead``: no HTTP, no Ray, no SSE, only :meth:`Engine.generate`.
The loop and the records mirror :mod:`bench.loadgen` (``concurrency`` workers, each sending its next
request when the previous one ends) so that :func:`traffic.summary.summarize` scores every path alike.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable

from bench.client import Clock, MonotonicClock
from bench.loadgen import LoadResult
from core.errors import ServingError
from engines.protocol import Engine, GenerationRequest, SamplingParams
from traffic.records import RequestRecord, slo_met, time_per_output_token
from traffic.workload import RequestSpec


def sampling_for(spec: RequestSpec, base: SamplingParams) -> SamplingParams:
    """``base`` with the spec's output length, always to the end (the HTTP paths send ignore_eos)."""
    return SamplingParams(
        max_tokens=spec.max_tokens,
        temperature=base.temperature,
        top_p=base.top_p,
        top_k=base.top_k,
        seed=base.seed,
        ignore_eos=True,
    )


async def measure_request(
    engine: Engine,
    spec: RequestSpec,
    sampling: SamplingParams,
    *,
    request_id: str,
    clock: Clock,
    run_start: float,
    wall_start: float,
) -> RequestRecord:
    """One generation, timed like :func:`bench.client.send_request` times one HTTP stream."""
    if not isinstance(spec.prompt, list):
        raise TypeError("the engine takes token ids: build the specs with as_text=False")
    start = clock.now()
    record = RequestRecord(
        request_id=request_id,
        index=spec.index,
        start_time=wall_start + (start - run_start),
        start_s=start - run_start,
        arrival_s=None,
        prompt_tokens=spec.prompt_tokens,
        max_tokens=spec.max_tokens,
    )
    chunk_times: list[float] = []
    tokens = 0
    try:
        async for delta in engine.generate(GenerationRequest(request_id, list(spec.prompt), sampling)):
            tokens += len(delta.token_ids)
            # Timed as bench.client times an SSE stream: when text arrives. A token that is only part of a
            # character shows a client nothing until the next completes it, whatever path it takes, so the
            # engine alone is held to the same first token and the same gaps as the stack it is compared with.
            if delta.text:
                chunk_times.append(clock.now())
    except ServingError as exc:  # the engine's own refusals and failures; anything else is a bug: raise it
        record.error_type, record.error_message = type(exc).__name__, exc.message
    end = clock.now()
    record.e2e_s = end - start
    record.chunks = len(chunk_times)
    record.output_tokens = tokens
    if chunk_times:
        record.ttft_s = chunk_times[0] - start
        record.itl_s = [b - a for a, b in itertools.pairwise(chunk_times)]
    if record.ok:
        record.tpot_s = time_per_output_token(record.e2e_s, record.ttft_s, record.output_tokens)
    record.slo_met = slo_met(record)
    return record


async def run_direct(
    engine: Engine,
    specs: Iterable[RequestSpec],
    concurrency: int,
    sampling: SamplingParams,
    *,
    clock: Clock | None = None,
    run_id: str = "direct",
) -> LoadResult:
    """Every spec through ``engine`` with ``concurrency`` requests in flight; one record per request."""
    clock = clock or MonotonicClock()
    pending = iter(specs)
    records: list[RequestRecord] = []
    run_start, wall_start = clock.now(), time.time()

    async def worker() -> None:
        for spec in pending:  # one iterator shared by all workers: each spec is taken once
            records.append(
                await measure_request(
                    engine,
                    spec,
                    sampling_for(spec, sampling),
                    request_id=f"{run_id}-{spec.index}",
                    clock=clock,
                    run_start=run_start,
                    wall_start=wall_start,
                )
            )

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return LoadResult(records=records, wall_start=wall_start, duration_s=max((r.end_s for r in records), default=0.0))
