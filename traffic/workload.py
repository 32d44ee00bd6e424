"""What each request asks for: prompt length and content, ``max_tokens``, and its SLO.

Pure and seeded: the same config and seed give the same requests, so two runs (say, two routing
policies) see identical traffic. *When* requests are sent is :mod:`traffic.arrivals`' business; this
module attaches one request to each send time it is given.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from traffic import arrivals
from traffic.mooncake import MooncakeTrace
from traffic.prefix import PrefixSpec, composer
from traffic.segments import Segments, segment_token_ids
from traffic.trace import TraceRow

HEADER_TTFT = "x-slo-ttft-ms"
HEADER_TPOT = "x-slo-tpot-ms"
HEADER_TIER = "x-slo-tier"


class FixedLength(BaseModel):
    kind: Literal["fixed"] = "fixed"
    value: int = Field(ge=1, description="Every request gets this many tokens.")

    def sample(self, rng: random.Random) -> int:
        return self.value


class UniformLength(BaseModel):
    kind: Literal["uniform"] = "uniform"
    low: int = Field(ge=1, description="Smallest length (inclusive).")
    high: int = Field(ge=1, description="Largest length (inclusive).")

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.high < self.low:
            raise ValueError("uniform: high must be >= low")
        return self

    def sample(self, rng: random.Random) -> int:
        return rng.randint(self.low, self.high)


class NormalLength(BaseModel):
    kind: Literal["normal"] = "normal"
    mean: float = Field(gt=0, description="Mean length before clipping.")
    std: float = Field(ge=0, description="Standard deviation before clipping.")
    low: int = Field(1, ge=1, description="Draws below this are clipped up to it.")
    high: int | None = Field(None, ge=1, description="Draws above this are clipped down to it.")

    def sample(self, rng: random.Random) -> int:
        value = max(self.low, round(rng.gauss(self.mean, self.std)))
        return value if self.high is None else min(self.high, value)


LengthDist = Annotated[FixedLength | UniformLength | NormalLength, Field(discriminator="kind")]


def parse_length(text: str) -> FixedLength | UniformLength | NormalLength:
    """``N`` or ``fixed:N``, ``uniform:LOW:HIGH``, ``normal:MEAN:STD[:LOW[:HIGH]]``."""
    kind, _, rest = text.partition(":")
    try:
        if not rest and kind.isdigit():
            return FixedLength(value=int(kind))
        args = rest.split(":")
        if kind == "fixed" and len(args) == 1:
            return FixedLength(value=int(args[0]))
        if kind == "uniform" and len(args) == 2:
            return UniformLength(low=int(args[0]), high=int(args[1]))
        if kind == "normal" and 2 <= len(args) <= 4:
            return NormalLength(
                mean=float(args[0]),
                std=float(args[1]),
                low=int(args[2]) if len(args) > 2 else 1,
                high=int(args[3]) if len(args) > 3 else None,
            )
    except ValueError as exc:
        raise ValueError(f"bad length distribution {text!r}: {exc}") from exc
    raise ValueError(
        f"bad length distribution {text!r}: use N, fixed:N, uniform:LOW:HIGH or normal:MEAN:STD[:LOW[:HIGH]]"
    )


@dataclass(frozen=True, slots=True)
class Slo:
    """A request's service-level objective: targets in milliseconds and/or a named tier."""

    tier: str | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None

    def headers(self) -> dict[str, str]:
        # A tier is sent by name alone: the server owns the tier's definition, the targets we
        # hold for it only score the result here.
        if self.tier is not None:
            return {HEADER_TIER: self.tier}
        headers = {}
        if self.ttft_ms is not None:
            headers[HEADER_TTFT] = f"{self.ttft_ms:g}"
        if self.tpot_ms is not None:
            headers[HEADER_TPOT] = f"{self.tpot_ms:g}"
        return headers


class SloTier(BaseModel):
    name: str = Field(min_length=1, description="Sent as the x-slo-tier header.")
    weight: float = Field(1.0, gt=0, description="Relative share of requests in this tier.")
    ttft_ms: float | None = Field(None, gt=0, description="TTFT target used to score this tier.")
    tpot_ms: float | None = Field(None, gt=0, description="TPOT target used to score this tier.")


