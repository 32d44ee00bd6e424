"""What a checkpoint directory says about its weights, and whether a variant's declaration matches it.

A variant declared float16 but pointed at FP8 or INT4 weights loads without complaint in most engines and
then serves garbage (or fails on the first request). So the declared dtype / quantization, tensor parallel
size and max_seq_len are checked against the files before anything loads, naming both values when they
differ. :func:`validate_checkpoint` is a pure function of the directory's JSON files: the serve config calls
it at deploy time (on a machine that sees the checkpoints) and the TensorRT-LLM backends call it in
``start()``.

Where each fact comes from, first match wins:

* quantization: ModelOpt's ``hf_quant_config.json``, then ``config.json`` ``quantization_config``
  (``quant_method``: fp8 / awq / gptq / modelopt / compressed-tensors ...), then a TensorRT-LLM checkpoint's or
  prebuilt engine's ``config.json`` (``pretrained_config.quantization``). ModelOpt writes two shapes, read as
  TensorRT-LLM reads them (``tensorrt_llm/quantization/modelopt_config.py``, ``parse_modelopt_quant_config``):
  the legacy 0.x one nests ``quantization: {quant_algo, ...}``; the flat 1.x one has ``quant_method: "modelopt"``
  (or ``producer.name: "modelopt"``) and ``quant_algo`` at the top level;
* tensor parallel size: fixed only by TensorRT-LLM checkpoints and prebuilt engines (``mapping.tp_size``);
  any checkpoint fixes the head count, which tensor parallelism must divide;
* longest sequence: an engine's ``build_config.max_seq_len``, else ``max_position_embeddings`` (stretched
  by linear / dynamic / YaRN rope scaling).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from core.errors import EngineConfigError

CheckpointKind = Literal["hf", "trtllm_checkpoint", "trtllm_engine"]

# ModelOpt / TensorRT-LLM ``QuantAlgo`` names (tensorrt_llm/quantization/mode.py) -> our declared names.
_QUANT_ALGOS = {
    "FP8": "fp8",
    "FP8_PER_CHANNEL_PER_TOKEN": "fp8",
    "FP8_BLOCK_SCALES": "fp8",
    "NVFP4": "nvfp4",
    "W4A16_AWQ": "int4_awq",
    "W4A8_AWQ": "w4a8_awq",
    "W8A8_SQ_PER_CHANNEL": "int8_sq",
    "W8A8_SQ_PER_TENSOR_PLUGIN": "int8_sq",
    "W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN": "int8_sq",
    "W8A8_SQ_PER_CHANNEL_PER_TENSOR_PLUGIN": "int8_sq",
    "W8A8_SQ_PER_TENSOR_PER_TOKEN_PLUGIN": "int8_sq",
    "W8A16": "int8_weight_only",
    "W4A16": "int4_weight_only",
    "W4A16_GPTQ": "int4_gptq",
    # ModelOpt's alias, which TensorRT-LLM canonicalizes to FP8_BLOCK_SCALES (parse_modelopt_quant_config).
    "FP8_PB_WO": "fp8",
    "NO_QUANT": "none",
}
# Spellings of "no quantization" in exported JSON (TensorRT-LLM's _algo_or_none treats them as None).
_NO_ALGO = {"", "none", "null"}

# Which TensorRT-LLM loader a variant goes through (None: not TensorRT-LLM, nothing loader-specific checked).
# 'pytorch': tensorrt_llm.LLM / trtllm-serve's default backend, which loads Hugging Face checkpoints only;
# 'tensorrt': the legacy engine backend (prebuilt engines, TensorRT-LLM checkpoints, HF checkpoints it builds);
# 'auto': the trtllm backend's engine_format auto (engine directories and checkpoints to 'tensorrt', HF to 'pytorch').
TrtllmLoader = Literal["pytorch", "tensorrt", "auto"]

# compressed-tensors' ``format`` names (llm-compressor exports) -> our names.
_COMPRESSED_TENSORS_FORMATS = {
    "float-quantized": "fp8",
    "naive-quantized": "fp8",
    "nvfp4-pack-quantized": "nvfp4",
    "pack-quantized": "int4_weight_only",
    "int-quantized": "int8_sq",
}

# Rope scalings that stretch the context beyond the trained max_position_embeddings by ``factor``.
_STRETCHING_ROPE_TYPES = {"linear", "dynamic", "yarn"}


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """The facts a checkpoint directory states about itself (None: it does not say)."""

    path: Path
    kind: CheckpointKind
    quantization: str  # one of engines.config.Quantization, or the checkpoint's own name when unknown to us
    quantization_source: str  # where that came from, quoted in error messages
    dtype: str | None
    tensor_parallel_size: int | None  # fixed by TensorRT-LLM checkpoints and engines only
    num_attention_heads: int | None
    max_seq_len: int | None
    hf_quant_method: str | None = None  # config.json quantization_config.quant_method (lower case), unless a
    # ModelOpt hf_quant_config.json overrides it
    hf_block_scaled: bool = False  # quantization_config.weight_block_size is set (block-scaled FP8)

    def trtllm_loader(self, engine_format: str = "auto") -> Literal["pytorch", "tensorrt"]:
        """The TensorRT-LLM backend ``engine_format`` ('auto' / 'pytorch' / 'tensorrt_engine') loads this with."""
        if engine_format == "tensorrt_engine":
            return "tensorrt"
        if engine_format == "pytorch":
            return "pytorch"
        return "pytorch" if self.kind == "hf" else "tensorrt"


def read_checkpoint(model: str | os.PathLike[str]) -> CheckpointInfo | None:
    """The checkpoint's facts, or None when ``model`` is no local directory (a hub id: nothing to read).

    Raises ``EngineConfigError`` for a directory without a readable ``config.json``.
    """
    path = Path(model)
    if not path.is_dir():
        return None
    config = _read_json(path / "config.json")
    if config is None:
        raise EngineConfigError(f"{path} has no config.json: it is not a Hugging Face or TensorRT-LLM checkpoint.")
    if isinstance(config.get("build_config"), dict) and isinstance(config.get("pretrained_config"), dict):
        return _read_trtllm(path, config["pretrained_config"], "trtllm_engine", config["build_config"])
    if isinstance(config.get("mapping"), dict) and "architecture" in config:
        return _read_trtllm(path, config, "trtllm_checkpoint", None)
    return _read_hf(path, config)


def validate_checkpoint(
    model: str | os.PathLike[str],
    *,
    dtype: str = "auto",
    quantization: str | None = None,
    tensor_parallel_size: int = 1,
    max_seq_len: int | None = None,
    num_gpus: float | None = None,
    trtllm_loader: TrtllmLoader | None = None,
) -> CheckpointInfo | None:
    """Checks a variant's declaration against its checkpoint; returns what the checkpoint says.

    ``quantization`` None with a concrete ``dtype`` declares unquantized weights in that dtype; None with
    dtype 'auto' checks no weights format. ``num_gpus`` is what the replica reserves (None: unknown).
    ``trtllm_loader`` also checks that TensorRT-LLM's loader can read this checkpoint at all.
    Raises ``EngineConfigError`` listing every mismatch, each naming the declared and the found value.
    Returns None, checking only ``num_gpus``, when ``model`` is no local directory.
    """
    problems = []
    if num_gpus is not None and num_gpus != tensor_parallel_size:
        # Each tensor parallel rank drives one GPU: fewer GPUs cannot run, more sit idle and reserved.
        problems.append(
            f"tensor_parallel_size is {tensor_parallel_size} but the replica has {num_gpus:g} GPUs: "
            "reserve exactly one GPU per rank (num_gpus = tensor_parallel_size)"
        )
    info = read_checkpoint(model)
    if info is not None:
        problems.extend(_mismatches(info, dtype, quantization, tensor_parallel_size, max_seq_len))
        if trtllm_loader is not None:
            problems.extend(_loader_problems(info, trtllm_loader))
    if problems:
        raise EngineConfigError(f"model {os.fspath(model)!r} does not match its variant: " + "; ".join(problems))
    return info


def validate_engine_config(
    config: Any, *, model: str | None = None, num_gpus: float | None = None
) -> CheckpointInfo | None:
    """:func:`validate_checkpoint` for a ``trtllm`` or ``openai_server`` engine config: at deploy time on
    ``config.model``, and at the engine's start on ``model``, the directory it resolved to.

    A ``builtin:`` name is no directory yet (generated on first use), so only ``num_gpus`` is checked.
    """
    return validate_checkpoint(
        config.model if model is None else model,
        dtype=config.dtype,
        quantization=config.quantization,
        tensor_parallel_size=config.tensor_parallel_size,
        max_seq_len=config.max_seq_len,
        num_gpus=num_gpus,
        trtllm_loader=config.trtllm_loader(),
    )


def visible_gpu_count() -> int | None:
    """GPUs this process may use as Ray assigned them (CUDA_VISIBLE_DEVICES), or None when unset."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return None
    return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])


