from tensorrt_llm.executor.result import RequestError
from tensorrt_llm.llmapi.llm import LLM, RequestOutput
from tensorrt_llm.llmapi.llm_args import KvCacheConfig
from tensorrt_llm.sampling_params import GuidedDecodingParams, SamplingParams

__all__ = ["LLM", "GuidedDecodingParams", "KvCacheConfig", "RequestError", "RequestOutput", "SamplingParams"]
