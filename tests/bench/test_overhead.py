import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import sidecar
from bench.__main__ import build_parser
from bench.overhead import OUTPUT_SPREAD, engine_config, num_requests, stack_app_args
from bench.overhead_results import DEFAULT_PATHS, PATHS
from bench.prompt_pairs import output_lengths
from engines.config import CoalesceConfig
from engines.model_ref import resolve_model
from serve_app.config import load_app_config

REPO = Path(__file__).resolve().parents[2]


def test_requests_per_level():
    assert num_requests([1, 16, 64], None, quick=False) == {1: 8, 16: 128, 64: 512}
    assert num_requests([1, 16, 64], None, quick=True) == {1: 8, 16: 128, 64: 512}
    assert num_requests([1, 16], 3, quick=False) == {1: 3, 16: 3}


def test_defaults_and_paths_on_the_command_line():
    args = build_parser().parse_args(["overhead", "--quick", "--json", "out.json"])
    assert args.model == "builtin:tiny"
    assert args.paths == list(DEFAULT_PATHS) == [p for p in PATHS if p != "sidecar"]  # the sidecar when asked
    assert args.concurrency is None  # the run applies (1, 16, 64)
    args = build_parser().parse_args(["overhead", "--concurrency", "1", "256", "--paths", "direct", "stack"])
    assert args.concurrency == [1, 256]
    assert args.paths == ["direct", "stack"]


def test_cpu_engine_config_is_explicit_so_every_path_gets_the_same():
    config = engine_config("/m", "cpu", threads=None, max_running=64, context_length=1024)
    assert config.num_threads == len(os.sched_getaffinity(0))  # not Ray's one OpenMP thread per replica
    assert config.max_running_requests == 64
    assert config.num_blocks == 64 * 1024 // config.page_size
    assert config.max_batch_tokens == 256
    gpu = engine_config("/m", "cuda", threads=None, max_running=256, context_length=8192)
    assert (gpu.device, gpu.num_blocks, gpu.max_batch_tokens, gpu.num_threads) == ("cuda", None, None, None)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_stack_args_are_a_valid_one_variant_app(device):
    engine = engine_config("/m", device, threads=2, max_running=256, context_length=1024)
    config = load_app_config(stack_app_args(engine, device=device, max_tokens=128, max_concurrency=256))
    (variant,) = config.variants
    assert variant.engine == engine
    assert variant.engine.coalesce.interval_ms > 0  # the stack keeps its default coalescing
    assert variant.max_ongoing_requests >= 256  # Serve must not queue the streams in front of the engine
    assert variant.resources.num_gpus == (1 if device == "cuda" else 0)
    assert config.ingress.max_ongoing_requests >= 256
    assert config.router.shed_ttft_ratio is None  # every path serves every request: no admission control


def test_engine_process_and_ingress_replicas_flags_reach_the_stack_app():
    args = build_parser().parse_args(["overhead", "--engine-process", "--ingress-replicas", "2"])
    assert (args.engine_process, args.ingress_replicas) == (True, 2)
    assert build_parser().parse_args(["overhead"]).ingress_replicas == 1
    assert build_parser().parse_args(["overhead", "--no-engine-process"]).engine_process is False
    assert build_parser().parse_args(["overhead"]).engine_process is None  # the config's default for the stack
    engine = engine_config("/m", "cuda", threads=None, max_running=64, context_length=1024)
    assert engine.engine_process is False  # the engine alone runs in the bench's process
    engine = engine.model_copy(update={"engine_process": True})
    app = stack_app_args(engine, device="cuda", max_tokens=128, max_concurrency=64, ingress_replicas=2)
    config = load_app_config(app)
    assert config.ingress.num_replicas == 2
    assert config.variants[0].engine.engine_process is True