def _mismatches(
    info: CheckpointInfo, dtype: str, quantization: str | None, tp: int, max_seq_len: int | None
) -> list[str]:
    problems = []
    declared = quantization if quantization is not None else ("none" if dtype != "auto" else None)
    if declared is not None and declared != info.quantization:
        said = f"quantization {quantization!r}" if quantization is not None else f"unquantized {dtype} weights"
        found = "unquantized" if info.quantization == "none" else repr(info.quantization)
        problems.append(
            f"the variant declares {said} but the checkpoint's weights are {found} ({info.quantization_source})"
        )
    # A prebuilt engine's dtype is compiled in; a Hugging Face checkpoint's is converted at load time.
    if info.kind == "trtllm_engine" and dtype != "auto" and info.dtype is not None and dtype != info.dtype:
        problems.append(f"the variant declares dtype {dtype!r} but the engine was built for {info.dtype!r}")
    if info.tensor_parallel_size is not None and info.tensor_parallel_size != tp:
        problems.append(
            f"the variant declares tensor_parallel_size {tp} but the {info.kind.replace('_', ' ')} was built "
            f"for tensor parallel {info.tensor_parallel_size}"
        )
    if info.num_attention_heads is not None and info.num_attention_heads % tp:
        problems.append(
            f"tensor_parallel_size {tp} does not divide the model's {info.num_attention_heads} attention heads"
        )
    if max_seq_len is not None and info.max_seq_len is not None and max_seq_len > info.max_seq_len:
        problems.append(f"max_seq_len {max_seq_len} exceeds the model's {info.max_seq_len}")
    return problems


