"""Workloads whose prompts share prefixes: shared system prompts, and multi-turn conversations.

A :class:`WorkloadConfig` (``traffic.workload``) with ``prefix`` set keeps drawing each request's lengths as before
(``input_len`` is then the request's own new tokens: its question, or its user message) and asks a
:class:`PromptComposer` for the request's content as segments (``traffic.segments``). The bench and the simulator
make the same composer from the same seed and feed it the same lengths, so they see the same prompts; the bench
turns them into token ids, the simulator only hashes their blocks.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from traffic.mooncake import load_mooncake
from traffic.segments import Segments, segment_id


class SharedPrefix(BaseModel):
    """Requests in ``groups`` groups, each group's prompts starting with the same system prompt."""

    kind: Literal["shared_prefix"] = "shared_prefix"
    groups: int = Field(ge=1, description="How many distinct shared prefixes (system prompts) there are.")
    prefix_tokens: int = Field(ge=1, description="Tokens of each group's shared prefix, before the question.")
    zipf: float | None = Field(
        None,
        gt=0,
        description="Zipf exponent s: group k (from 0) is picked with weight 1/(k+1)**s, so low groups are hot; "
        "None picks groups uniformly.",
    )
    content_seed: int | None = Field(
        None,
        description="Seeds the groups' prefixes; None: the workload's seed. Streams with the same content_seed "
        "share their groups' prefixes (e.g. short and long requests of one application).",
    )


class Conversations(BaseModel):
    """Multi-turn chats: each request continues a conversation and sends its whole history.

    Turn ``t``'s prompt is every earlier user message and an answer of the earlier turn's output length, then a new
    user message of ``input_len`` tokens. With ``conversations`` C active and arrivals at rate R, a conversation's
    turns come about C / R seconds apart (its user's think time). After its last turn a conversation is replaced by
    a new one.
    """

    kind: Literal["conversations"] = "conversations"
    conversations: int = Field(ge=1, description="Conversations active at once.")
    turns: int = Field(ge=1, description="Turns (requests) in each conversation.")
    pick: Literal["round_robin", "random"] = Field(
        "round_robin",
        description="Which conversation an arrival continues. round_robin: each in turn, so think times are "
        "C / rate, and the first C conversations move in step (all on turn t together); random: uniformly among "
        "the active ones, think times spread around C / rate and conversations out of step.",
    )


class MooncakeRows(BaseModel):
    """The prompts and answer lengths of a Mooncake trace's rows (``traffic.mooncake``), in the trace's order, at the
    stream's own arrivals: its prefix sharing and multi-turn order at any rate (the published traces' arrivals are
    Poisson already). ``input_len`` and ``output_len`` are not drawn from: each row says its own."""

    kind: Literal["mooncake"] = "mooncake"
    path: str = Field(description="The trace file, e.g. ../shared/traces/mooncake-fast25/synthetic_trace.jsonl.")
    max_context_tokens: int = Field(
        ge=2, description="Rows whose prompt + answer exceed it are left out (the largest context of the fleet)."
    )


PrefixSpec = Annotated[SharedPrefix | Conversations | MooncakeRows, Field(discriminator="kind")]


@dataclass(frozen=True, slots=True)
class PromptContent:
    """One request's prompt as segments, and which turn of its conversation it is (0: the first, or no chat)."""

    segments: Segments
    turn: int = 0
    output_tokens: int | None = None  # the answer's length where the content says it (a trace row); else drawn

    @property
    def tokens(self) -> int:
        return sum(n for _, n in self.segments)


class PromptComposer:
    """Hands out each request's prompt content, in order, from the lengths the workload drew for it."""

    def next(self, input_tokens: int, output_tokens: int) -> PromptContent:
        raise NotImplementedError


