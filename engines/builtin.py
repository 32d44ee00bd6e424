"""Builtin models: small Llama checkpoints generated offline, named ``builtin:<name>``.

There is no model hub on the development machines, yet the embedded engine, the tests and the bench
need real checkpoints that load through the ordinary ``from_pretrained`` path. This module generates
them on first use from a corpus shipped in the package (``builtin_corpus.txt``):

* one byte-level BPE tokenizer, shared by every builtin model (same vocabulary, so the serving layer
  tokenizes once whatever variant the router picks), with a chat template;
* per model, seeded random weights followed by a short next-token training run on the corpus, so that
  greedy output resembles the corpus (Chinese after a Chinese prompt) rather than random bytes.

Generation is deterministic (same spec, corpus and torch version => identical files) and cached under
``$VARIANT_SERVE_CACHE`` (default ``~/.cache/variant-serve``) in ``builtin/<name>-<hash>``, where the
hash covers everything that shapes the files. Several Ray replicas may resolve the same model at the
same moment: a file lock avoids duplicate work and an atomic rename means nobody ever loads a
half-written directory.

``python -m engines.builtin [names...]`` pre-generates models and prints their paths and timings.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import itertools
import json
import math
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from core.errors import EngineConfigError
from engines.model_cache import build_once, content_key, named

BUILTIN_PREFIX = "builtin:"
# Bump when the way files are generated changes, so that stale caches are not reused.
FORMAT_VERSION = 3

VOCAB_SIZE = 1024
BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
ROLES = ("system", "user", "assistant")
SPECIAL_TOKENS = (BOS, EOS, PAD, *(f"<|{role}|>" for role in ROLES))

# One turn is "<|role|>content<|eos|>": EOS ends the assistant's turn, so generation stops there.
CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] -%}"
    "{{- raise_exception('Unsupported role: ' + message['role']) -}}"
    "{%- endif -%}"
    "{{- '<|' + message['role'] + '|>' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] if part['type'] == 'text' -%}{{- part['text'] -}}"
    "{%- endfor -%}{%- endif -%}"
    "{{- eos_token -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- endif -%}"
)

# Training runs on a fixed number of threads: the reduction order of CPU kernels (and so the last bits
# of the weights) may depend on it, and replicas run with different thread settings. One thread, because
# these matrices are too small to gain from more, and because OpenMP threads that spin-wait on a busy
# machine (several replicas building at once) made a two-thread build several times slower.
_TRAIN_THREADS = 1


@dataclass(frozen=True)
class BuiltinSpec:
    """The shape and training recipe of one builtin model (everything here goes into the cache key)."""

    description: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    context_length: int  # max_position_embeddings
    train_steps: int
    learning_rate: float
    batch_size: int = 8
    seq_len: int = 64
    seed: int = 0
    # A builtin model of the same width whose trained layers start this one; the extra layers start as the
    # identity. Then a short run trains them all together. This keeps a deeper model's build to seconds.
    grow_from: str | None = None


# Decoding at batch 1 on a CPU is bound by per-layer overhead more than by width, so "small" is slower
# through depth. Trained from scratch, a 10-layer model needs far more steps than the few-seconds budget
# allows, so it grows from "tiny" (see ``grow_from``). Measured on 2 cores, plain model.generate at
# batch 1: tiny ~850 tok/s, small ~250 tok/s. Adding a size is one line.
BUILTIN_MODELS: dict[str, BuiltinSpec] = {
    "tiny": BuiltinSpec("fast, short context", 64, 2, 4, 2, 172, 1024, train_steps=200, learning_rate=1e-2),
    "small": BuiltinSpec(
        "slower, longer context",
        64,
        10,
        4,
        2,
        172,
        4096,
        train_steps=60,
        learning_rate=3e-3,
        grow_from="tiny",
    ),
}


def builtin_spec(name: str) -> BuiltinSpec:
    """The spec of a builtin model, raising ``ModelNotFoundError`` that names the known ones."""
    return named(BUILTIN_MODELS, BUILTIN_PREFIX, name)


def cache_root() -> Path:
    """Where generated models live: ``$VARIANT_SERVE_CACHE`` or ``~/.cache/variant-serve``."""
    env = os.environ.get("VARIANT_SERVE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "variant-serve"


def builtin_dir(name: str) -> Path:
    """The cache directory of a builtin model (it may not exist yet)."""
    return cache_root() / "builtin" / f"{name}-{_cache_key(builtin_spec(name))}"


def ensure_builtin(name: str) -> Path:
    """Generates the builtin model ``name`` unless it is cached, and returns its directory."""
    return build_once(builtin_dir(name), lambda tmp: _build(builtin_spec(name), tmp), what=f"{BUILTIN_PREFIX}{name}")


def corpus_text() -> str:
    """The text the builtin tokenizer and models are trained on (shipped as package data)."""
    return resources.files("engines").joinpath("builtin_corpus.txt").read_text(encoding="utf-8")


def _cache_key(spec: BuiltinSpec) -> str:
    material = {
        "format": FORMAT_VERSION,
        "spec": dataclasses.asdict(spec),
        "base": _cache_key(builtin_spec(spec.grow_from)) if spec.grow_from else None,
        "vocab_size": VOCAB_SIZE,
        "special_tokens": SPECIAL_TOKENS,
        "chat_template": CHAT_TEMPLATE,
        "corpus": hashlib.sha256(corpus_text().encode()).hexdigest(),
    }
    return content_key(material)


@functools.cache
def _tokenizer_json() -> str:
    """Trains the shared tokenizer once per process (deterministic, well under a second)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        # All 256 bytes, so that any text (also text the corpus never saw) can be encoded.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_text().splitlines(keepends=True), trainer=trainer)
    return tok.to_str()


