"""A short calibration of each variant through the live app: its latency figures and its capacity.

Requests are pinned to one variant (the request's ``model`` names it) and go the whole serving path, so
the figures include what a client sees (proxy, ingress, engine). Per variant, three small probes:

* a few short prompts one at a time: the base TTFT and the TPOT of a batch of one;
* a few long prompts one at a time: the prefill cost per prompt token (from the TTFT difference);
* a burst of concurrent short prompts: how TPOT grows with the batch, and the short-request throughput;
* a few long prompts left decoding while a second such burst runs: what their context costs every step;
* long prompts arriving while a third one runs: what their prefill costs the steps it shares.

The fit (:func:`fit_profile`) is pure: it turns the probes' records into a
:class:`~router.config.LatencyProfile`, the figures that seed the router's latency model, and a capacity
in requests per second. The bench uses the first to seed the router and the second to place its rates.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
from pydantic import BaseModel, Field

from bench.client import MonotonicClock, TargetConfig, send_request
from router.config import LatencyProfile
from traffic.records import RequestRecord
from traffic.workload import RequestSpec, Slo, make_prompt


class ProbePlan(BaseModel):
    """What one variant's calibration sends."""

    short_tokens: int = Field(64, ge=1, description="Prompt length of the short probes.")
    long_tokens: int = Field(ge=2, description="Prompt length of the long probes (must fit the context).")
    output_tokens: int = Field(32, ge=2, description="max_tokens of every probe.")
    sequential: int = Field(2, ge=1, description="Short probes sent one at a time (and as many long ones).")
    burst: int = Field(8, ge=2, description="Short probes sent at once.")
    long_burst: int = Field(3, ge=0, description="Long probes sent at once, for their throughput (0: none).")
    context_probes: int = Field(
        0,
        ge=0,
        description="Long probes left decoding while a second short burst runs, for what their context costs "
        "the short ones' decode steps (the latency model's tpot_ms_per_context_token; 0: not probed).",
    )
    context_output_tokens: int = Field(
        128, ge=2, description="max_tokens of those long probes: enough to keep them decoding through the burst."
    )
    prefill_probes: int = Field(
        0,
        ge=0,
        description="Long probes sent one after another while a third short burst decodes, for what their "
        "prefill costs the steps it shares (the latency model's decode_ms_per_prefill_token; 0: not probed).",
    )
    replicas: int = Field(1, ge=1, description="Ready replicas of the variant, over which the probes spread.")


class VariantCalibration(BaseModel):
    """What the probes of one variant measured, and the figures fitted to them."""

    variant: str
    profile: LatencyProfile = Field(description="Seed figures for the router's latency model.")
    short_per_s: float = Field(description="Short requests per second finished by the concurrent burst.")
    long_s: float = Field(description="Mean end-to-end seconds of one long probe on an idle variant.")
    long_per_s: float | None = Field(
        description="Long requests per second finished by the concurrent long burst: long prefills queue "
        "behind each other, so this is below what one long probe alone suggests."
    )
    ttft_short_ms: float
    ttft_long_ms: float
    tpot_batch_1_ms: float
    tpot_burst_ms: float
    tpot_context_ms: float | None = Field(
        None, description="TPOT of the second burst, beside the long probes decoding (None: not probed)."
    )
    tpot_prefill_ms: float | None = Field(
        None, description="TPOT of the third burst, with long probes arriving (None: not probed)."
    )


@dataclass(frozen=True)
class BesideLong:
    """A short burst that ran beside long prompts: decoding (their context) or arriving (their prefill)."""

    records: Sequence[RequestRecord]
    context_tokens: float = 0.0  # KV tokens per replica the long prompts held meanwhile
    sequences: float = 0.0  # long prompts decoding per replica meanwhile
    prefill_tokens_per_ms: float = 0.0  # prompt tokens per ms per replica arriving meanwhile

    def steady_tpot_ms(self) -> float | None:
        """The burst's median TPOT over the second half of its streams (None: every probe failed)."""
        tpots = [t for t in (_steady_tpot_ms(r) for r in self.records if r.ok) if t is not None]
        return statistics.median(tpots) if tpots else None


def _present(values: Sequence[float | None]) -> list[float]:
    present = [v for v in values if v is not None]
    if not present:
        raise ValueError("no successful probe measured this figure")
    return present