def _loader_problems(info: CheckpointInfo, loader: TrtllmLoader) -> list[str]:
    """What TensorRT-LLM's loader would fail on, later and less clearly, for this checkpoint."""
    resolved = loader if loader != "auto" else info.trtllm_loader()
    if resolved == "pytorch" and info.kind != "hf":
        # TorchLlmArgs loads Hugging Face checkpoints (_ModelFormatKind.HF); engines and TensorRT-LLM checkpoints
        # are inputs of the legacy TensorRT backend (llm_args.py get_model_format).
        return [
            f"the {info.kind.replace('_', ' ')} cannot be loaded by TensorRT-LLM's PyTorch backend (it loads Hugging "
            "Face checkpoints only): use engine_format 'tensorrt_engine' / trtllm-serve --backend tensorrt, or the "
            "Hugging Face checkpoint"
        ]
    if (
        resolved == "pytorch"
        and info.hf_quant_method == "compressed-tensors"
        and info.quantization not in ("fp8", "nvfp4", "mixed_precision")
    ):
        # update_quant_config_from_compressed_tensors takes 8-bit weights as FP8 (whatever their type) and 4-bit float
        # ones as NVFP4, and refuses the rest: integer weights would load wrong or not at all. (Several groups are
        # MIXED_PRECISION on newer builds: not refused here.)
        return [
            f"TensorRT-LLM's PyTorch backend reads compressed-tensors checkpoints as FP8 or NVFP4 only, and this one "
            f"is {info.quantization!r} ({info.quantization_source})"
        ]
    if resolved == "pytorch" and info.hf_quant_method in ("fp8", "fbgemm_fp8") and not info.hf_block_scaled:
        # load_hf_quant_config (_torch/model_config.py) sets FP8_BLOCK_SCALES for quant_method fp8 *with*
        # weight_block_size and has no branch for per-tensor / per-channel HF FP8: no quantization would be set.
        return [
            f"TensorRT-LLM's PyTorch backend reads Hugging Face FP8 checkpoints only when block-scaled "
            f"(weight_block_size; {info.quantization_source}): serve a ModelOpt FP8 export (hf_quant_config.json) "
            "instead"
        ]
    if resolved == "pytorch" and info.hf_quant_method in ("awq", "gptq"):
        # _torch/model_config.py load_hf_quant_config reads modelopt, fp8, mxfp4, mxfp8, compressed-tensors and
        # nvfp4 quantization configs; an AutoAWQ / AutoGPTQ export has no branch there and fails while loading.
        return [
            f"TensorRT-LLM's PyTorch backend has no loader for Hugging Face {info.hf_quant_method.upper()} checkpoints "
            f"({info.quantization_source}): serve a ModelOpt export of the same quantization (hf_quant_config.json, "
            "e.g. quant_algo W4A16_AWQ) instead"
        ]
    return []


