import json
import sys
from pathlib import Path

from bench import engine_server
from bench.engine_server import EngineServerSettings, generation_config_json, serve_command
from engines.protocol import SamplingParams
from traffic.workload import RequestSpec, Slo

SETTINGS = EngineServerSettings(
    model_dir="/models/m", device="cpu", dtype="float32", page_size=16, num_blocks=64, max_batch_tokens=256, port=1234
)


def test_command_pins_the_model_and_the_engine_settings():
    command = serve_command(SETTINGS)
    assert Path(command[0]).name == "transformers"
    assert command[1:3] == ["serve", "--continuous-batching"]
    assert command[-1] == "/models/m"
    flags = dict(zip(command[3:-1:2], command[4:-1:2], strict=True))
    assert flags["--device"] == "cpu"
    assert flags["--dtype"] == "float32"
    assert flags["--port"] == "1234"
    assert flags["--cb-block-size"] == "16"
    assert flags["--cb-num-blocks"] == "64"
    assert flags["--cb-max-batch-tokens"] == "256"


def test_unset_cache_settings_are_left_to_transformers():
    command = serve_command(SETTINGS.model_copy(update={"num_blocks": None, "max_batch_tokens": None}))
    assert "--cb-num-blocks" not in command
    assert "--cb-max-batch-tokens" not in command


def test_requests_carry_no_unknown_fields_and_no_eos():
    target = engine_server.target("http://127.0.0.1:1234", SETTINGS, SamplingParams(temperature=0.5, top_k=0))
    body = target.body(RequestSpec(0, None, "some text", 2, 7, Slo()))
    assert "ignore_eos" not in body  # transformers serve answers 422 to fields it does not know
    assert body["model"] == "/models/m"  # the pinned directory, or it refuses the request
    assert body["prompt"] == "some text"
    config = json.loads(body["generation_config"])
    assert config["eos_token_id"] == -1  # outputs run to max_tokens
    assert config["temperature"] == 0.5
    assert config["top_k"] is None  # OpenAI's "no top-k" (0) is transformers' None
    assert json.loads(generation_config_json(SamplingParams(top_k=5)))["top_k"] == 5


def test_reason_names_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # an interpreter with no scripts beside it
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "nor on PATH" in (engine_server.unavailable_reason() or "")
