import json
from pathlib import Path

import pytest

from core.errors import ModelNotFoundError
from engines import random_models
from engines.builtin import build_tokenizer
from engines.model_ref import resolve_model
from engines.random_models import RANDOM_SHAPES, llama_config


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("VARIANT_SERVE_CACHE", str(tmp_path))
    return tmp_path


def test_unknown_shape_names_the_known_ones():
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model("random:llama-70b")
    assert all(f"random:{name}" in info.value.message for name in RANDOM_SHAPES)


@pytest.mark.parametrize(
    ("name", "hidden", "layers", "heads", "kv_heads", "intermediate", "tied"),
    [("llama-1b", 2048, 16, 32, 8, 8192, True), ("llama-8b", 4096, 32, 32, 8, 14336, False)],
)
def test_real_shapes_with_the_builtin_vocabulary(name, hidden, layers, heads, kv_heads, intermediate, tied):
    tokenizer = build_tokenizer()
    config = llama_config(RANDOM_SHAPES[name], tokenizer)
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (hidden, layers, heads)
    assert (config.num_key_value_heads, config.intermediate_size) == (kv_heads, intermediate)
    assert config.tie_word_embeddings is tied
    assert config.vocab_size == len(tokenizer)  # every id the tokenizer makes has an embedding
    assert config.eos_token_id == tokenizer.eos_token_id


def test_builds_once_into_the_cache_and_loads_in_bfloat16(cache):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model("random:llama-tiny")
    assert Path(path).parent == cache / "random"
    assert resolve_model("random:llama-tiny") == path  # cached: same directory, no rebuild
    info = json.loads((Path(path) / "random_model.json").read_text())
    assert info["shape"]["hidden_size"] == RANDOM_SHAPES["llama-tiny"].hidden_size
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert str(model.dtype) == "torch.bfloat16"
    assert model.config.vocab_size == len(tokenizer)
    assert list((Path(path)).glob("*.safetensors"))


def test_the_cache_key_follows_the_shape():
    tiny = random_models.RANDOM_SHAPES["llama-tiny"]
    other = random_models.RandomShape("x", 64, 3, 4, 2, 128, tie_word_embeddings=True, context_length=1024)
    assert random_models._cache_key(tiny) != random_models._cache_key(other)
