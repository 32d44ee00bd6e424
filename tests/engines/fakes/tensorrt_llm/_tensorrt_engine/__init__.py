"""The legacy compiled-engine backend's LLM (tensorrt_llm/_tensorrt_engine in 1.x, removed on main in 2026)."""

from tensorrt_llm.llmapi.llm import TrtLLM as LLM

__all__ = ["LLM"]
