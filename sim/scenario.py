"""A scenario: variant pools on a GPU budget, traffic, and the router policies and scaling modes to compare.

Each (policy, scaling) pair is one simulated run of the same traffic. Scaling modes:

* ``static``: every pool fully provisioned for the whole run (no autoscaler): the GPU-hours ceiling;
* ``ongoing_requests``: Serve's default autoscaler (ongoing requests per replica vs a target);
* ``engine_load``: the project's own policy (``router.autoscaling`` via ``router.serve_autoscaling``).

:func:`builtin_scenario` is the reference cluster: 64 H200s split between an INT4 8B pool (one GPU a
replica) and an FP8 70B tensor-parallel-4 pool, an hour of chat, RAG and batch traffic whose rate
jumps five-fold for ten minutes. :func:`heterogeneous_scenario` is a smaller fleet whose variants differ
in what they can hold (an 8k-context 8B next to a 32k-context 70B), the case capacity reservation is for.
:func:`tiers_scenario` and :func:`two_variant_scenario` are fleets whose variants differ in decode speed; the
latter is the routing bench's two-class mix at GPU scale.
"""

from __future__ import annotations

import dataclasses
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engines.presets import PRESETS
from engines.profile import EngineProfile
from router import RouterConfig
from router.config import SETUPS, ReplicaChoice, Setup
from router.serve_autoscaling import AutoscalingSpec
from sim.seed import router_seed
from sim.simulator import SimResult, Simulation, SimVariant
from sim.workload import Stream, sim_requests
from traffic.arrivals import PoissonArrivals, SpikeArrivals
from traffic.prefix import Conversations, MooncakeRows, SharedPrefix
from traffic.summary import Summary, summarize
from traffic.workload import NormalLength, SloTier, WorkloadConfig

Scaling = Literal["static", "ongoing_requests", "engine_load"]
ALL_POLICIES: tuple[Setup, ...] = ("slo", "round_robin", "least_loaded", "length_threshold", "largest")
ALL_SCALING: tuple[Scaling, ...] = ("static", "ongoing_requests", "engine_load")
# Without and with the project's autoscaler; Serve's default one is a flag away (--scaling).
DEFAULT_SCALING: tuple[Scaling, ...] = ("static", "engine_load")