def fit_profile(
    variant: str,
    short: Sequence[RequestRecord],
    long: Sequence[RequestRecord],
    burst: Sequence[RequestRecord],
    long_burst: Sequence[RequestRecord],
    *,
    burst_wall_s: float,
    long_burst_wall_s: float,
    mean_output_tokens: float,
    context: BesideLong | None = None,
    prefill: BesideLong | None = None,
) -> VariantCalibration:
    """Fits the figures of one variant from its probes (failed probes are left out; none left raises).

    TTFT = base + prompt tokens x ms per token: two prompt lengths give both. TPOT grows linearly with the
    batch: one at a time and the burst give both ends. ``mean_output_tokens`` is the workload's, not a
    measurement: it is how long a request that waits for a batch slot waits per running request.

    ``context`` is the second burst, run beside long probes decoding: what it took longer per token than the
    first burst, beyond its larger batch, is the cost of their context (0 when it took no longer, or every
    probe failed). ``prefill`` is the third, with long probes arriving: a step that shares ``r`` prompt
    tokens per ms lasts ``d / (1 - c r)``, so ``c = (1 - d / measured) / r``, never below the prefill cost
    alone (which it is without the probe).
    """
    for name, probes in (("short", short), ("long", long), ("burst", burst)):
        if not any(r.ok for r in probes):
            raise ValueError(f"{variant}: every {name} probe failed ({_errors(probes)})")
    short_ok = [r for r in short if r.ok]
    long_ok = [r for r in long if r.ok]
    burst_ok = [r for r in burst if r.ok]
    # The fastest of the one-at-a-time probes: on a shared machine other work only ever slows a probe down,
    # so the fastest is the least disturbed. The router's models learn the slower reality online.
    ttft_short = 1e3 * min(_present([r.ttft_s for r in short_ok]))
    ttft_long = 1e3 * min(_present([r.ttft_s for r in long_ok]))
    n_short = statistics.median(r.prompt_tokens for r in short_ok)
    n_long = statistics.median(r.prompt_tokens for r in long_ok)
    # A noisy machine can make the long prompt look no slower; keep the rate finite and positive.
    ms_per_token = max((ttft_long - ttft_short) / max(n_long - n_short, 1.0), 1e-3)
    base = max(ttft_short - n_short * ms_per_token, 0.0)
    tpot_1 = 1e3 * min(_present([r.tpot_s for r in short_ok]))
    tpot_burst = statistics.median(_present([_steady_tpot_ms(r) for r in burst_ok]))
    per_extra = max(tpot_burst - tpot_1, 0.0) / (len(burst) - 1)
    tpot_context = context.steady_tpot_ms() if context is not None else None
    per_context_token = 0.0
    if context is not None and tpot_context is not None and context.context_tokens > 0:
        slower = tpot_context - tpot_burst - per_extra * context.sequences
        per_context_token = max(slower, 0.0) / context.context_tokens
    tpot_prefill = prefill.steady_tpot_ms() if prefill is not None else None
    decode_ms_per_prefill_token = ms_per_token
    if prefill is not None and tpot_prefill is not None and prefill.prefill_tokens_per_ms > 0:
        share = min(max(1.0 - tpot_burst / tpot_prefill, 0.0), 0.95)
        decode_ms_per_prefill_token = max(ms_per_token, share / prefill.prefill_tokens_per_ms)
    return VariantCalibration(
        variant=variant,
        profile=LatencyProfile(
            prefill_tokens_per_s=1e3 / ms_per_token,
            base_ttft_ms=base,
            tpot_ms_at_batch_1=tpot_1,
            tpot_ms_per_extra_seq=per_extra,
            tpot_ms_per_context_token=per_context_token,
            decode_ms_per_prefill_token=decode_ms_per_prefill_token,
            mean_output_tokens=mean_output_tokens,
        ),
        short_per_s=len(burst_ok) / burst_wall_s if burst_wall_s > 0 else 0.0,
        long_s=statistics.mean(r.e2e_s or 0.0 for r in long_ok),
        long_per_s=sum(r.ok for r in long_burst) / long_burst_wall_s if long_burst and long_burst_wall_s > 0 else None,
        ttft_short_ms=ttft_short,
        ttft_long_ms=ttft_long,
        tpot_batch_1_ms=tpot_1,
        tpot_burst_ms=tpot_burst,
        tpot_context_ms=tpot_context,
        tpot_prefill_ms=tpot_prefill,
    )