def _read_hf(path: Path, config: dict[str, Any]) -> CheckpointInfo:
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else {}

    def get(key: str) -> Any:
        # Multimodal configs nest the language model's settings under text_config.
        return config.get(key, text.get(key))

    quantization, source = _hf_quantization(path, config)
    # TensorRT-LLM reads hf_quant_config.json when there is one and config.json's quantization_config only
    # otherwise (_torch/model_config.py from_pretrained): the loader checks look at the latter only then.
    qc = None if (path / "hf_quant_config.json").is_file() else config.get("quantization_config")
    return CheckpointInfo(
        path=path,
        kind="hf",
        quantization=quantization,
        quantization_source=source,
        dtype=_dtype_name(get("torch_dtype") or get("dtype")),  # transformers 5 writes "dtype"
        tensor_parallel_size=None,
        num_attention_heads=_int_or_none(get("num_attention_heads")),
        max_seq_len=_context_length(get("max_position_embeddings"), get("rope_scaling")),
        hf_quant_method=(str(qc.get("quant_method", "")).lower() or None) if isinstance(qc, dict) else None,
        hf_block_scaled=isinstance(qc, dict) and bool(qc.get("weight_block_size")),
    )


def _read_trtllm(
    path: Path, pretrained: dict[str, Any], kind: CheckpointKind, build: dict[str, Any] | None
) -> CheckpointInfo:
    where = "config.json pretrained_config" if kind == "trtllm_engine" else "config.json"
    found = _modelopt_quantization(path)  # a ModelOpt hf_quant_config.json beside it wins
    if found is None:
        algo = (pretrained.get("quantization") or {}).get("quant_algo")
        found = _quant_algo(algo), f"quant_algo={algo} in {where}"
    quantization, source = found
    mapping = pretrained.get("mapping") or {}
    max_seq_len = _int_or_none((build or {}).get("max_seq_len")) or _context_length(
        pretrained.get("max_position_embeddings"), pretrained.get("rope_scaling")
    )
    return CheckpointInfo(
        path=path,
        kind=kind,
        quantization=quantization,
        quantization_source=source,
        dtype=_dtype_name(pretrained.get("dtype")),
        tensor_parallel_size=_int_or_none(mapping.get("tp_size", mapping.get("world_size"))),
        num_attention_heads=_int_or_none(pretrained.get("num_attention_heads")),
        max_seq_len=max_seq_len,
    )


def _modelopt_quantization(path: Path) -> tuple[str, str] | None:
    modelopt = _read_json(path / "hf_quant_config.json")
    if modelopt is None:
        return None
    return _modelopt_algo(modelopt, "hf_quant_config.json")


def is_modelopt_config(raw: dict[str, Any]) -> bool:
    """ModelOpt's marker, as ``is_modelopt_quant_config`` (tensorrt_llm/quantization/modelopt_config.py) tests it."""
    producer = raw.get("producer")
    return str(raw.get("quant_method", "")).lower().startswith("modelopt") or (
        isinstance(producer, dict) and producer.get("name") == "modelopt"
    )


