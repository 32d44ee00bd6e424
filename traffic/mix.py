"""A workload of several request classes: each with its own prompt and output lengths and its own SLO tier.

``traffic.workload`` draws every request from one length distribution; the routing bench needs traffic whose
classes differ in *both* length and SLO (short interactive prompts with tight targets beside long prompts
with loose ones), because that is the case a router has to get right. Pure and seeded like
``traffic.workload``: the same mix, seed and send times give the same requests, so every policy of a sweep
sees identical traffic.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping

from pydantic import BaseModel, Field, model_validator

from router.config import SLOTier
from traffic.prefix import SharedPrefix, composer
from traffic.segments import segment_token_ids
from traffic.workload import FixedLength, LengthDist, RequestSpec, Slo, UniformLength, make_prompt


class RequestClass(BaseModel):
    """One kind of request in a mix."""

    name: str = Field(min_length=1, description="Label of the class in reports.")
    weight: float = Field(gt=0, description="Relative share of requests of this class.")
    input_len: LengthDist = Field(description="Prompt length in tokens (exact: prompts are token ids).")
    output_len: LengthDist = Field(description="max_tokens of each request (ignore_eos makes it exact).")
    tier: str = Field(min_length=1, description="SLO tier sent as x-slo-tier; the server owns its targets.")
    prefix: SharedPrefix | None = Field(
        None, description="Prompts of this class start with one of its groups' shared prefixes (traffic.prefix)."
    )


class MixConfig(BaseModel):
    classes: list[RequestClass] = Field(min_length=1, description="The request classes and their shares.")
    token_id_range: tuple[int, int] = Field(
        (256, 500), description="Prompt ids are drawn from [low, high): plain tokens of the target's vocab."
    )
    seed: int = Field(0, description="Seeds classes, lengths and prompts (arrivals are seeded apart).")

    @model_validator(mode="after")
    def _check(self) -> MixConfig:
        if len({c.name for c in self.classes}) != len(self.classes):
            raise ValueError("class names must be unique")
        low, high = self.token_id_range
        if not 0 <= low < high:
            raise ValueError("token_id_range must be 0 <= low < high")
        return self


def routing_mix(
    *,
    interactive_share: float = 0.75,
    short_tokens: tuple[int, int] = (32, 128),
    short_output: int = 32,
    long_tokens: tuple[int, int] = (1500, 3000),
    long_output: int = 64,
    long_tier: str = "standard",
    seed: int = 0,
) -> MixConfig:
    """The routing bench's default traffic: short interactive prompts and long loose-SLO ones."""
    if not 0 < interactive_share < 1:
        raise ValueError("interactive_share must be in (0, 1)")
    return MixConfig(
        classes=[
            RequestClass(
                name="short",
                weight=interactive_share,
                input_len=UniformLength(low=short_tokens[0], high=short_tokens[1]),
                output_len=UniformLength(low=short_output, high=short_output),
                tier="interactive",
            ),
            RequestClass(
                name="long",
                weight=1.0 - interactive_share,
                input_len=UniformLength(low=long_tokens[0], high=long_tokens[1]),
                output_len=UniformLength(low=long_output, high=long_output),
                tier=long_tier,
            ),
        ],
        seed=seed,
    )


def slo_of(tier: str, tiers: Mapping[str, SLOTier]) -> Slo:
    """The SLO a request of ``tier`` is scored against: the server's own targets for that tier.

    Scoring with the router config's figures (not figures of the bench's own) keeps the bench and the
    server from disagreeing about what "met" means.
    """
    if tier not in tiers:
        raise ValueError(f"unknown tier {tier!r}; the router config has {', '.join(sorted(tiers))}")
    return Slo(tier=tier, ttft_ms=tiers[tier].ttft_ms, tpot_ms=tiers[tier].tpot_ms)


def mixed_requests(
    mix: MixConfig, tiers: Mapping[str, SLOTier], send_times: Iterable[float | None]
) -> Iterator[RequestSpec]:
    """One request per send time: its class drawn by weight, then its lengths and token-id prompt."""
    slos = {c.name: slo_of(c.tier, tiers) for c in mix.classes}
    picks = random.Random(f"{mix.seed}:classes")
    lengths = random.Random(f"{mix.seed}:lengths")
    prompts = random.Random(f"{mix.seed}:prompts")
    weights = [c.weight for c in mix.classes]
    contents = {c.name: composer(c.prefix, mix.seed) for c in mix.classes if c.prefix is not None}
    for index, send_at in enumerate(send_times):
        cls = picks.choices(mix.classes, weights=weights)[0]
        n_in = cls.input_len.sample(lengths)
        n_out = cls.output_len.sample(lengths)
        content = contents[cls.name].next(n_in, n_out) if cls.name in contents else None
        yield RequestSpec(
            index=index,
            send_at=send_at,
            prompt=make_prompt(n_in, "token_ids", mix.token_id_range, prompts)
            if content is None
            else segment_token_ids(content.segments, mix.token_id_range),
            prompt_tokens=n_in if content is None else content.tokens,
            max_tokens=n_out,
            slo=slos[cls.name],
            segments=() if content is None else content.segments,
        )


def slo_window_s(mix: MixConfig, tiers: Mapping[str, SLOTier]) -> float:
    """The longest a request of ``mix`` may run and still meet its SLO: its TTFT target plus its TPOT target for
    every token after the first, at the longest output of its class (0 when no class has both targets).

    A bench's hard limit per request must not be shorter: a request cut before this window ends is scored a
    miss it might not have been (docs/measurements.md: the run where a shorter limit did that)."""
    window = 0.0
    for cls in mix.classes:
        slo = slo_of(cls.tier, tiers)
        if slo.ttft_ms is not None and slo.tpot_ms is not None:
            tokens = longest_length(cls.output_len)
            window = max(window, (slo.ttft_ms + slo.tpot_ms * (tokens - 1)) / 1e3)
    return window


def longest_length(dist: LengthDist) -> int:
    """The longest a length distribution draws (a normal one without a cap: its mean + 4 standard deviations)."""
    if isinstance(dist, FixedLength):
        return dist.value
    if isinstance(dist, UniformLength):
        return dist.high
    return dist.high if dist.high is not None else round(dist.mean + 4 * dist.std)


def mean_length(dist: LengthDist) -> float:
    """The mean a length distribution draws (before clipping, for a normal one)."""
    if isinstance(dist, FixedLength):
        return float(dist.value)
    if isinstance(dist, UniformLength):
        return (dist.low + dist.high) / 2
    return dist.mean
