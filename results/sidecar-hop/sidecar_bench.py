"""The sidecar hop through the stack: bench overhead's load and CPU accounting (bench/overhead.py _Run), with the
stack's one variant on the openai_server backend, its engine server either `transformers serve` (the stand-in for
trtllm-serve: same builtin model, same KV settings as bench overhead's engine_server path) or the fake trtllm-serve
(tests/engines/fakes/trtllm_serve.py, a scripted model at a TensorRT-LLM-like rate) with a given stream_interval.

  python results/sidecar-hop/sidecar_bench.py --sidecar transformers --json out.json
  python results/sidecar-hop/sidecar_bench.py --sidecar fake-trtllm --stream-interval 4
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[3]  # the repository
sys.path.insert(0, str(ROOT))

from bench import engine_server, overhead  # noqa: E402
from bench.client import TargetConfig  # noqa: E402
from bench.local_serve import local_serve  # noqa: E402
from bench.overhead_results import LOAD_GENERATOR  # noqa: E402
from engines.config import DEFAULT_LLM_API_OPTIONS, CoalesceConfig, OpenAIServerEngineConfig  # noqa: E402
from engines.ports import free_port  # noqa: E402

FAKE = ROOT / "tests/engines/fakes/trtllm_serve.py"


def endless(model_dir: str, into: Path) -> Path:
    """The model with no reachable end-of-sequence id (transformers serve refuses ignore_eos)."""
    target = into / "endless"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(model_dir, target)
    config = json.loads((target / "config.json").read_text())
    never = config["vocab_size"] + 1000
    config["eos_token_id"] = never
    (target / "config.json").write_text(json.dumps(config))
    gen = target / "generation_config.json"
    settings = json.loads(gen.read_text()) if gen.exists() else {}
    settings["eos_token_id"] = never
    gen.write_text(json.dumps(settings))
    return target


@contextlib.contextmanager
def fake_server(argv, port, log_path, env):
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **env}
        )
    # bench.process_cpu names a process by its command line: the fake's would be "other" (as HAProxy's are).
    original = overhead.cpu_by_role

    def by_role(pid=None):
        totals = original(pid)
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(process.pid).cpu_times()
            spent = times.user + times.system
            totals["other"] = totals.get("other", 0.0) - spent
            totals["engine_server"] = totals.get("engine_server", 0.0) + spent
        return totals

    overhead.cpu_by_role = by_role
    try:
        for _ in range(600):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            if process.poll() is not None:
                raise RuntimeError(log_path.read_text()[-2000:])
            time.sleep(0.2)
        yield
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)


def main() -> int:
    mine = argparse.ArgumentParser()
    mine.add_argument("--sidecar", choices=["transformers", "fake-trtllm"], required=True)
    mine.add_argument("--stream-interval", type=int, default=1)
    mine.add_argument("--step-ms", type=float, default=5.0, help="the fake's decode step per stream")
    mine.add_argument("--json", type=Path, default=None)
    mine.add_argument("--work", type=Path, default=Path("/tmp/sidecar-hop-work"))
    known, rest = mine.parse_known_args()
    parser = argparse.ArgumentParser()
    overhead.add_parser(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["overhead", "--model", "builtin:tiny", *rest])
    run = overhead._Run(args)
    known.work.mkdir(parents=True, exist_ok=True)
    hf = run.engine
    common = {"coalesce": CoalesceConfig(), "startup_timeout_s": 300}
    # The engine server is started here and reached by url: a managed sidecar with tensor_parallel_size 1 asks the
    # replica for a GPU (VariantConfig), and this machine has none. As this process's child its CPU is counted.
    port = free_port()
    log = known.work / f"server-{known.sidecar}.log"
    if known.sidecar == "transformers":
        model = endless(run.model_dir, known.work)
        settings = engine_server.EngineServerSettings(
            model_dir=str(model),
            device="cpu",
            dtype="float32",
            page_size=hf.page_size,
            num_blocks=hf.num_blocks,
            max_batch_tokens=hf.max_batch_tokens,
            port=port,
        )
        server = engine_server.running_server(settings, log)
        engine = OpenAIServerEngineConfig(
            model=str(model),
            url=f"http://127.0.0.1:{port}",
            prompt_format="text",
            max_batch_size=hf.max_running_requests,  # its batch slots (it has no /metrics): else the router sheds
            **common,
        )
        ignore_eos = False
        os.environ["OMP_NUM_THREADS"] = str(hf.num_threads)
    else:
        options = known.work / "llm_api_options.yaml"
        options.write_text(json.dumps({**DEFAULT_LLM_API_OPTIONS, "stream_interval": known.stream_interval}))
        argv = [
            sys.executable,
            str(FAKE),
            "serve",
            "/models/fake",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max_batch_size",
            "256",
            "--extra_llm_api_options",
            str(options),
        ]
        server = fake_server(argv, port, log, {"FAKE_TRTLLM_STEP_S": str(known.step_ms / 1000)})
        engine = OpenAIServerEngineConfig(
            model="/models/fake",
            url=f"http://127.0.0.1:{port}",
            max_seq_len=4096,
            sampling_extensions=True,
            max_batch_size=256,
            **common,
        )
        ignore_eos = True
    from ray import serve

    from serve_app.app import build_app

    app_args = overhead.stack_app_args(
        engine, device="cpu", max_tokens=run.max_tokens, max_concurrency=max(run.concurrency)
    )
    app_args["tokenizer"] = run.model_dir
    name = f"sidecar-{known.sidecar}"
    with server, local_serve("sidecar-bench", env=run.serve_env) as url:
        serve.run(build_app(app_args), name=name, route_prefix="/")
        target = TargetConfig(
            url=url,
            model="bench",
            ignore_eos=ignore_eos,
            request_timeout_s=args.request_timeout_s,
            extra_body={"temperature": overhead.SAMPLING.temperature, "top_p": overhead.SAMPLING.top_p},
        )
        levels = run.http_levels(name, target, as_text=False)
    out = {}
    for c, level in levels.items():
        roles = {
            r: round(level.cpu_ms_per_token(r) or 0, 3) for r in sorted(level.cpu_s, key=lambda r: -level.cpu_s[r])
        }
        out[c] = {
            "tokens_per_s": round(level.tokens_per_s, 1),
            "ttft_p50_ms": level.ttft_p50_ms,
            "tokens_per_message": level.tokens_per_message,
            "serving_cpu_ms_per_token": round(level.cpu_ms_per_token() or 0, 3),
            "cpu_ms_per_token_by_role": roles,
            "errors": level.errors,
        }
        print(c, json.dumps(out[c]), flush=True)
    if known.json:
        known.json.write_text(
            json.dumps(
                {
                    "sidecar": known.sidecar,
                    "stream_interval": known.stream_interval,
                    "args": rest,
                    "load_generator_role": LOAD_GENERATOR,
                    "levels": out,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
