"""A fake ``trtllm-serve``: the command line, routes and behaviours of TensorRT-LLM 1.x's OpenAI server that the
``openai_server`` backend depends on, with a scripted stand-in for the model. Not the real server.

Run as ``python trtllm_serve.py serve MODEL --host H --port P ...`` (the tests put it behind an executable named
``trtllm-serve``). Faithful where our adapter depends on it, each from the TensorRT-LLM source:

* flags as ``tensorrt_llm/commands/serve.py`` declares them (``--max_seq_len`` etc. are ``type=int``: an empty
  value exits at start with status 2, as click does); ``--extra_llm_api_options`` / ``--config`` is a YAML whose
  keys override the flags (``update_llm_args_with_extra_dict``);
* the PyTorch backend without chunked prefill refuses a prompt above ``max_num_tokens`` with TensorRT-LLM's
  message, answered as a 400 ``ErrorResponse`` (llm.py ``_check_arguments``; openai_server.py
  ``create_error_response``);
* ``GET /metrics`` is ``[]`` unless ``enable_iter_perf_stats`` (py_executor ``get_latest_iteration_stats``) and
  before the first request; otherwise it reads entries until ``FAKE_TRTLLM_STATS_QUIET_S`` (2 s, as
  ``get_stats_async(2)``) pass without a new one, so it does not answer while requests keep running;
* a stop string matched by the executor (``FinishReason.STOP_WORDS``) truncates the token ids only: its earlier
  characters were already streamed, and the finishing chunk carries ``stop_reason`` (result.py
  ``_handle_sequence``, postprocess_handlers.py);
* usage only with ``stream_options`` (per chunk with ``continuous_usage_stats``, then a usage-only chunk);
* ``response_format`` (openai_protocol.py ``ResponseFormat``: text / json + schema / json_schema / json_object /
  regex; another type is a 400) is enforced only with ``guided_decoding_backend`` in the LLM API options: then the
  "model" writes the smallest JSON the schema allows (``{}`` for json_object, ``FAKE_TRTLLM_GUIDED_TEXT`` for a
  regex); without it the guide is dropped and the script comes out, as an engine without a guided decoder does;
* ``stream_interval`` (a TorchLlmArgs field, so only in the YAML; trtllm-serve has no flag for it): a request's
  response goes out at its first decoding iteration, when it finishes, and every ``stream_interval``-th
  iteration, carrying every token since the last (py_executor.py ``_handle_responses``: ``py_decoding_iter == 1
  or is_finished or py_decoding_iter % stream_interval == 0``); ``--backend tensorrt`` refuses the key;
* ``FAKE_TRTLLM_FINISH_AFTER`` / ``FAKE_TRTLLM_FINISH_REASON`` end every request after N tokens with that reason
  (e.g. ``timeout``);
* prefix reuse and KV cache events (fake_kv_cache.py, from ``kv_cache_config`` in the YAML: ``tokens_per_block``,
  ``event_buffer_max_size``, ``enable_block_reuse``; ``FAKE_TRTLLM_KV_BLOCKS`` is the cache's capacity). ``POST
  /kv_cache_events`` as serve/openai_server.py ``get_kv_cache_events``: a JSON list of the events read until
  ``FAKE_TRTLLM_KV_EVENTS_QUIET_S`` (2 s, as ``get_kv_cache_events_async(2)``) pass without a new one; before the
  first request a 500 (``aget_kv_events`` asserts); once a read timed out, ``[]`` at once until the next request
  (``IterationResult`` stays done until ``mark_undone``);
* usage carries ``prompt_tokens_details.cached_tokens`` (newer builds, postprocess_handlers.py, from
  ``RequestOutput.cached_tokens``); ``FAKE_TRTLLM_NO_CACHED_TOKENS=1`` leaves it out, as older builds do.

``GET /fake/state`` reports what the tests check (the last request body, the most /metrics and /kv_cache_events
handlers at once).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

import uvicorn
import yaml
from fake_guides import minimal_instance
from fake_kv_cache import FakeKvCache
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

SCRIPT = "Hello, world! This is a fake completion."
STEP_S = float(os.environ.get("FAKE_TRTLLM_STEP_S", "0.005"))
STATS_QUIET_S = float(os.environ.get("FAKE_TRTLLM_STATS_QUIET_S", "2"))
FINISH_AFTER = int(os.environ.get("FAKE_TRTLLM_FINISH_AFTER", "0"))
FINISH_REASON = os.environ.get("FAKE_TRTLLM_FINISH_REASON", "timeout")
GUIDED_TEXT = os.environ.get("FAKE_TRTLLM_GUIDED_TEXT", "")
KV_BLOCKS = int(os.environ.get("FAKE_TRTLLM_KV_BLOCKS", "1000"))
KV_EVENTS_QUIET_S = float(os.environ.get("FAKE_TRTLLM_KV_EVENTS_QUIET_S", "2"))
CACHED_TOKENS = os.environ.get("FAKE_TRTLLM_NO_CACHED_TOKENS") != "1"
RESPONSE_FORMATS = ("text", "json", "json_schema", "json_object", "regex", "ebnf", "structural_tag")


def parse_args(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="trtllm-serve")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--host", default="localhost")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--backend", default="pytorch", choices=["pytorch", "tensorrt", "trt", "_autodeploy"])
    parser.add_argument("--tp_size", "--tensor_parallel_size", type=int, default=1)
    parser.add_argument("--max_batch_size", type=int, default=2048)
    parser.add_argument("--max_num_tokens", type=int, default=8192)
    parser.add_argument("--max_seq_len", type=int, default=None)
    parser.add_argument("--kv_cache_free_gpu_memory_fraction", "--free_gpu_memory_fraction", type=float, default=0.9)
    parser.add_argument("--enable_chunked_prefill", action="store_true")
    parser.add_argument("--extra_llm_api_options", "--config", default=None)
    args = vars(parser.parse_args(argv))
    if args["extra_llm_api_options"]:
        with open(args["extra_llm_api_options"]) as f:
            extra = yaml.safe_load(f) or {}
        if args["backend"] in ("tensorrt", "trt") and "stream_interval" in extra:
            # TrtLlmArgs has no such field, and the LLM API's argument models forbid unknown ones.
            sys.exit("trtllm-serve: stream_interval is not an argument of the TensorRT backend")
        args.update(extra)
    args.setdefault("enable_iter_perf_stats", False)
    args.setdefault("stream_interval", 1)
    return args


class FakeServer:
    def __init__(self, args: dict[str, Any]) -> None:
        self.args = args
        self.live = 0
        self.iteration = 0
        self.submitted = 0
        self.stats: asyncio.Queue = asyncio.Queue()
        self.metrics_handlers = 0
        self.state: dict[str, Any] = {
            "max_concurrent_metrics": 0,
            "last_body": None,
            "metrics_calls": 0,
            "max_concurrent_kv_events": 0,
            "kv_events_calls": 0,
        }
        kv = args.get("kv_cache_config") or {}
        self.kv_cache = FakeKvCache(
            tokens_per_block=kv.get("tokens_per_block", 32),
            capacity_blocks=KV_BLOCKS,
            event_buffer_max_size=kv.get("event_buffer_max_size", 0),
            enable_block_reuse=kv.get("enable_block_reuse", True),
        )
        self.kv_events: list[dict[str, Any]] = self.kv_cache.take_events()  # the cache's creation
        self.kv_arrived = asyncio.Event()
        self.kv_done = False  # a read timed out: [] until the next request
        self.kv_handlers = 0

    def _record_iteration(self) -> None:
        self.iteration += 1
        if self.args["enable_iter_perf_stats"] and self.args["backend"] == "pytorch":
            self.stats.put_nowait(
                {
                    "iter": self.iteration,
                    "numActiveRequests": self.live,
                    "numQueuedRequests": 0,
                    "maxNumActiveRequests": self.args["max_batch_size"],
                    "kvCacheStats": {"maxNumBlocks": 1000, "usedNumBlocks": self.live, "tokensPerBlock": 32},
                }
            )

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": self.args["model"], "object": "model"}]})

    async def fake_state(self, request: Request) -> Response:
        return JSONResponse(self.state)

    async def metrics(self, request: Request) -> Response:
        self.state["metrics_calls"] += 1
        self.metrics_handlers += 1
        self.state["max_concurrent_metrics"] = max(self.state["max_concurrent_metrics"], self.metrics_handlers)
        try:
            entries = []
            if self.submitted:  # before the first request: an empty iterable at once (llm.py get_stats_async)
                while True:
                    try:
                        entries.append(await asyncio.wait_for(self.stats.get(), STATS_QUIET_S))
                    except TimeoutError:
                        break
            return JSONResponse(entries)
        finally:
            self.metrics_handlers -= 1

    async def kv_cache_events(self, request: Request) -> Response:
        self.state["kv_events_calls"] += 1
        self.kv_handlers += 1
        self.state["max_concurrent_kv_events"] = max(self.state["max_concurrent_kv_events"], self.kv_handlers)
        try:
            if not self.submitted:
                return Response("Internal Server Error", status_code=500)  # AssertionError in aget_kv_events
            events: list[dict[str, Any]] = []
            while not self.kv_done:
                if self.kv_events:
                    events.append(self.kv_events.pop(0))
                    continue
                self.kv_arrived.clear()
                try:
                    await asyncio.wait_for(self.kv_arrived.wait(), KV_EVENTS_QUIET_S)
                except TimeoutError:
                    self.kv_done = True
            return JSONResponse(events)
        finally:
            self.kv_handlers -= 1

    def _prefilled(self, prompt: list[int]) -> int:
        """The context's reuse, then its blocks stored (fake_kv_cache.py); the prompt tokens it reused."""
        cached = self.kv_cache.reused_tokens(prompt)
        self.kv_cache.store(prompt)
        events = self.kv_cache.take_events()
        if events:
            self.kv_events.extend(events)
            self.kv_arrived.set()
        return cached

    async def completions(self, request: Request) -> Response:
        body = await request.json()
        self.state["last_body"] = body
        prompt = body["prompt"]
        limit = self.args["max_num_tokens"]
        if self.args["backend"] == "pytorch" and not self.args["enable_chunked_prefill"] and len(prompt) > limit:
            message = (
                f"The sum of prompt length ({float(len(prompt))}), query length (0) should not exceed "
                f"max_num_tokens ({limit})"
            )
            error = {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}
            return JSONResponse(error, status_code=400)
        fmt = body.get("response_format")
        if fmt is not None and fmt.get("type") not in RESPONSE_FORMATS:
            error = {"object": "error", "message": f"bad response_format {fmt}", "type": "BadRequestError", "code": 400}
            return JSONResponse(error, status_code=400)
        self.submitted += 1
        self.kv_done = False  # mark_undone: "expect more ... whenever new prompts are submitted"
        return StreamingResponse(self._stream(body, self._script(fmt)), media_type="text/event-stream")

    def _script(self, fmt: dict[str, Any] | None) -> str:
        """What the "model" writes: the script, or under an enforced guide the smallest text it allows."""
        if not fmt or fmt["type"] == "text" or not self.args.get("guided_decoding_backend"):
            return SCRIPT
        if fmt["type"] == "json":
            return json.dumps(minimal_instance(fmt["schema"]))
        if fmt["type"] == "json_schema":  # newer builds unwrap OpenAI's {"name", "schema"}
            return json.dumps(minimal_instance(fmt["json_schema"].get("schema", fmt["json_schema"])))
        return "{}" if fmt["type"] == "json_object" else GUIDED_TEXT

    async def _stream(self, body: dict[str, Any], script: str):
        stops = body.get("stop") or []
        stops = [stops] if isinstance(stops, str) else stops
        options = body.get("stream_options") or {}
        continuous = options.get("include_usage") and options.get("continuous_usage_stats")
        text, pending, n = "", "", 0
        prompt = body["prompt"]
        prompt_ids = [ord(c) for c in prompt] if isinstance(prompt, str) else list(prompt)
        usage_details: dict[str, Any] | None = None  # set by the first iteration (the prefill)
        self.live += 1
        try:
            while True:
                await asyncio.sleep(STEP_S)
                self._record_iteration()
                if usage_details is None:
                    cached = self._prefilled(prompt_ids)
                    usage_details = {"prompt_tokens_details": {"cached_tokens": cached}} if CACHED_TOKENS else {}
                if n >= len(script) and not body.get("ignore_eos"):
                    finish, stop_reason = "stop", None  # the end id: not decoded
                else:
                    char = script[n % len(script)]
                    n += 1
                    finish, stop_reason = None, None
                    hit = next((s for s in stops if (text + pending + char).endswith(s)), None)
                    if hit is not None:
                        # STOP_WORDS: the ids of the stop word's last token are truncated; the earlier characters
                        # of a multi-token stop word have been decoded and streamed already.
                        finish, stop_reason = "stop", hit
                    else:
                        pending += char
                        if FINISH_AFTER and n >= FINISH_AFTER:
                            finish = FINISH_REASON
                        elif n >= body["max_tokens"]:
                            finish = "length"
                if finish is None and n != 1 and n % self.args["stream_interval"] != 0:
                    continue  # not a response iteration (see the module docstring)
                text += pending
                choice = {"index": 0, "text": pending, "finish_reason": finish, "stop_reason": stop_reason}
                if body.get("logprobs") is not None:  # create_completion_logprobs: one entry per token of the chunk
                    k = body["logprobs"]
                    choice["logprobs"] = {
                        "tokens": list(pending),
                        "token_logprobs": [-0.25] * len(pending),
                        "top_logprobs": [dict(list({c: -0.25, "~": -3.0}.items())[:k]) for c in pending],
                        "text_offset": [len(text) - len(pending) + i for i in range(len(pending))],
                    }
                chunk: dict[str, Any] = {"object": "text_completion", "choices": [choice]}
                if continuous:
                    chunk["usage"] = {
                        "prompt_tokens": len(body["prompt"]),
                        "completion_tokens": n,
                        **(usage_details or {}),
                    }
                pending = ""
                yield f"data: {json.dumps(chunk)}\n\n"
                if finish is not None:
                    break
            if options.get("include_usage"):
                usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n, **(usage_details or {})}
                yield f"data: {json.dumps({'object': 'text_completion', 'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            self.live -= 1


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    server = FakeServer(args)
    app = Starlette(
        routes=[
            Route("/health", server.health),
            Route("/v1/models", server.models),
            Route("/metrics", server.metrics),
            Route("/fake/state", server.fake_state),
            Route("/kv_cache_events", server.kv_cache_events, methods=["POST"]),
            Route("/v1/completions", server.completions, methods=["POST"]),
        ]
    )
    uvicorn.run(app, host=args["host"], port=args["port"], log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