@pytest.mark.serve
def test_quick_end_to_end(tmp_path):
    """All four paths, one level, a few requests: a JSON with every path measured (no timing asserted).

    A subprocess: the command starts and stops its own Ray cluster, which must not meet the test session's.
    """
    out = tmp_path / "out.json"
    command = [
        sys.executable, "-m", "bench", "overhead", "--quick", "--concurrency", "2", "--num-requests", "3",
        "--max-tokens", "6", "--prompt-tokens", "8", "--json", str(out), "--out", str(tmp_path / "report"),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(out.read_text())
    assert list(data["paths"]) == list(DEFAULT_PATHS)
    for name, path in data["paths"].items():
        assert path["skipped"] is None, (name, path["skipped"])
        level = path["levels"]["2"]
        assert level["requests"] == 3
        assert level["errors"] == 0
        assert level["tokens_per_s"] > 0
        assert level["ttft_p50_ms"] is not None
    assert data["paths"]["stack"]["levels"]["2"]["ratio_vs_direct"] > 0
    assert (tmp_path / "report" / "report.md").is_file()
    assert len(list((tmp_path / "report" / "records").glob("*.jsonl"))) == 4
    assert "stack" in done.stdout and "vs direct" in done.stdout


@pytest.mark.serve
def test_an_emulated_engine_runs_every_path_but_the_engine_server_and_is_held_against_its_profile(tmp_path):
    """--model emulated:<preset>: the direct path carries the profile's figures and the emulation's own CPU."""
    out = tmp_path / "out.json"
    command = [
        sys.executable, "-m", "bench", "overhead", "--model", "emulated:cpu-builtin-tiny", "--concurrency", "2",
        "--num-requests", "3", "--max-tokens", "6", "--prompt-tokens", "8", "--json", str(out),
        "--out", str(tmp_path / "report"),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(out.read_text())
    assert "emulated engine has no server" in data["paths"]["engine_server"]["skipped"]
    lengths = output_lengths(3, 6, staggered=2, spread=OUTPUT_SPREAD)
    assert lengths[:2] == [3, 6] and 4 <= lengths[2] <= 8
    for name in ("direct", "naive_serve", "stack"):
        level = data["paths"][name]["levels"]["2"]
        # Staggered arrivals (the default): the first round asks for 3 and 6 tokens, the third request for 6 within
        # the default spread, the same on every path.
        assert (level["errors"], level["output_tokens"]) == (0, sum(lengths)), name
    direct = data["paths"]["direct"]["levels"]["2"]
    assert direct["profile"]["tpot_p50_ms"] > 0 and direct["emulation_us_per_token"] > 0
    # The engine's own step at p99, which the message gap is judged against: at least its decode step, at most
    # a prefill's (an 8-token prompt) on top of it.
    decode_step = direct["profile"]["tpot_p50_ms"]
    assert 0.5 * decode_step <= direct["engine_step_p99_ms"] <= 10 * decode_step
    report = (tmp_path / "report" / "report.md").read_text()
    assert "against its profile" in report and "step p99 ms" in report


@pytest.mark.parametrize("kind", sidecar.ENGINE_SERVERS)
def test_the_sidecar_variant_is_a_valid_one_variant_app_on_the_openai_server_backend(kind):
    engine = sidecar.sidecar_engine(
        kind, "http://127.0.0.1:8123", model_dir="/m", coalesce=CoalesceConfig(interval_ms=20), batch_slots=64
    )
    config = load_app_config(stack_app_args(engine, device="cpu", max_tokens=64, max_concurrency=64))
    (variant,) = config.variants
    assert variant.engine.backend == "openai_server" and variant.engine.url == "http://127.0.0.1:8123"
    assert variant.engine.coalesce.interval_ms == 20
    assert variant.engine.max_batch_size == (64 if kind == "transformers" else sidecar.FAKE_BATCH_SLOTS)
    assert variant.resources.num_gpus == 0  # the server is started beside the cluster, not by the replica
    # transformers serve: text prompts, standard fields only; the fake: ids and trtllm-serve's extensions.
    assert (variant.engine.prompt_format, variant.engine.sampling_extensions) == (
        ("text", False) if kind == "transformers" else ("token_ids", True)
    )


def test_the_sidecars_model_copy_never_ends(tmp_path):
    model = resolve_model("builtin:tiny")
    copy = sidecar.endless_copy(model, tmp_path)
    config = json.loads((copy / "config.json").read_text())
    assert config["eos_token_id"] >= config["vocab_size"]
    assert json.loads((copy / "generation_config.json").read_text())["eos_token_id"] == config["eos_token_id"]
    assert json.loads((Path(model) / "config.json").read_text())["eos_token_id"] < config["vocab_size"]


@pytest.mark.serve
@pytest.mark.parametrize("kind", sidecar.ENGINE_SERVERS)
def test_the_sidecar_path_relays_the_engine_server_through_the_stack(tmp_path, kind):
    """--paths engine_server sidecar: the same server alone and behind an openai_server variant, every output as long
    as asked, the server's CPU and the relay's in their own roles. The fake at stream_interval 4 sends a 6-token
    output in 3 events (iterations 1, 4 and the last), which the load generator sees talking to the fake directly."""
    out = tmp_path / "out.json"
    command = [
        sys.executable, "-m", "bench", "overhead", "--paths", "engine_server", "sidecar", "--engine-server", kind,
        "--stream-interval", "4", "--concurrency", "2", "--num-requests", "3", "--max-tokens", "6",
        "--prompt-tokens", "8", "--arrivals", "lockstep", "--json", str(out),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(out.read_text())
    assert list(data["paths"]) == ["engine_server", "sidecar"]
    levels = {}
    for name, path in data["paths"].items():
        assert path["skipped"] is None, (name, path["skipped"])
        levels[name] = path["levels"]["2"]
        assert (levels[name]["errors"], levels[name]["requests"]) == (0, 3), name
    # The same requests, every output as long as asked, alone and through the relay.
    assert 0 < levels["sidecar"]["output_tokens"] == levels["engine_server"]["output_tokens"] <= 18
    # The relay's roles always work enough to show; the server's CPU over 18 tokens can stay under what the
    # readings keep (5 ms; the kernel counts in 10 ms ticks), and its role's name is tested in test_process_cpu.
    assert {"variant-engine", "Ingress"} <= set(levels["sidecar"]["cpu_s"]), levels["sidecar"]
    if kind == "fake-trtllm":  # one event per token at interval 1; fewer at 4
        assert levels["engine_server"]["tokens_per_message"] > 1.0