class PoolSpec(BaseModel):
    """One variant and the GPUs set aside for it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    profile: str | EngineProfile = Field(description="A name in engines.presets.PRESETS, or a profile.")
    gpus: int = Field(ge=1, description="GPUs of the pool: its replicas when fully provisioned x GPUs each.")
    quality: float = Field(1.0, gt=0, le=1)
    cost_per_1k_tokens: float = Field(0.0, ge=0)
    max_ongoing_requests: int = Field(64, ge=1)
    autoscaling: AutoscalingSpec = Field(
        default_factory=AutoscalingSpec,
        description="Bounds, delays and targets when autoscaled; max_replicas is capped at the pool's size.",
    )
    mean_output_tokens: float = Field(
        256.0, ge=1, description="Seeds the router's latency model, as a measured profile would."
    )

    def engine_profile(self) -> EngineProfile:
        return PRESETS[self.profile] if isinstance(self.profile, str) else self.profile

    @property
    def pool_replicas(self) -> int:
        return self.gpus // self.engine_profile().gpus_per_replica

    def sim_variant(self, scaling: Scaling) -> SimVariant:
        profile = self.engine_profile()
        base = SimVariant(
            name=self.name,
            profile=profile,
            quality=self.quality,
            cost_per_1k_tokens=self.cost_per_1k_tokens,
            max_ongoing_requests=self.max_ongoing_requests,
            num_replicas=self.pool_replicas,
            latency_profile=router_seed(profile, self.mean_output_tokens),
        )
        if scaling == "static":
            return base
        spec = self.autoscaling.model_copy(
            update={"policy": scaling, "max_replicas": min(self.autoscaling.max_replicas, self.pool_replicas)}
        )
        initial = spec.initial_replicas if spec.initial_replicas is not None else spec.min_replicas
        return dataclasses.replace(base, num_replicas=initial, autoscaling=spec)


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    duration_s: float = Field(gt=0, description="Requests are sent for this long; the run ends when all finish.")
    pools: list[PoolSpec] = Field(min_length=1)
    streams: list[Stream] = Field(min_length=1)
    router: RouterConfig = Field(default_factory=RouterConfig)
    policies: list[Setup] = Field(
        default_factory=lambda: list(ALL_POLICIES),
        description="The router setups to run (router.config.SETUPS: a policy, or slo_blind).",
    )
    scaling: list[Scaling] = Field(default_factory=lambda: list(DEFAULT_SCALING))
    seed: int = 0
    replica_choice: ReplicaChoice = Field(
        "power_of_two",
        description="How a request finds its replica within the chosen variant: Serve's default power of two "
        "choices by ongoing requests, or 'least_prefill' (the least prompt work queued; serve_app/replica_router.py).",
    )

    prefix_view: Literal["reported", "oracle"] = Field(
        "reported",
        description="What the router knows of the replicas' prefix caches: what they reported (as the serve app "
        "knows it) or, 'oracle', every cache as it is at each decision (the yardstick for the index).",
    )
    ingress_replicas: int = Field(
        1,
        ge=1,
        description="Ingress replicas the requests are spread over; with 'least_prefill' each one's handle picks "
        "replicas from what it sent itself, as the serve app's request router does.",
    )

    @model_validator(mode="after")
    def _pools_fit(self) -> Scenario:
        for pool in self.pools:
            if pool.pool_replicas < 1:
                raise ValueError(f"pool {pool.name!r}: {pool.gpus} GPUs hold no replica")
        return self

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pools)


class RunResult(BaseModel):
    policy: Setup
    scaling: Scaling
    gpu_hours: float
    gpu_hours_by_variant: dict[str, float]
    mean_quality: float = Field(
        description="Mean quality of the variants that served the successful requests: what the SLO "
        "policy's 'quality' objective buys, which attainment alone does not show."
    )
    peak_replicas: dict[str, int]
    wall_s: float = Field(description="Seconds this run took to simulate.")
    cpu_s: float = Field(description="CPU seconds of the process simulating it (wall_s less contention).")
    summary: Summary


def simulate(scenario: Scenario, policy: Setup, scaling: Scaling) -> tuple[SimResult, RunResult]:
    """One run of the scenario's traffic under the router setup ``policy`` and ``scaling``."""
    started, cpu_started = time.perf_counter(), time.process_time()
    router = scenario.router.model_copy(update=SETUPS[policy])
    sim = Simulation(
        [p.sim_variant(scaling) for p in scenario.pools],
        router,
        seed=scenario.seed,
        replica_choice=scenario.replica_choice,
        ingress_replicas=scenario.ingress_replicas,
        prefix_view=scenario.prefix_view,
    )
    result = sim.run(sim_requests(scenario.streams, scenario.duration_s, router), horizon_s=scenario.duration_s)
    peaks: dict[str, int] = {}
    for sample in result.replica_samples:
        peaks[sample.variant] = max(peaks.get(sample.variant, 0), sample.replicas)
    summary = summarize(result.records)
    quality = {p.name: p.quality for p in scenario.pools}
    served = [(quality[name], g.succeeded) for name, g in summary.by_variant.items()]
    total = sum(n for _, n in served)
    run = RunResult(
        policy=policy,
        scaling=scaling,
        gpu_hours=result.gpu_hours,
        gpu_hours_by_variant={name: s / 3600.0 for name, s in result.gpu_seconds.items()},
        peak_replicas=peaks,
        mean_quality=sum(q * n for q, n in served) / total if total else 0.0,
        wall_s=time.perf_counter() - started,
        cpu_s=time.process_time() - cpu_started,
        summary=summary,
    )
    return result, run


def _run_one(scenario: Scenario, policy: Setup, scaling: Scaling, out: Path | None) -> RunResult:
    result, run = simulate(scenario, policy, scaling)
    if out is not None:
        from sim.output import write_run  # matplotlib: only when plots are asked for

        write_run(out / f"{policy}-{scaling}", result, command=f"python -m sim ({scenario.name})")
    return run


