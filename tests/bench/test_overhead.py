import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import build_parser
from bench.overhead import engine_config, num_requests, stack_app_args
from bench.overhead_results import PATHS
from serve_app.config import load_app_config

REPO = Path(__file__).resolve().parents[2]


def test_requests_per_level():
    assert num_requests([1, 16, 64], None, quick=False) == {1: 8, 16: 128, 64: 512}
    assert num_requests([1, 16, 64], None, quick=True) == {1: 4, 16: 16, 64: 64}
    assert num_requests([1, 16], 3, quick=False) == {1: 3, 16: 3}


def test_defaults_and_paths_on_the_command_line():
    args = build_parser().parse_args(["overhead", "--quick", "--json", "out.json"])
    assert args.model == "builtin:tiny"
    assert args.paths == list(PATHS)
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


def test_engine_process_and_ingress_replicas_flags_reach_the_stack_app():
    args = build_parser().parse_args(["overhead", "--engine-process", "--ingress-replicas", "2"])
    assert (args.engine_process, args.ingress_replicas) == (True, 2)
    assert build_parser().parse_args(["overhead"]).ingress_replicas == 1
    engine = engine_config("/m", "cuda", threads=None, max_running=64, context_length=1024)
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
    assert list(data["paths"]) == list(PATHS)
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
    for name in ("direct", "naive_serve", "stack"):
        level = data["paths"][name]["levels"]["2"]
        assert (level["errors"], level["output_tokens"]) == (0, 18), name
    direct = data["paths"]["direct"]["levels"]["2"]
    assert direct["profile"]["tpot_p50_ms"] > 0 and direct["emulation_us_per_token"] > 0
    assert "against its profile" in (tmp_path / "report" / "report.md").read_text()
