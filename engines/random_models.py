"""Random-weight models of real shapes, named ``random:<shape>`` (for example ``random:llama-8b``).

A GPU measurement needs a model of a real size, not a real model: the work of a forward step depends on the
shapes, not on the weights' values. The GPU machines have no model hub, so these are generated: a Llama
config of the named shape, weights drawn by transformers' own initializer *on the GPU when there is one*
(seconds even for 8B; on a CPU the large shapes take minutes), saved as safetensors in bfloat16 with the
builtin tokenizer beside them. The vocabulary is the builtin tokenizer's (so that every tool here can encode
and decode), which makes the embedding and LM head smaller than the real models'; every other dimension is
the real one.

The files land in ``<cache root>/random/<shape>-<hash>`` (see :func:`engines.builtin.cache_root`), built
under a file lock and published by an atomic rename like the builtin models, so that several processes (the
bench, Serve replicas, ``transformers serve``) can resolve the same name at once. An 8B shape takes ~16 GB.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

from engines import builtin
from engines.builtin import FORMAT_VERSION as TOKENIZER_FORMAT
from engines.builtin import SPECIAL_TOKENS, VOCAB_SIZE, build_tokenizer, cache_root, generation_config
from engines.model_cache import build_once, content_key, named

RANDOM_PREFIX = "random:"
# Bump when the way files are generated changes, so that stale caches are not reused.
FORMAT_VERSION = 1


@dataclass(frozen=True)
class RandomShape:
    """A decoder's dimensions (everything here goes into the cache key)."""

    description: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    tie_word_embeddings: bool
    # The KV cache, not the weights, depends on this; long enough for any bench workload.
    context_length: int = 8192
    rope_theta: float = 500_000.0
    seed: int = 0


RANDOM_SHAPES: dict[str, RandomShape] = {
    # Llama 3.2 1B and Llama 3.1 8B (their config.json files), vocabulary aside.
    "llama-1b": RandomShape("Llama 3.2 1B shape", 2048, 16, 32, 8, 8192, tie_word_embeddings=True),
    "llama-8b": RandomShape("Llama 3.1 8B shape", 4096, 32, 32, 8, 14336, tie_word_embeddings=False),
    # For tests of this module on a CPU: builds in well under a second.
    "llama-tiny": RandomShape("tiny test shape", 64, 2, 4, 2, 128, tie_word_embeddings=True, context_length=1024),
}


def random_shape(name: str) -> RandomShape:
    """The shape called ``name``, raising ``ModelNotFoundError`` that names the known ones."""
    return named(RANDOM_SHAPES, RANDOM_PREFIX, name)


def random_dir(name: str) -> Path:
    """The cache directory of a random model (it may not exist yet)."""
    return cache_root() / "random" / f"{name}-{_cache_key(random_shape(name))}"


def resolve_random(model: str) -> Path:
    """``random:<shape>`` -> its generated directory, building it on first use."""
    return ensure_random(model.removeprefix(RANDOM_PREFIX))


def ensure_random(name: str) -> Path:
    """Generates the random model ``name`` unless it is cached, and returns its directory."""
    return build_once(random_dir(name), lambda tmp: _build(random_shape(name), tmp), what=f"{RANDOM_PREFIX}{name}")


def _cache_key(shape: RandomShape) -> str:
    material = {
        "format": FORMAT_VERSION,
        "shape": dataclasses.asdict(shape),
        "tokenizer": [TOKENIZER_FORMAT, VOCAB_SIZE, SPECIAL_TOKENS],
    }
    return content_key(material)


def llama_config(shape: RandomShape, tokenizer):
    """The ``LlamaConfig`` of ``shape`` with ``tokenizer``'s vocabulary and special tokens."""
    return builtin.llama_config(
        shape,
        tokenizer,
        rope_parameters={"rope_type": "default", "rope_theta": shape.rope_theta},
        rms_norm_eps=1e-5,
        tie_word_embeddings=shape.tie_word_embeddings,
        dtype="bfloat16",
    )


def _build(shape: RandomShape, out: Path) -> None:
    """Writes config, bfloat16 safetensors weights, generation config and tokenizer to ``out``."""
    import torch
    from transformers import LlamaForCausalLM

    start = time.perf_counter()
    tokenizer = build_tokenizer()
    config = llama_config(shape, tokenizer)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    previous_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # allocate in bf16 directly: 8B in fp32 would not fit a GPU twice
    try:
        with torch.random.fork_rng(devices=[]), torch.device(device):
            torch.manual_seed(shape.seed)
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous_dtype)
    model.generation_config = generation_config(config)
    built = time.perf_counter() - start
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    info = {
        "format": FORMAT_VERSION,
        "shape": dataclasses.asdict(shape),
        "parameters": sum(p.numel() for p in model.parameters()),
        "built_on": device,
        "torch": torch.__version__,
        "build_seconds": round(built, 2),
        "save_seconds": round(time.perf_counter() - start - built, 2),
    }
    (out / "random_model.json").write_text(json.dumps(info, indent=2) + "\n")
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
