"""Prompt tokens an engine behind an API has accepted and not yet prefilled: its ``queued_prompt_tokens``.

The in-process engines count them from their own scheduler (engines/batching.py, engines/hf.py). TensorRT-LLM's
LLM API and trtllm-serve report no such figure, but the adapter sees each request's prompt go in and its first
output come back, and a request's prompt is prefilled by the time its first token exists. The request routers
rank an engine's replicas by this figure when several ingress replicas share them (router/replica_backlog.py).
"""

from __future__ import annotations


class UnprefilledPrompts:
    """The prompt tokens of the requests with no output yet, by request id: ``add`` at submission, ``done`` at
    the first output and again at the end (a second ``done`` is a no-op)."""

    def __init__(self) -> None:
        self._tokens: dict[str, int] = {}
        self.total = 0

    def add(self, request_id: str, prompt_tokens: int) -> None:
        self.done(request_id)  # the same id twice (a retry) counts once
        self._tokens[request_id] = prompt_tokens
        self.total += prompt_tokens

    def done(self, request_id: str) -> None:
        self.total -= self._tokens.pop(request_id, 0)
