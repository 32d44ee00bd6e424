"""Mirrors tensorrt_llm/sampling_params.py: a kw-only dataclass whose max_tokens defaults to 32, and
GuidedDecodingParams (one guide per request)."""

from dataclasses import dataclass, fields
from typing import Any


@dataclass(slots=True, kw_only=True)
class GuidedDecodingParams:
    """As the real one: json (a schema: str, dict or pydantic model), regex, grammar (EBNF), json_object,
    structural_tag; "Only one of the fields could be effective" (``_validate``, called by SamplingParams)."""

    json: str | dict | Any | None = None
    regex: str | None = None
    grammar: str | None = None
    json_object: bool = False
    structural_tag: str | None = None

    def _validate(self) -> None:
        num_guides = sum(bool(getattr(self, f.name)) for f in fields(self))
        if num_guides > 1:
            raise ValueError(f"Only one guide can be used for a request, but got {num_guides}.")


@dataclass(slots=True, kw_only=True)
class SamplingParams:
    end_id: int | None = None
    pad_id: int | None = None
    max_tokens: int = 32
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    embedding_bias: Any = None  # a torch.Tensor of kFP32, shape [vocab_size]
    n: int = 1
    best_of: int | None = None
    use_beam_search: bool = False
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    temperature: float | None = None
    min_tokens: int | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logprobs: int | None = None  # per output token (OutputConfig); the PyTorch backend returns them iff truthy
    prompt_logprobs: int | None = None
    guided_decoding: GuidedDecodingParams | None = None
    ignore_eos: bool = False
    detokenize: bool = True
    add_special_tokens: bool = True
    skip_special_tokens: bool = True

    def __post_init__(self):
        self.best_of = self.best_of or self.n
        if self.best_of < self.n:
            raise ValueError(f"best_of ({self.best_of}) cannot be less than n ({self.n})")
        # As _validate: "correct types as users might pass in logprob=True"; 0 stays 0, which is falsy, so
        # _get_output_config's return_log_probs=bool(self.logprobs) is off for logprobs=0.
        self.logprobs = self.logprobs and int(self.logprobs)
        if self.guided_decoding is not None:
            self.guided_decoding._validate()

    @property
    def _greedy_decoding(self) -> bool:
        # As on TensorRT-LLM main (params_imply_greedy_decoding): all three left None, or any one of top_k 1,
        # top_p 0, temperature 0. (1.0's rule: top_k None or 1 and top_p None or 0.)
        if self.use_beam_search:
            return False
        unset = self.temperature is None and self.top_p is None and self.top_k is None
        return unset or self.top_k == 1 or self.top_p == 0.0 or self.temperature == 0

    def _stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)