def build_tokenizer():
    """The builtin tokenizer as a ``PreTrainedTokenizerFast`` (special tokens and chat template set)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json()),
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[f"<|{role}|>" for role in ROLES],
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _training_text(tokenizer) -> list[str]:
    """The corpus itself, plus chat turns (one sentence answered by the next) so chat prompts work."""
    texts = [corpus_text()]
    for paragraph in re.split(r"\n\s*\n", corpus_text()):
        sentences = [s for s in re.split(r"(?<=[.!?\u3002\uff01\uff1f])\s*", paragraph.strip()) if s]
        for question, answer in itertools.pairwise(sentences):
            messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
            texts.append(tokenizer.apply_chat_template(messages, tokenize=False))
    return texts


@contextlib.contextmanager
def _deterministic_torch(seed: int) -> Iterator[None]:
    """Seeds torch and fixes its threads for the block, restoring the caller's settings afterwards."""
    import torch

    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        torch.set_num_threads(_TRAIN_THREADS)
        torch.use_deterministic_algorithms(True)
        try:
            yield
        finally:
            torch.set_num_threads(threads)
            torch.use_deterministic_algorithms(deterministic)


class LlamaShape(Protocol):
    """The dimensions a Llama config takes from a model's spec (a :class:`BuiltinSpec`, a random model's shape)."""

    @property
    def hidden_size(self) -> int: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def num_heads(self) -> int: ...
    @property
    def num_kv_heads(self) -> int: ...
    @property
    def intermediate_size(self) -> int: ...
    @property
    def context_length(self) -> int: ...


def llama_config(shape: LlamaShape, tokenizer, **settings: Any):
    """The ``LlamaConfig`` of ``shape`` with ``tokenizer``'s vocabulary and special tokens, and ``settings``."""
    from transformers import LlamaConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (BOS, EOS, PAD)}
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        intermediate_size=shape.intermediate_size,
        max_position_embeddings=shape.context_length,
        bos_token_id=ids[BOS],
        eos_token_id=ids[EOS],
        pad_token_id=ids[PAD],
        **settings,
    )


def generation_config(config):
    """The ``GenerationConfig`` that stops at ``config``'s end of sequence and pads with its pad token."""
    from transformers import GenerationConfig

    return GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
    )


def _build(spec: BuiltinSpec, out: Path) -> None:
    """Writes a complete checkpoint directory (config, weights, tokenizer, generation config) to ``out``."""
    import torch
    from transformers import LlamaForCausalLM

    start = time.perf_counter()
    tokenizer = build_tokenizer()
    config = llama_config(spec, tokenizer, tie_word_embeddings=True)
    stream = torch.tensor(
        [t for text in _training_text(tokenizer) for t in tokenizer.encode(text, add_special_tokens=False)]
    )
    base = LlamaForCausalLM.from_pretrained(ensure_builtin(spec.grow_from)) if spec.grow_from else None
    with _deterministic_torch(spec.seed):
        model = LlamaForCausalLM(config)
        # Residual branches start at zero, so every layer starts as the identity: deep models then learn
        # as fast as shallow ones, and layers added to a grown model do not disturb what it already knows.
        for layer in model.model.layers:
            torch.nn.init.zeros_(layer.self_attn.o_proj.weight)
            torch.nn.init.zeros_(layer.mlp.down_proj.weight)
        if base is not None:  # the base's embeddings, final norm and layers become the first ones
            _, unexpected = model.load_state_dict(base.state_dict(), strict=False)
            if unexpected:
                raise EngineConfigError(f"{spec.grow_from} does not fit into this model: {unexpected[:3]}")
        loss = _train(model, stream, spec)
    model.generation_config = generation_config(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    info = {
        "format": FORMAT_VERSION,
        "spec": dataclasses.asdict(spec),
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_loss": round(loss, 4),
        "torch": torch.__version__,
        "build_seconds": round(time.perf_counter() - start, 2),
    }
    (out / "builtin.json").write_text(json.dumps(info, indent=2) + "\n")


def _train(model, stream, spec: BuiltinSpec) -> float:
    """A short next-token training run on random windows of ``stream``; returns the last loss."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate, weight_decay=0.0)
    warmup = max(1, spec.train_steps // 10)

    def lr_factor(step: int) -> float:  # linear warmup, then cosine decay to 10%
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, spec.train_steps - warmup)
        return 0.1 + 0.45 * (1 + math.cos(math.pi * progress))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    model.train()
    loss = 0.0
    for _ in range(spec.train_steps):
        starts = torch.randint(0, len(stream) - spec.seq_len, (spec.batch_size,))
        batch = torch.stack([stream[s : s + spec.seq_len] for s in starts.tolist()])
        step_loss = model(input_ids=batch, labels=batch).loss
        step_loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        loss = step_loss.item()
    model.eval()
    return loss


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Pre-generate builtin models into the cache.")
    parser.add_argument("names", nargs="*", help=f"default: all ({', '.join(BUILTIN_MODELS)})")
    args = parser.parse_args(argv)
    for name in args.names or list(BUILTIN_MODELS):
        start = time.perf_counter()
        path = ensure_builtin(name.removeprefix(BUILTIN_PREFIX))
        print(f"{BUILTIN_PREFIX}{name}\t{path}\t{time.perf_counter() - start:.1f}s", flush=True)


if __name__ == "__main__":
    main()
