"""The legacy compiled-engine backend's LLM (tensorrt_llm/_tensorrt_engine: still on main in 2026, where
commands/serve.py imports it for --backend tensorrt; a version without it is what the tests remove)."""

from tensorrt_llm.llmapi.llm import TrtLLM as LLM

__all__ = ["LLM"]