def _steady_tpot_ms(record: RequestRecord) -> float | None:
    """The time per token over the second half of a stream: the decode of the whole burst's batch, without
    the ramp while the other probes join it and prefill (which, over 32 tokens, made the transformers engine on
    an H200 look several times slower per extra sequence than it ran under load). The request's TPOT when
    its stream has too few chunks to split."""
    gaps = record.itl_s
    if len(gaps) < 4 or record.chunks < 2 or record.output_tokens < 2:
        return None if record.tpot_s is None else 1e3 * record.tpot_s
    tail = gaps[len(gaps) // 2 :]
    tokens_per_chunk = record.output_tokens / record.chunks  # chunks may carry several tokens when coalesced
    return 1e3 * sum(tail) / (len(tail) * tokens_per_chunk)


def _errors(records: Sequence[RequestRecord]) -> str:
    return "; ".join(f"{r.status} {r.error_type}: {r.error_message}" for r in records[:3])


def mix_capacity(short_per_s: float, long_per_s: float, short_share: float) -> float:
    """Requests per second of a short/long mix at which the busier of two variants is saturated.

    Short requests go to one variant and long ones to the other (the natural split); the mix saturates the
    first variant to reach its capacity. It is an estimate: on a small machine the variants share cores.
    """
    if not 0 < short_share < 1:
        raise ValueError("short_share must be in (0, 1)")
    return min(short_per_s / short_share, long_per_s / (1.0 - short_share))


def probe_specs(
    plan: ProbePlan, count: int, tokens: int, seed: str, max_tokens: int | None = None
) -> list[RequestSpec]:
    rng = random.Random(seed)
    return [
        RequestSpec(
            index=i,
            send_at=None,
            prompt=make_prompt(tokens, "token_ids", (256, 500), rng),
            prompt_tokens=tokens,
            max_tokens=plan.output_tokens if max_tokens is None else max_tokens,
            slo=Slo(),
        )
        for i in range(count)
    ]


async def calibrate_variant(
    client: httpx.AsyncClient,
    url: str,
    variant: str,
    plan: ProbePlan,
    *,
    mean_output_tokens: float,
    request_timeout_s: float = 60.0,
) -> VariantCalibration:
    """Probes ``variant`` (pinned by name) through the app at ``url`` and fits its figures."""
    target = TargetConfig(url=url, model=variant, request_timeout_s=request_timeout_s)
    clock = MonotonicClock()
    run_start, wall_start = clock.now(), time.time()
    run_id = uuid.uuid4().hex[:8]

    async def send(spec: RequestSpec, tag: str) -> RequestRecord:
        return await send_request(
            client,
            target,
            spec,
            request_id=f"calib-{run_id}-{variant}-{tag}-{spec.index}",
            clock=clock,
            start=clock.now(),
            run_start=run_start,
            wall_start=wall_start,
        )

    # One unmeasured request first: the first one through a fresh path pays for setting it up.
    await send(probe_specs(plan, 1, plan.short_tokens, f"{variant}:warm")[0], "warm")
    short = [await send(s, "short") for s in probe_specs(plan, plan.sequential, plan.short_tokens, "short")]
    long = [await send(s, "long") for s in probe_specs(plan, plan.sequential, plan.long_tokens, "long")]
    burst_start = clock.now()
    burst = await asyncio.gather(*(send(s, "burst") for s in probe_specs(plan, plan.burst, plan.short_tokens, "burst")))
    burst_wall_s = clock.now() - burst_start
    long_start = clock.now()
    long_specs = probe_specs(plan, plan.long_burst, plan.long_tokens, "long-burst")
    long_burst = await asyncio.gather(*(send(s, "long-burst") for s in long_specs))
    long_burst_wall_s = clock.now() - long_start
    context = None
    if plan.context_probes:
        decoding_specs = probe_specs(
            plan, plan.context_probes, plan.long_tokens, "context-long", max_tokens=plan.context_output_tokens
        )
        decoding = [asyncio.create_task(send(s, "context-long")) for s in decoding_specs]
        # Let their prefill finish first (each as slow as the slowest lone long probe, in turn, with room to
        # spare): the burst must measure their context decoding, not their prefill sharing its steps.
        prefill_s = max((r.ttft_s or 0.0 for r in long if r.ok), default=1.0)
        await asyncio.sleep(1.5 * plan.context_probes * prefill_s)
        context_specs = probe_specs(plan, plan.burst, plan.short_tokens, "context")
        beside = await asyncio.gather(*(send(s, "context") for s in context_specs))
        await asyncio.gather(*decoding)
        context = BesideLong(
            beside,
            # Per replica, while the burst ran: the long probes' prompts and about half their answers.
            context_tokens=plan.context_probes * (plan.long_tokens + plan.context_output_tokens / 2) / plan.replicas,
            sequences=plan.context_probes / plan.replicas,
        )
    prefill = None
    if plan.prefill_probes:
        # Long prompts (of two tokens' answer, so that little but their prefill remains) sent evenly over the
        # last 80% of a burst as long as the first one was, when the burst's steady half is timed.
        mixed_specs = probe_specs(plan, plan.burst, plan.short_tokens, "mixed")
        mixed = [asyncio.create_task(send(s, "mixed")) for s in mixed_specs]
        arriving: list[asyncio.Task[RequestRecord]] = []
        gap_s = 0.8 * burst_wall_s / plan.prefill_probes
        await asyncio.sleep(0.2 * burst_wall_s)
        for spec in probe_specs(plan, plan.prefill_probes, plan.long_tokens, "mixed-long", max_tokens=2):
            arriving.append(asyncio.create_task(send(spec, "mixed-long")))
            await asyncio.sleep(gap_s)
        beside = await asyncio.gather(*mixed)
        await asyncio.gather(*arriving)
        tokens = plan.prefill_probes * plan.long_tokens / plan.replicas
        prefill = BesideLong(beside, prefill_tokens_per_ms=tokens / (1e3 * 0.8 * burst_wall_s))
    return fit_profile(
        variant,
        short,
        long,
        burst,
        long_burst,
        burst_wall_s=burst_wall_s,
        long_burst_wall_s=long_burst_wall_s,
        mean_output_tokens=mean_output_tokens,
        context=context,
        prefill=prefill,
    )
