from tensorrt_llm.executor.result import CompletionOutput, GenerationResult

__all__ = ["CompletionOutput", "GenerationResult"]