def parse_tier(text: str) -> SloTier:
    """``NAME[:WEIGHT[:TTFT_MS[:TPOT_MS]]]``; an empty field leaves that value unset."""
    parts = text.split(":")
    if not parts[0] or len(parts) > 4:
        raise ValueError(f"bad tier {text!r}: use NAME[:WEIGHT[:TTFT_MS[:TPOT_MS]]]")
    values = [float(p) if p else None for p in parts[1:]] + [None] * (4 - len(parts))
    weight, ttft, tpot = values
    return SloTier(name=parts[0], weight=1.0 if weight is None else weight, ttft_ms=ttft, tpot_ms=tpot)


class WorkloadConfig(BaseModel):
    input_len: LengthDist = Field(
        default_factory=lambda: FixedLength(value=128), description="Prompt length in tokens."
    )
    output_len: LengthDist = Field(
        default_factory=lambda: FixedLength(value=64), description="max_tokens of each request."
    )
    prompt_mode: Literal["token_ids", "text"] = Field(
        "token_ids",
        description="token_ids: the prompt is a list of ids (exact length, completions API only); "
        "text: words, about one token each (the server's usage reports the real count).",
    )
    token_id_range: tuple[int, int] = Field(
        (256, 500), description="Prompt ids are drawn from [low, high): plain tokens of the target's vocab."
    )
    slo_ttft_ms: float | None = Field(None, gt=0, description="TTFT target for every request.")
    slo_tpot_ms: float | None = Field(None, gt=0, description="TPOT target for every request.")
    tiers: list[SloTier] = Field(
        default_factory=list,
        description="If set, each request picks a tier by weight and sends it as x-slo-tier "
        "instead of the millisecond targets; a tier without targets inherits slo_ttft_ms/slo_tpot_ms.",
    )
    seed: int = Field(0, description="Seeds lengths, prompts, tiers and arrivals.")
    prefix: PrefixSpec | None = Field(
        None,
        description="Prompts that share prefixes (traffic.prefix): shared system prompts or multi-turn "
        "conversations; input_len is then each request's own new tokens after its shared part. "
        "None: every prompt is independent.",
    )

    @model_validator(mode="after")
    def _check(self) -> WorkloadConfig:
        low, high = self.token_id_range
        if not 0 <= low < high:
            raise ValueError("token_id_range must be 0 <= low < high")
        if self.prefix is not None and self.prompt_mode != "token_ids":
            # Shared prefixes must be the same tokens on the server: only exact ids guarantee that.
            raise ValueError("a prefix workload sends token-id prompts: prompt_mode must be 'token_ids'")
        if len({t.name for t in self.tiers}) != len(self.tiers):
            raise ValueError("tier names must be unique")
        return self

    def slo_for_tier(self, name: str | None) -> Slo:
        """The SLO of a named tier (targets as configured, else the global ones)."""
        if name is None:
            return Slo(ttft_ms=self.slo_ttft_ms, tpot_ms=self.slo_tpot_ms)
        tier = next((t for t in self.tiers if t.name == name), None)
        ttft = tier.ttft_ms if tier is not None and tier.ttft_ms is not None else self.slo_ttft_ms
        tpot = tier.tpot_ms if tier is not None and tier.tpot_ms is not None else self.slo_tpot_ms
        return Slo(tier=name, ttft_ms=ttft, tpot_ms=tpot)


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request to send: when (``send_at`` None in a closed loop), what, and its SLO."""

    index: int
    send_at: float | None
    prompt: list[int] | str
    prompt_tokens: int  # the length asked for; for text prompts an estimate
    max_tokens: int
    slo: Slo
    # The client closes the response after this many text chunks, as a user who stops reading does;
    # None reads to the end. A stream with fewer chunks simply completes.
    cancel_after_chunks: int | None = None
    # The prompt's content as (segment_id, tokens) pieces when the workload shares prefixes (traffic.segments);
    # empty for independent prompts.
    segments: Segments = ()
    turn: int = 0  # the turn of its conversation (traffic.prefix.Conversations); 0 outside conversations


# Short common English words: each is a single token for most BPE vocabularies, ours included.
_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "was",
    "with",
    "as",
    "at",
    "by",
    "be",
    "this",
    "from",
    "or",
    "an",
    "are",
    "not",
    "but",
    "all",
    "one",
    "had",
    "has",
    "can",
    "more",
    "time",
    "about",
    "some",
    "what",
    "out",
    "so",
    "up",
    "use",
    "when",
    "there",
    "may",
    "new",
    "other",
]


def make_prompt(length: int, mode: str, token_id_range: tuple[int, int], rng: random.Random) -> list[int] | str:
    if mode == "token_ids":
        low, high = token_id_range
        return [rng.randrange(low, high) for _ in range(length)]
    return " ".join(rng.choice(_WORDS) for _ in range(length))


def _pick_tier(tiers: Sequence[SloTier], rng: random.Random) -> str | None:
    if not tiers:
        return None
    return rng.choices([t.name for t in tiers], weights=[t.weight for t in tiers])[0]


def build_requests(cfg: WorkloadConfig, send_times: Iterable[float | None]) -> Iterator[RequestSpec]:
    """One request per send time, lengths and tier drawn from ``cfg``'s distributions.

    With ``cfg.prefix`` the prompt is the token ids of its segments (``traffic.prefix``), drawn from the same
    lengths; ``sim.workload`` draws the same segments without the ids.
    """
    lengths = random.Random(f"{cfg.seed}:lengths")
    prompts = random.Random(f"{cfg.seed}:prompts")
    tiers = random.Random(f"{cfg.seed}:tiers")
    contents = composer(cfg.prefix, cfg.seed) if cfg.prefix is not None else None
    for index, send_at in enumerate(send_times):
        n_in = cfg.input_len.sample(lengths)
        n_out = cfg.output_len.sample(lengths)
        slo = cfg.slo_for_tier(_pick_tier(cfg.tiers, tiers))
        if contents is None:
            prompt = make_prompt(n_in, cfg.prompt_mode, cfg.token_id_range, prompts)
            yield RequestSpec(
                index=index, send_at=send_at, prompt=prompt, prompt_tokens=n_in, max_tokens=n_out, slo=slo
            )
            continue
        content = contents.next(n_in, n_out)
        yield RequestSpec(
            index=index,
            send_at=send_at,
            prompt=segment_token_ids(content.segments, cfg.token_id_range),
            prompt_tokens=content.tokens,
            max_tokens=content.output_tokens or n_out,
            slo=slo,
            segments=content.segments,
            turn=content.turn,
        )


def trace_requests(cfg: WorkloadConfig, rows: Sequence[TraceRow], speedup: float = 1.0) -> Iterator[RequestSpec]:
    """Replay a trace: its times, its lengths and its tiers (a row without one gets the global SLO).

    A row with segments (a Mooncake trace, ``traffic.mooncake``) is sent as their token ids, so that its shared
    blocks are shared tokens; the others get a fresh prompt of their length.
    """
    prompts = random.Random(f"{cfg.seed}:prompts")
    times = arrivals.replay((r.timestamp for r in rows), speedup)
    for index, (row, send_at) in enumerate(zip(rows, times, strict=True)):
        if row.segments and cfg.prompt_mode != "token_ids":
            raise ValueError("a trace of shared blocks is sent as token ids: prompt_mode must be 'token_ids'")
        prompt = (
            segment_token_ids(row.segments, cfg.token_id_range)
            if row.segments
            else make_prompt(row.input_tokens, cfg.prompt_mode, cfg.token_id_range, prompts)
        )
        yield RequestSpec(
            index=index,
            send_at=send_at,
            prompt=prompt,
            prompt_tokens=row.input_tokens,
            max_tokens=row.output_tokens,
            slo=cfg.slo_for_tier(row.tier),
            segments=row.segments,
        )


def mooncake_requests(trace: MooncakeTrace, workload: WorkloadConfig) -> Iterator[RequestSpec]:
    """The bench's requests of a Mooncake trace: its times (sped up), lengths and shared blocks as token ids, with
    ``workload``'s SLO and token ids (``sim.workload.mooncake_sim_requests`` gives the simulator's)."""
    return trace_requests(workload, trace.rows(), trace.speedup)