def _modelopt_algo(raw: dict[str, Any], where: str) -> tuple[str, str]:
    """A ModelOpt quant config of either shape: the legacy nested ``quantization`` wins, as in TensorRT-LLM's
    ``parse_modelopt_quant_config``; else the flat 1.x top-level ``quant_algo``."""
    if isinstance(raw.get("quantization"), dict):
        algo = raw["quantization"].get("quant_algo")
        return _quant_algo(algo), f"quantization.quant_algo={algo} in {where}"
    algo = raw.get("quant_algo")
    if is_modelopt_config(raw) or algo is not None:
        return _quant_algo(algo), f"quant_algo={algo} in {where}"
    # Neither shape: say so rather than read "unquantized" (the mistake this module exists to catch).
    return "unknown", f"an hf_quant_config.json in neither ModelOpt shape ({where})"


def _hf_quantization(path: Path, config: dict[str, Any]) -> tuple[str, str]:
    modelopt = _modelopt_quantization(path)
    if modelopt is not None:
        return modelopt
    qc = config.get("quantization_config")
    if not isinstance(qc, dict):
        return "none", "no quantization config"
    method = str(qc.get("quant_method", "")).lower()
    where = "config.json quantization_config"
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8", f"quant_method={method} in {where}"
    if method in ("awq", "gptq"):
        bits = qc.get("bits")
        name = f"int4_{method}" if bits == 4 else f"{method}_{bits}bit"
        return name, f"quant_method={method}, bits={bits} in {where}"
    if is_modelopt_config(qc):
        # Inline ModelOpt config, either shape (flat: quant_algo at the top; legacy: nested under quantization).
        return _modelopt_algo(qc, where)
    if method == "compressed-tensors":
        groups = qc.get("config_groups")
        if isinstance(groups, dict) and groups:
            return _compressed_tensors_scheme(groups, where)
        fmt = qc.get("format")
        return _COMPRESSED_TENSORS_FORMATS.get(str(fmt), f"compressed-tensors:{fmt}"), f"format={fmt} in {where}"
    return method or "unknown", f"quant_method={method or None} in {where}"


def _compressed_tensors_scheme(groups: dict[str, Any], where: str) -> tuple[str, str]:
    """The weights' scheme of an llm-compressor checkpoint, from its config groups as TensorRT-LLM reads them
    (``update_quant_config_from_compressed_tensors``: ``group_0.weights`` num_bits / type / strategy; several
    groups are mixed precision), not from ``format``, which names the packing."""
    group = groups.get("group_0") or next(iter(groups.values()))
    weights = (group.get("weights") if isinstance(group, dict) else None) or {}
    bits, kind = weights.get("num_bits"), weights.get("type")
    has_activations = isinstance(group, dict) and isinstance(group.get("input_activations"), dict)
    source = f"config_groups weights num_bits={bits}, type={kind} in {where}"
    if len(groups) > 1:
        return "mixed_precision", f"{len(groups)} config_groups in {where}"
    names: dict[tuple[Any, Any], str] = {
        (8, "float"): "fp8",
        (8, "int"): "int8_sq" if has_activations else "int8_weight_only",
        (4, "float"): "nvfp4",
        (4, "int"): "int4_weight_only",
    }
    return names.get((bits, kind), f"compressed-tensors:{bits}bit-{kind}"), source


def _quant_algo(algo: Any) -> str:
    if algo is None or str(algo).strip().lower() in _NO_ALGO:
        return "none"
    return _QUANT_ALGOS.get(str(algo).strip().upper(), str(algo))


def _context_length(max_positions: Any, rope_scaling: Any) -> int | None:
    limit = _int_or_none(max_positions)
    if limit is None or not isinstance(rope_scaling, dict):
        return limit
    rope_type = rope_scaling.get("rope_type", rope_scaling.get("type"))
    factor = rope_scaling.get("factor")
    if rope_type in _STRETCHING_ROPE_TYPES and isinstance(factor, int | float) and factor > 1:
        original = _int_or_none(rope_scaling.get("original_max_position_embeddings")) or limit
        return max(limit, int(original * factor))
    return limit


def _dtype_name(value: Any) -> str | None:
    if value is None:
        return None
    name = str(value).removeprefix("torch.")
    return {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32"}.get(name, name)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with path.open(encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise EngineConfigError(f"cannot read {path}: {e}") from None
    if not isinstance(data, dict):
        raise EngineConfigError(f"{path} is not a JSON object")
    return data
