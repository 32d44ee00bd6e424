"""A fake of TensorRT-LLM 1.x's public surface (see tests/engines/fakes/README.md). Not the real library."""

from tensorrt_llm.llmapi.llm import LLM, RequestOutput
from tensorrt_llm.sampling_params import SamplingParams

__version__ = "1.2.0+fake"

__all__ = ["LLM", "RequestOutput", "SamplingParams", "__version__"]
