import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from core.errors import ModelNotFoundError
from engines import builtin
from engines.builtin import BUILTIN_MODELS
from engines.model_ref import resolve_model

# Loads a builtin directory the way any engine would, in a fresh process with the hub switched off.
LOAD_OFFLINE = r"""
import json, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
path = sys.argv[1]
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path)
ids = tok("今天早上天气很好，", return_tensors="pt").input_ids
out = model.generate(ids, max_new_tokens=30, do_sample=False)
print(json.dumps({
    "text": tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True),
    "eos": model.generation_config.eos_token_id,
    "tok_eos": tok.eos_token_id,
    "context": model.config.max_position_embeddings,
}))
"""


@pytest.fixture(scope="module")
def tiny_dir() -> Path:
    # The shared cache (VARIANT_SERVE_CACHE or ~/.cache): generated once, reused across runs and modules.
    return Path(resolve_model("builtin:tiny"))


@pytest.fixture(scope="module")
def small_dir() -> Path:
    return Path(resolve_model("builtin:small"))


def test_non_builtin_references_pass_through():
    assert resolve_model("/models/llama-8b") == "/models/llama-8b"
    assert resolve_model("meta-llama/Llama-3.1-8B-Instruct") == "meta-llama/Llama-3.1-8B-Instruct"


def test_unknown_builtin_names_the_name_and_the_known_ones():
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model("builtin:huge")
    assert "builtin:huge" in info.value.message
    assert all(f"builtin:{name}" in info.value.message for name in BUILTIN_MODELS)
    assert info.value.param == "model"


@pytest.mark.slow  # starts a process or loads a model: the full suite only
@pytest.mark.parametrize("name", ["tiny", "small"])
def test_loads_offline_through_from_pretrained(name, tiny_dir, small_dir):
    path = {"tiny": tiny_dir, "small": small_dir}[name]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", LOAD_OFFLINE, str(path)], env=env, capture_output=True, text=True, check=True
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["eos"] == result["tok_eos"]
    assert result["context"] == BUILTIN_MODELS[name].context_length
    # Trained on the corpus: a Chinese prompt continues in clean Chinese, not in random bytes.
    text = result["text"]
    assert len(text) >= 5 and "\ufffd" not in text
    assert sum("\u4e00" <= ch <= "\u9fff" for ch in text) >= len(text) // 2


def test_both_models_share_one_tokenizer(tiny_dir, small_dir):
    assert (tiny_dir / "tokenizer.json").read_bytes() == (small_dir / "tokenizer.json").read_bytes()


def test_tiny_is_smaller_than_small(tiny_dir, small_dir):
    tiny, small = (json.loads((d / "builtin.json").read_text()) for d in (tiny_dir, small_dir))
    assert tiny["parameters"] < small["parameters"]
    assert tiny["spec"]["context_length"] < small["spec"]["context_length"]


def test_special_tokens_in_config_and_generation_config(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    config = json.loads((tiny_dir / "config.json").read_text())
    generation = json.loads((tiny_dir / "generation_config.json").read_text())
    expected = {
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
    }
    assert len(set(expected.values())) == 3
    for key, value in expected.items():
        assert config[key] == generation[key] == value


def test_chat_template(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    messages = [
        {"role": "system", "content": "You are brief."},
        {"role": "user", "content": "你好 👋"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Again?"},
    ]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|bos|><|system|>You are brief.<|eos|><|user|>你好 👋<|eos|>"
        "<|assistant|>Hello.<|eos|><|user|>Again?<|eos|><|assistant|>"
    )
    ids = tok.apply_chat_template(messages, add_generation_prompt=True)["input_ids"]
    assert ids[0] == tok.bos_token_id and ids[-1] == tok.convert_tokens_to_ids("<|assistant|>")
    assert not tok.apply_chat_template(messages, tokenize=False).endswith("<|assistant|>")
    with pytest.raises(Exception, match="role"):
        tok.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


@pytest.mark.slow  # starts a process or loads a model: the full suite only
def test_concurrent_resolves_build_once_and_atomically(tmp_path, monkeypatch):
    monkeypatch.setenv("VARIANT_SERVE_CACHE", str(tmp_path))
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(resolve_model("builtin:tiny"))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and len(set(results)) == 1
    entries = sorted(p.name for p in (tmp_path / "builtin").iterdir())
    assert [e for e in entries if not e.endswith(".lock")] == [Path(results[0]).name]  # no temp dirs left
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in Path(results[0]).iterdir()}


@pytest.mark.slow  # starts a process or loads a model: the full suite only
def test_generation_is_deterministic(tmp_path, monkeypatch):
    builds = []
    for run in ("a", "b"):
        monkeypatch.setenv("VARIANT_SERVE_CACHE", str(tmp_path / run))
        builds.append(Path(resolve_model("builtin:tiny")))
    assert builds[0].name == builds[1].name  # same cache key
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (builds[0] / name).read_bytes() == (builds[1] / name).read_bytes(), name


def test_cache_key_changes_with_the_spec(monkeypatch):
    before = builtin.builtin_dir("tiny")
    changed = {
        **BUILTIN_MODELS,
        "tiny": BUILTIN_MODELS["tiny"].__class__(**{**BUILTIN_MODELS["tiny"].__dict__, "seed": 1}),
    }
    monkeypatch.setattr(builtin, "BUILTIN_MODELS", changed)
    assert builtin.builtin_dir("tiny") != before