def run_matrix(scenario: Scenario, *, workers: int | None = None, out: Path | None = None) -> list[RunResult]:
    """Every (policy, scaling) run of the scenario, in parallel processes; in the scenario's order."""
    pairs = [(p, s) for s in scenario.scaling for p in scenario.policies]
    workers = workers or min(len(pairs), os.cpu_count() or 1)
    if workers <= 1:
        return [_run_one(scenario, p, s, out) for p, s in pairs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_run_one, scenario, p, s, out) for p, s in pairs]
        return [f.result() for f in futures]


def table(runs: list[RunResult]) -> str:
    """A markdown table of the runs: SLO attainment, goodput and GPU-hours first."""
    lines = [
        "| policy | scaling | requests | failed | SLO attainment | goodput (req/s) | GPU-hours | "
        "mean quality | TTFT p50 / p99 (ms) | TPOT p50 (ms) | peak replicas |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        s = r.summary
        peaks = ", ".join(f"{name} {n}" for name, n in sorted(r.peak_replicas.items()))
        lines.append(
            f"| {r.policy} | {r.scaling} | {s.requests} | {s.failed} | {s.slo_attainment:.1%} | "
            f"{s.goodput:.2f} | {r.gpu_hours:.1f} | {r.mean_quality:.2f} | "
            f"{s.ttft_ms.p50 or 0:.0f} / {s.ttft_ms.p99 or 0:.0f} | "
            f"{s.tpot_ms.p50 or 0:.1f} | {peaks} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- the built-in one

SPIKE_START_S = 1800.0
SPIKE_DURATION_S = 600.0
SPIKE_FACTOR = 5.0


def _stream(name: str, rate: float, seed: int, workload: WorkloadConfig) -> Stream:
    arrivals = SpikeArrivals(
        base_rate=rate, spike_rate=rate * SPIKE_FACTOR, start_s=SPIKE_START_S, duration_s=SPIKE_DURATION_S
    )
    return Stream(name=name, arrivals=arrivals, workload=workload.model_copy(update={"seed": seed}))


def builtin_scenario(duration_s: float = 3600.0, rate_scale: float = 1.0) -> Scenario:
    """64 H200s: 32 for INT4 8B replicas (1 GPU), 32 for FP8 70B TP4 replicas (8 of 4 GPUs); an hour of
    chat (interactive), RAG (standard) and batch (sheddable) traffic, 5x for ten minutes at half time.

    Tier targets match the router's default tiers, so the run is scored against what the router aims at.
    """
    router = RouterConfig()
    tiers = list(_scored_tiers(router).values())

    def only(name: str) -> list[SloTier]:
        return [t for t in tiers if t.name == name]

    chat = WorkloadConfig(
        input_len=NormalLength(mean=800, std=400, low=32, high=4000),
        output_len=NormalLength(mean=250, std=100, low=16, high=1000),
        tiers=[t.model_copy(update={"weight": 3.0 if t.name == "interactive" else 1.0}) for t in tiers[:2]],
    )
    rag = _rag(NormalLength(mean=4000, std=1500, low=500, high=16000), only("standard"))
    batch = WorkloadConfig(
        input_len=NormalLength(mean=2000, std=1000, low=100, high=8000),
        output_len=NormalLength(mean=800, std=300, low=64, high=2000),
        tiers=only("batch"),
    )
    pools = [
        _pool(
            "llama-8b-int4",
            32,
            autoscaling=AutoscalingSpec(
                min_replicas=4, max_replicas=32, target_ongoing_requests=48, upscale_delay_s=30, downscale_delay_s=300
            ),
        ),
        _pool(
            "llama-70b-fp8",
            32,
            autoscaling=AutoscalingSpec(
                min_replicas=2, max_replicas=8, target_ongoing_requests=32, upscale_delay_s=60, downscale_delay_s=300
            ),
        ),
    ]
    return Scenario(
        name="builtin: 64x H200, 8B INT4 + 70B FP8 TP4, 1 h mixed traffic with a 5x spike",
        duration_s=duration_s,
        pools=pools,
        streams=[
            _stream("chat", 6.0 * rate_scale, 1, chat),
            _stream("rag", 4.0 * rate_scale, 2, rag),
            _stream("batch", 2.0 * rate_scale, 3, batch),
        ],
        router=router,
    )


def _scored_tiers(router: RouterConfig) -> dict[str, SloTier]:
    """The router's tiers as the bench scores them: a run is judged against what the router aims at."""
    return {
        name: SloTier(name=name, weight=1.0, ttft_ms=t.ttft_ms, tpot_ms=t.tpot_ms) for name, t in router.tiers.items()
    }


def _chat(tier: SloTier) -> WorkloadConfig:
    """Chat turns: ~600-token prompts, ~200-token answers."""
    return WorkloadConfig(
        input_len=NormalLength(mean=600, std=300, low=32, high=3000),
        output_len=NormalLength(mean=200, std=80, low=16, high=800),
        tiers=[tier],
    )


def _rag(prompt: NormalLength, tiers: list[SloTier]) -> WorkloadConfig:
    """Retrieval-augmented answers: ``prompt``-long contexts (each scenario's own), ~300-token answers."""
    return WorkloadConfig(input_len=prompt, output_len=NormalLength(mean=300, std=100, low=32, high=1000), tiers=tiers)


def _batch_jobs(tier: SloTier) -> WorkloadConfig:
    """Offline jobs: ~2000-token prompts, ~600-token answers."""
    return WorkloadConfig(
        input_len=NormalLength(mean=2000, std=1000, low=100, high=6000),
        output_len=NormalLength(mean=600, std=200, low=64, high=1500),
        tiers=[tier],
    )


def heterogeneous_scenario(duration_s: float = 600.0, rate_scale: float = 1.0) -> Scenario:
    """24 H200s: 8 one-GPU INT4 8B replicas built for 8k tokens, 4 FP8 70B TP4 replicas holding 32k; steady
    chat (interactive), long-document RAG (standard; ~10k-token prompts, most fit only the 70B) and batch
    jobs (no SLO) at 6 + 1 + 1 req/s times ``rate_scale``, with no spike.

    Some requests here have one variant to go to, so where the others go decides whether those meet
    their SLO: what ``router.reservation`` handles. Sweep ``rate_scale`` (1 to 9 spans idle to the 70B
    pool's limit) to see attainment and quality per policy as load grows.
    """
    router = RouterConfig()
    tiers = _scored_tiers(router)
    chat = _chat(tiers["interactive"])
    rag = _rag(NormalLength(mean=10000, std=4000, low=2000, high=28000), [tiers["standard"]])
    batch = _batch_jobs(tiers["batch"])
    pools = [_pool("llama-8b-int4", 8, name="llama-8b-int4-8k", profile=_SHORT_8B), _pool("llama-70b-fp8", 16)]

    return Scenario(
        name="heterogeneous: 24x H200, 8B INT4 (8k context) + 70B FP8 TP4 (32k), steady chat, long RAG, batch",
        duration_s=duration_s,
        pools=pools,
        streams=[
            _steady("chat", 6.0 * rate_scale, 1, chat),
            _steady("rag", 1.0 * rate_scale, 2, rag),
            _steady("batch", 1.0 * rate_scale, 3, batch),
        ],
        router=router,
        scaling=["static"],
    )


def tiers_scenario(duration_s: float = 300.0, rate_scale: float = 1.0) -> Scenario:
    """18 H200s: 2 one-GPU INT4 8B replicas (fast decode) and 8 BF16 70B TP2 replicas (better answers, a
    decode step ~8x longer); chat at two tiers (interactive and standard, the same lengths), RAG (standard,
    ~4k-token prompts) and batch jobs at 4 + 4 + 1 + 0.5 req/s times ``rate_scale``, steady, static pools.

    Here a request's tier does not follow from its length, and the large variant meets the interactive
    TPOT target only while lightly loaded: the case where a router must know both each request's SLO and
    each variant's speed. Sweep ``rate_scale`` (1 to 6 spans idle to past the fleet's capacity).
    """
    router = RouterConfig()
    tiers = _scored_tiers(router)
    chat_interactive, chat_standard = _chat(tiers["interactive"]), _chat(tiers["standard"])
    rag = _rag(NormalLength(mean=4000, std=1500, low=1500, high=12000), [tiers["standard"]])
    batch = _batch_jobs(tiers["batch"])
    pools = _fast_and_slow_pools(PRESETS["h200-llama-3.1-8b-int4"])
    return Scenario(
        name="tiers: 18x H200, 8B INT4 (fast decode) + 70B BF16 TP2 (slow decode), chat at two tiers, RAG, batch",
        duration_s=duration_s,
        pools=pools,
        streams=[
            _steady("chat-interactive", 4.0 * rate_scale, 1, chat_interactive),
            _steady("chat-standard", 4.0 * rate_scale, 2, chat_standard),
            _steady("rag", 1.0 * rate_scale, 3, rag),
            _steady("batch", 0.5 * rate_scale, 4, batch),
        ],
        router=router,
        scaling=["static"],
        replica_choice="least_prefill",
    )


TWO_VARIANT_BASE_RATE = 8.0  # req/s of the two_variant scenario at rate_scale 1
TWO_VARIANT_SHORT_SHARE = 0.75  # the routing bench's default --interactive-share


def two_variant_scenario(duration_s: float = 300.0, rate_scale: float = 1.0) -> Scenario:
    """18 H200s: 2 one-GPU INT4 8B replicas built for 8k tokens (fast decode) and 8 BF16 70B TP2 replicas
    holding 32k (better answers, a decode step ~8x longer); short interactive chat and long RAG (standard
    tier, ~4k-token prompts) at 3:1, ``TWO_VARIANT_BASE_RATE`` req/s times ``rate_scale``, steady, static.

    The routing bench's two-class mix (``traffic.mix.routing_mix``) at GPU scale, the case SLO routing is
    for: interactive short prompts with tight SLOs beside long prompts with loose ones. The fast variant cannot
    hold the longest prompts (some RAG prompts exceed 8k: only the 70B takes them), and the big one's decode is too
    slow for the interactive TPOT under load, so neither variant can take everything. ``python -m sim
    sweep`` places its rates at fractions of the natural split's capacity, as the bench's quick sweep does.
    """
    router = RouterConfig()
    tiers = _scored_tiers(router)
    # Chat turns kept under the length threshold (1024 tokens), as the bench's short class is: a static
    # length split then sends every short request to the 8B, which is what the capacity estimate assumes.
    short = _chat(tiers["interactive"]).model_copy(
        update={"input_len": NormalLength(mean=600, std=300, low=32, high=router.length_threshold_tokens)}
    )
    long = _rag(NormalLength(mean=4000, std=2000, low=1500, high=16000), [tiers["standard"]])
    pools = _fast_and_slow_pools(_SHORT_8B)
    rate = TWO_VARIANT_BASE_RATE * rate_scale
    return Scenario(
        name="two_variant: 18x H200, 8B INT4 (8k context, fast decode) + 70B BF16 TP2 (32k, slow decode), "
        "short interactive chat and long RAG",
        duration_s=duration_s,
        pools=pools,
        streams=[
            _steady("short", TWO_VARIANT_SHORT_SHARE * rate, 1, short),
            _steady("long", (1.0 - TWO_VARIANT_SHORT_SHARE) * rate, 2, long),
        ],
        router=router,
        scaling=["static"],
        replica_choice="least_prefill",
    )


# The setups the prefix scenarios compare: the slo policy with and without the caches, and the peers' prefix routers.
PREFIX_SETUPS: list[Setup] = ["slo", "slo_blind", "prefix_affinity", "weighted_prefix"]
SHARED_PREFIX_GROUPS = 150  # llm-d's precise prefix benchmark: 150 groups x 5 questions over ~6k-token prompts
SHARED_PREFIX_TOKENS = 4096


def shared_prefix_scenario(duration_s: float = 300.0, rate_scale: float = 1.0) -> Scenario:
    """The two_variant fleet and its short interactive chat, with the long requests sharing prefixes: each of
    ``SHARED_PREFIX_GROUPS`` groups (an agent's system prompt and tool schemas, a document many ask about) has a
    ``SHARED_PREFIX_TOKENS`` prompt, followed by a question of its own (~400 tokens), at the standard tier.

    The groups' prefixes together (600k tokens) outgrow a 70B replica's KV cache (686k, most of it reserved by
    running sequences), so a router that scatters a group over the replicas makes each prefill it again and again;
    one that keeps a group where it is cached prefills its ~400-token questions. Both variants can hold the
    grouped requests (the 8B's 8k context too), so the variant choice matters as much as the replica's.
    """
    router = RouterConfig()
    tiers = _scored_tiers(router)
    short = _chat(tiers["interactive"]).model_copy(
        update={"input_len": NormalLength(mean=600, std=300, low=32, high=router.length_threshold_tokens)}
    )
    grouped = _rag(NormalLength(mean=400, std=200, low=32, high=1500), [tiers["standard"]]).model_copy(
        update={"prefix": SharedPrefix(groups=SHARED_PREFIX_GROUPS, prefix_tokens=SHARED_PREFIX_TOKENS)}
    )
    name = (
        f"shared_prefix: the two_variant fleet; short interactive chat beside {SHARED_PREFIX_GROUPS} groups sharing "
        f"{SHARED_PREFIX_TOKENS}-token prompts"
    )
    return _on_two_variant_fleet(name, duration_s, rate_scale, router, ("short", short), ("grouped", grouped))


def _on_two_variant_fleet(
    name: str,
    duration_s: float,
    rate_scale: float,
    router: RouterConfig,
    interactive: tuple[str, WorkloadConfig],
    standard: tuple[str, WorkloadConfig],
) -> Scenario:
    """The two_variant fleet and its 3:1 split of ``TWO_VARIANT_BASE_RATE`` x ``rate_scale`` req/s between an
    interactive and a standard stream, for the setups that see the prefix caches and those that do not."""
    rate = TWO_VARIANT_BASE_RATE * rate_scale
    return Scenario(
        name=name,
        duration_s=duration_s,
        pools=_fast_and_slow_pools(_SHORT_8B),
        streams=[
            _steady(interactive[0], TWO_VARIANT_SHORT_SHARE * rate, 1, interactive[1]),
            _steady(standard[0], (1.0 - TWO_VARIANT_SHORT_SHARE) * rate, 2, standard[1]),
        ],
        router=router,
        policies=PREFIX_SETUPS,
        scaling=["static"],
        replica_choice="least_prefill",
    )


CONVERSATIONS = 400  # active at once: the think time between two turns of one is CONVERSATIONS / rate
CONVERSATION_TURNS = 6


def conversations_scenario(duration_s: float = 300.0, rate_scale: float = 1.0) -> Scenario:
    """The two_variant fleet serving multi-turn chat: ``CONVERSATIONS`` conversations at once, each of
    ``CONVERSATION_TURNS`` turns, every turn resending the whole history (earlier messages and answers, ~200
    tokens each) with a new message; interactive tier; beside it, long unique RAG prompts at the standard tier."""
    router = RouterConfig()
    tiers = _scored_tiers(router)
    chat = WorkloadConfig(
        input_len=NormalLength(mean=200, std=100, low=16, high=600),
        output_len=NormalLength(mean=200, std=80, low=16, high=500),
        tiers=[tiers["interactive"]],
        prefix=Conversations(conversations=CONVERSATIONS, turns=CONVERSATION_TURNS, pick="random"),
    )
    long = _rag(NormalLength(mean=4000, std=2000, low=1500, high=16000), [tiers["standard"]])
    name = f"conversations: the two_variant fleet; {CONVERSATIONS} chats of {CONVERSATION_TURNS} turns beside long RAG"
    return _on_two_variant_fleet(name, duration_s, rate_scale, router, ("chat", chat), ("long", long))


# The Mooncake FAST'25 trace beside the project (its README: ../shared/traces/mooncake-fast25/), or where
# VS_MOONCAKE_TRACE points.
MOONCAKE_TRACE = Path(
    os.environ.get(
        "VS_MOONCAKE_TRACE",
        Path(__file__).resolve().parent.parent.parent
        / "shared"
        / "traces"
        / "mooncake-fast25"
        / "synthetic_trace.jsonl",
    )
)


def mooncake_scenario(duration_s: float = 600.0, rate_scale: float = 1.0) -> Scenario:
    """Ten H200s serving the Mooncake trace's rows (``MOONCAKE_TRACE``: tool and agent traffic; once the rows beyond
    32k tokens are left out, 3,347 prompts of 9.3k tokens on average, 56% of their blocks shared with earlier rows)
    in the trace's order at Poisson arrivals, at the standard tier: two one-GPU INT4 8B replicas and two FP8 70B TP4
    ones, both at 32k context. ``TWO_VARIANT_BASE_RATE`` / 2 req/s times ``rate_scale``; most of the sharing comes
    late in the trace (7.7% of the first 460 rows' blocks could hit a cache that holds everything, 56% of all), so
    a run should cover most of it: at the capacity that takes about ten minutes."""
    if not MOONCAKE_TRACE.is_file():
        raise ValueError(f"the Mooncake trace is not at {MOONCAKE_TRACE}: set VS_MOONCAKE_TRACE to its path")
    router = RouterConfig()
    tiers = _scored_tiers(router)
    workload = WorkloadConfig(
        input_len=NormalLength(mean=1, std=0),  # each row says its own lengths
        prefix=MooncakeRows(path=str(MOONCAKE_TRACE), max_context_tokens=32768),
        tiers=[tiers["standard"]],
    )
    return Scenario(
        name="mooncake: 2x 8B INT4 + 2x 70B FP8 TP4 (10 H200s) serving the Mooncake FAST'25 trace's rows up to 32k",
        duration_s=duration_s,
        pools=[_pool("llama-8b-int4", 2), _pool("llama-70b-fp8", 8)],
        streams=[_steady("trace", TWO_VARIANT_BASE_RATE / 2 * rate_scale, 1, workload)],
        router=router,
        policies=PREFIX_SETUPS,
        scaling=["static"],
        replica_choice="least_prefill",
    )


def _fast_and_slow_pools(fast: EngineProfile) -> list[PoolSpec]:
    """The fleet of ``tiers`` and ``two_variant``: 2 one-GPU 8B INT4 replicas (``fast``) beside 8 BF16 70B
    TP2 replicas, whose decode step is ~8x longer and whose answers are better."""
    return [
        _pool("llama-8b-int4", 2, profile=fast),
        _pool("llama-70b-bf16-tp2", 16),
    ]


# The one-GPU INT4 8B built for 8k tokens rather than its preset's 32k, in the scenarios where long prompts must
# go to the other variant.
_SHORT_8B = PRESETS["h200-llama-3.1-8b-int4"].model_copy(update={"context_length": 8192})


# Per variant (its pool's name by default): its preset, quality, cost per 1k tokens and max_ongoing_requests.
_VARIANTS: dict[str, tuple[str, float, float, int]] = {
    "llama-8b-int4": ("h200-llama-3.1-8b-int4", 0.6, 0.02, 128),
    "llama-70b-fp8": ("h200-llama-3.1-70b-fp8-tp4", 0.9, 0.15, 96),
    "llama-70b-bf16-tp2": ("h200-llama-3.1-70b-bf16-tp2", 0.9, 0.1, 64),
}


def _pool(
    variant: str,
    gpus: int,
    *,
    name: str | None = None,
    profile: str | EngineProfile | None = None,
    autoscaling: AutoscalingSpec | None = None,
) -> PoolSpec:
    """``gpus`` GPUs of ``variant`` (a key of ``_VARIANTS``), on its preset unless ``profile`` is given."""
    preset, quality, cost_per_1k_tokens, max_ongoing_requests = _VARIANTS[variant]
    # Serve's default autoscaling where the scenario names none (left unset, as a PoolSpec written without it).
    scaled = {} if autoscaling is None else {"autoscaling": autoscaling}
    return PoolSpec(
        name=variant if name is None else name,
        profile=preset if profile is None else profile,
        gpus=gpus,
        quality=quality,
        cost_per_1k_tokens=cost_per_1k_tokens,
        max_ongoing_requests=max_ongoing_requests,
        **scaled,
    )


def _steady(name: str, rate: float, seed: int, workload: WorkloadConfig) -> Stream:
    return Stream(name=name, arrivals=PoissonArrivals(rate=rate), workload=workload.model_copy(update={"seed": seed}))


SCENARIOS = {
    "builtin": builtin_scenario,
    "heterogeneous": heterogeneous_scenario,
    "tiers": tiers_scenario,
    "two_variant": two_variant_scenario,
    "shared_prefix": shared_prefix_scenario,
    "conversations": conversations_scenario,
    "mooncake": mooncake_scenario,  # needs MOONCAKE_TRACE
}


def available_scenarios() -> list[str]:
    """The scenarios that can run here: every one, less mooncake where its trace is not on this machine."""
    return sorted(name for name in SCENARIOS if name != "mooncake" or MOONCAKE_TRACE.is_file())
