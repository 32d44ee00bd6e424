from tensorrt_llm.executor.result import CompletionOutput, GenerationResult, IterationResult, RequestError

__all__ = ["CompletionOutput", "GenerationResult", "IterationResult", "RequestError"]