class _SharedPrefixComposer(PromptComposer):
    def __init__(self, spec: SharedPrefix, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self.rng = random.Random(f"{seed}:prefix")
        content = seed if spec.content_seed is None else spec.content_seed
        self.prefixes = [(segment_id("shared_prefix", content, g), spec.prefix_tokens) for g in range(spec.groups)]
        self.cum_weights = (
            None
            if spec.zipf is None
            else list(itertools.accumulate(1.0 / (k + 1) ** spec.zipf for k in range(spec.groups)))
        )
        self.index = 0

    def next(self, input_tokens: int, output_tokens: int) -> PromptContent:
        if self.cum_weights is None:
            group = self.rng.randrange(self.spec.groups)
        else:
            group = self.rng.choices(range(self.spec.groups), cum_weights=self.cum_weights)[0]
        question = (segment_id("question", self.seed, self.index), input_tokens)
        self.index += 1
        return PromptContent((self.prefixes[group], question))


@dataclass(slots=True)
class _Conversation:
    number: int  # conversations started before this one, over the whole run
    turn: int = 0
    history: list[tuple[int, int]] = field(default_factory=list)


class _ConversationComposer(PromptComposer):
    def __init__(self, spec: Conversations, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self.rng = random.Random(f"{seed}:prefix")
        self.active = [_Conversation(n) for n in range(spec.conversations)]
        self.started = spec.conversations
        self.index = 0

    def next(self, input_tokens: int, output_tokens: int) -> PromptContent:
        if self.spec.pick == "round_robin":
            slot = self.index % self.spec.conversations
        else:
            slot = self.rng.randrange(self.spec.conversations)
        self.index += 1
        conv = self.active[slot]
        user = (segment_id("chat_user", self.seed, conv.number, conv.turn), input_tokens)
        content = PromptContent((*conv.history, user), conv.turn)
        if conv.turn + 1 >= self.spec.turns:
            self.active[slot] = _Conversation(self.started)
            self.started += 1
        else:
            # The next turn sends this one's answer back as history: max_tokens long, as ignore_eos makes it. Its
            # tokens are not the ones a real model generated, so a real engine's cache matches the next prompt only
            # up to the end of this one (a cache model that also keeps generated blocks would match further).
            answer = (segment_id("chat_answer", self.seed, conv.number, conv.turn), output_tokens)
            conv.history += [user, answer]
            conv.turn += 1
        return content


class _MooncakeComposer(PromptComposer):
    def __init__(self, spec: MooncakeRows) -> None:
        self.spec = spec
        self.rows = _mooncake_rows(spec.path, spec.max_context_tokens)
        self.index = 0

    def next(self, input_tokens: int, output_tokens: int) -> PromptContent:
        # Past the trace's end it starts over in another namespace: the same shapes, none of its blocks shared.
        lap, at = divmod(self.index, len(self.rows))
        self.index += 1
        segments, output = self.rows[at]
        if lap:
            segments = tuple((segment_id("mooncake_lap", lap, seg), n) for seg, n in segments)
        return PromptContent(segments, output_tokens=output)


_MOONCAKE_ROWS: dict[tuple[str, int], list[tuple[Segments, int]]] = {}


def _mooncake_rows(path: str, max_context_tokens: int) -> list[tuple[Segments, int]]:
    """The trace's (segments, answer length) that fit, read once per process."""
    key = (path, max_context_tokens)
    if key not in _MOONCAKE_ROWS:
        rows = [
            (r.segments, r.output_tokens)
            for r in load_mooncake(path)
            if r.input_tokens + r.output_tokens <= max_context_tokens
        ]
        if not rows:
            raise ValueError(f"{path}: no row fits {max_context_tokens} tokens")
        _MOONCAKE_ROWS[key] = rows
    return _MOONCAKE_ROWS[key]


def composer(spec: SharedPrefix | Conversations | MooncakeRows, seed: int) -> PromptComposer:
    """The composer of ``spec`` for a workload seeded by ``seed``: a fresh one gives the same prompts again."""
    if isinstance(spec, SharedPrefix):
        return _SharedPrefixComposer(spec, seed)
    if isinstance(spec, MooncakeRows):
        return _MooncakeComposer(spec)
    return _ConversationComposer(spec, seed)


def mean_prompt_tokens(
    spec: SharedPrefix | Conversations | MooncakeRows | None, mean_input: float, mean_output: float
) -> float:
    """The mean prompt of a workload whose own part (question, user message) averages ``mean_input`` tokens and
    whose answers ``mean_output``: what a capacity estimate that caches nothing must prefill per request."""
    if spec is None:
        return mean_input
    if isinstance(spec, SharedPrefix):
        return spec.prefix_tokens + mean_input
    if isinstance(spec, MooncakeRows):
        rows = _mooncake_rows(spec.path, spec.max_context_tokens)
        return sum(sum(n for _, n in segments) for segments, _ in rows) / len(rows)
    # Turn t (from 0) resends t earlier messages and answers: (turns - 1) / 2 of them on average.
    return mean_input + (spec.turns - 1) / 2 * (mean_input + mean_output)
