"""Checkpoint validation: a variant's declared dtype / quantization / tp / max_seq_len against its files.

Fixtures are the small JSON files real exports write (ModelOpt's hf_quant_config.json, Hugging Face
config.json quantization_config, TensorRT-LLM engine and checkpoint config.json), written in tmp_path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import EngineConfigError
from engines.checkpoint import read_checkpoint, validate_checkpoint, validate_engine_config, visible_gpu_count
from engines.config import OpenAIServerEngineConfig, TRTLLMEngineConfig

LLAMA = {"model_type": "llama", "torch_dtype": "bfloat16", "num_attention_heads": 32, "max_position_embeddings": 8192}


def write(directory: Path, **files: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (directory / f"{name}.json").write_text(json.dumps(content))
    return directory


@pytest.fixture
def fp8_modelopt(tmp_path) -> Path:
    return write(
        tmp_path / "fp8",
        config=LLAMA,
        hf_quant_config={"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8"}},
    )


@pytest.fixture
def awq_hf(tmp_path) -> Path:
    quantization_config = {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}
    return write(tmp_path / "awq", config={**LLAMA, "quantization_config": quantization_config})


@pytest.fixture
def fp16_plain(tmp_path) -> Path:
    return write(tmp_path / "fp16", config={**LLAMA, "torch_dtype": "float16"})


def legacy_engine(directory: Path, *, tp: int, quant_algo: str | None = None, dtype: str = "float16") -> Path:
    return write(
        directory,
        config={
            "version": "0.12.0",
            "pretrained_config": {
                "architecture": "LlamaForCausalLM",
                "dtype": dtype,
                "num_attention_heads": 32,
                "max_position_embeddings": 8192,
                "mapping": {"world_size": tp, "tp_size": tp, "pp_size": 1},
                "quantization": {"quant_algo": quant_algo, "kv_cache_quant_algo": None},
            },
            "build_config": {"max_seq_len": 4096, "max_batch_size": 64},
        },
    )


def test_fp16_declared_variant_on_a_modelopt_fp8_checkpoint_is_refused(fp8_modelopt):
    with pytest.raises(EngineConfigError) as err:
        validate_checkpoint(fp8_modelopt, dtype="float16")
    message = str(err.value)
    assert "float16" in message and "'fp8'" in message
    assert "hf_quant_config.json" in message  # where the found value came from


def test_fp16_declared_variant_on_an_int4_awq_checkpoint_is_refused(awq_hf):
    with pytest.raises(EngineConfigError) as err:
        validate_checkpoint(awq_hf, dtype="float16", quantization="none")
    assert "'none'" in str(err.value) and "'int4_awq'" in str(err.value)


def test_declared_quantization_on_an_unquantized_checkpoint_is_refused(fp16_plain):
    with pytest.raises(EngineConfigError) as err:
        validate_checkpoint(fp16_plain, quantization="int4_awq")
    assert "'int4_awq'" in str(err.value) and "unquantized" in str(err.value)


def test_int8_legacy_engine_declared_fp16_is_refused(tmp_path):
    engine_dir = legacy_engine(tmp_path, tp=1, quant_algo="W8A16")
    with pytest.raises(EngineConfigError) as err:
        validate_checkpoint(engine_dir, dtype="float16")
    assert "float16" in str(err.value) and "'int8_weight_only'" in str(err.value)


def test_matching_declarations_pass_and_report_what_was_found(fp8_modelopt, awq_hf, fp16_plain, tmp_path):
    assert validate_checkpoint(fp8_modelopt, quantization="fp8", tensor_parallel_size=4).quantization == "fp8"
    assert validate_checkpoint(awq_hf, quantization="int4_awq").quantization == "int4_awq"
    info = validate_checkpoint(fp16_plain, dtype="float16", max_seq_len=8192)
    assert (info.kind, info.quantization, info.dtype, info.max_seq_len) == ("hf", "none", "float16", 8192)
    # A Hugging Face checkpoint's float dtype is converted at load time: bfloat16 weights may run as float16.
    assert validate_checkpoint(fp8_modelopt.parent / "fp16", dtype="bfloat16").dtype == "float16"
    engine = legacy_engine(tmp_path / "engine", tp=4, quant_algo="FP8")
    assert validate_checkpoint(engine, quantization="fp8", tensor_parallel_size=4).kind == "trtllm_engine"


def test_auto_dtype_without_quantization_checks_no_weights_format(fp8_modelopt):
    assert validate_checkpoint(fp8_modelopt).quantization == "fp8"


@pytest.mark.parametrize(
    ("quantization_config", "expected"),
    [
        ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8"),
        ({"quant_method": "gptq", "bits": 4}, "int4_gptq"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
        ({"quant_method": "compressed-tensors", "format": "float-quantized"}, "fp8"),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "bitsandbytes"),
    ],
)
def test_config_json_quantization_config_is_read(tmp_path, quantization_config, expected):
    write(tmp_path, config={**LLAMA, "quantization_config": quantization_config})
    assert read_checkpoint(tmp_path).quantization == expected


def test_legacy_engine_built_for_another_tp_is_refused(tmp_path):
    engine_dir = legacy_engine(tmp_path, tp=4)
    with pytest.raises(EngineConfigError) as err:
        validate_checkpoint(engine_dir, tensor_parallel_size=2)
    assert "tensor_parallel_size 2" in str(err.value) and "tensor parallel 4" in str(err.value)


def test_tp_must_divide_the_attention_heads(fp16_plain):
    with pytest.raises(EngineConfigError, match="does not divide the model's 32 attention heads"):
        validate_checkpoint(fp16_plain, tensor_parallel_size=3)


def test_tp_must_match_the_replicas_gpus(fp16_plain):
    with pytest.raises(EngineConfigError) as err:
        validate_checkpoint(fp16_plain, tensor_parallel_size=4, num_gpus=2)
    assert "tensor_parallel_size is 4" in str(err.value) and "2 GPUs" in str(err.value)


def test_engine_dtype_is_fixed_at_build_time(tmp_path):
    engine_dir = legacy_engine(tmp_path, tp=1, dtype="float16")
    with pytest.raises(EngineConfigError, match="'bfloat16' but the engine was built for 'float16'"):
        validate_checkpoint(engine_dir, dtype="bfloat16")


def test_max_seq_len_beyond_the_model_is_refused(fp16_plain, tmp_path):
    with pytest.raises(EngineConfigError, match="max_seq_len 16384 exceeds the model's 8192"):
        validate_checkpoint(fp16_plain, max_seq_len=16384)
    with pytest.raises(EngineConfigError, match="max_seq_len 8192 exceeds the model's 4096"):
        validate_checkpoint(legacy_engine(tmp_path / "engine", tp=1), max_seq_len=8192)


def test_rope_scaling_stretches_the_context(tmp_path):
    rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}
    write(tmp_path, config={**LLAMA, "rope_scaling": rope})
    assert read_checkpoint(tmp_path).max_seq_len == 32768


def test_every_problem_is_listed_at_once(tmp_path):
    engine_dir = legacy_engine(tmp_path, tp=4, quant_algo="W4A16_AWQ")
    with pytest.raises(EngineConfigError) as err:
        validate_checkpoint(engine_dir, dtype="float16", tensor_parallel_size=2, max_seq_len=8192)
    message = str(err.value)
    assert "'int4_awq'" in message and "tensor parallel 4" in message and "exceeds" in message


def test_a_hub_id_or_builtin_name_is_not_read(fp16_plain):
    assert validate_checkpoint("meta-llama/Llama-3.1-8B-Instruct", dtype="float16") is None
    assert validate_engine_config(TRTLLMEngineConfig(model="builtin:tiny", dtype="float16")) is None


def test_a_directory_without_config_json_is_refused(tmp_path):
    with pytest.raises(EngineConfigError, match=r"no config\.json"):
        read_checkpoint(tmp_path)


def test_engine_configs_are_validated_at_deploy_time(fp8_modelopt):
    good = OpenAIServerEngineConfig(model=str(fp8_modelopt), quantization="fp8", tensor_parallel_size=4)
    assert validate_engine_config(good, num_gpus=4).quantization == "fp8"
    bad = TRTLLMEngineConfig(model=str(fp8_modelopt), dtype="float16", tensor_parallel_size=4)
    with pytest.raises(EngineConfigError, match="'fp8'"):
        validate_engine_config(bad, num_gpus=4)


def test_visible_gpu_count_reads_what_ray_assigned(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_gpu_count() == 2
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_gpu_count() is None


# --- The audit's discrepancies (docs/tensorrt-llm.md) ---

MODELOPT_1X_FP8 = {  # ModelOpt 1.x flat shape (tensorrt_llm/quantization/modelopt_config.py, "Flat")
    "producer": {"name": "modelopt", "version": "1.0.0"},
    "quant_method": "modelopt",
    "quant_algo": "FP8",
    "kv_cache_scheme": {"type": "float", "num_bits": 8},
    "ignore": ["lm_head"],
}


@pytest.mark.contract
def test_a_modelopt_1x_flat_hf_quant_config_is_read_as_its_quantization(tmp_path):
    """D3: the flat 1.x shape has quant_algo at the top level; read as 'none' it refused a correct fp8 variant
    and let a bfloat16 one through over FP8 weights."""
    checkpoint = write(tmp_path, config=LLAMA, hf_quant_config=MODELOPT_1X_FP8)
    assert validate_checkpoint(checkpoint, quantization="fp8").quantization == "fp8"
    with pytest.raises(EngineConfigError, match="'fp8'"):
        validate_checkpoint(checkpoint, dtype="bfloat16")


@pytest.mark.contract
@pytest.mark.parametrize(
    "quantization_config",
    [MODELOPT_1X_FP8, {"quant_method": "modelopt", "quantization": {"quant_algo": "FP8"}}],
    ids=["flat", "nested"],
)
def test_an_inline_modelopt_quantization_config_of_either_shape_is_read(tmp_path, quantization_config):
    write(tmp_path, config={**LLAMA, "quantization_config": quantization_config})
    assert read_checkpoint(tmp_path).quantization == "fp8"


@pytest.mark.contract
@pytest.mark.parametrize(("algo", "expected"), [("fp8_pb_wo", "fp8"), ("null", "none"), ("", "none"), ("None", "none")])
def test_modelopt_algo_spellings_are_read_as_tensorrt_llm_reads_them(tmp_path, algo, expected):
    """D12: ModelOpt's fp8_pb_wo alias is FP8_BLOCK_SCALES; "null" / "" / "None" strings mean no quantization."""
    modelopt = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": algo}}
    write(tmp_path, config=LLAMA, hf_quant_config=modelopt)
    assert read_checkpoint(tmp_path).quantization == expected


def test_an_hf_quant_config_in_neither_modelopt_shape_is_not_read_as_unquantized(tmp_path):
    write(tmp_path, config=LLAMA, hf_quant_config={"something": "else"})
    with pytest.raises(EngineConfigError, match="neither ModelOpt shape"):
        validate_checkpoint(tmp_path, dtype="bfloat16")


@pytest.mark.contract
@pytest.mark.parametrize("method", ["awq", "gptq"])
def test_hf_awq_and_gptq_checkpoints_are_refused_for_tensorrt_llms_pytorch_loader(tmp_path, method):
    """D11: _torch/model_config.py load_hf_quant_config has no AWQ / GPTQ branch; other servers (vLLM) load them."""
    write(tmp_path, config={**LLAMA, "quantization_config": {"quant_method": method, "bits": 4}})
    declared = f"int4_{method}"
    with pytest.raises(EngineConfigError, match=f"no loader for Hugging Face {method.upper()}"):
        validate_checkpoint(tmp_path, quantization=declared, trtllm_loader="pytorch")
    assert validate_checkpoint(tmp_path, quantization=declared).quantization == declared  # not TensorRT-LLM
    # trtllm-serve by default (PyTorch backend) is checked at deploy time too; a server at a url is not ours.
    with pytest.raises(EngineConfigError, match="no loader"):
        validate_engine_config(OpenAIServerEngineConfig(model=str(tmp_path), quantization=declared))
    remote = OpenAIServerEngineConfig(model=str(tmp_path), quantization=declared, url="http://vllm:8000")
    assert validate_engine_config(remote) is not None


@pytest.mark.contract
def test_engines_and_trtllm_checkpoints_are_refused_for_the_pytorch_loader(tmp_path):
    """D10: TorchLlmArgs loads Hugging Face checkpoints only (llm_args.py get_model_format)."""
    engine_dir = legacy_engine(tmp_path / "engine", tp=1)
    with pytest.raises(EngineConfigError, match="PyTorch backend"):
        validate_checkpoint(engine_dir, trtllm_loader="pytorch")
    assert validate_checkpoint(engine_dir, trtllm_loader="auto").kind == "trtllm_engine"
    assert validate_checkpoint(engine_dir, trtllm_loader="tensorrt").kind == "trtllm_engine"


def compressed_tensors(*groups: dict) -> dict:
    """An llm-compressor quantization_config with these config groups (weights, input_activations)."""
    config_groups = {f"group_{i}": {"targets": ["Linear"], **group} for i, group in enumerate(groups)}
    return {"quant_method": "compressed-tensors", "format": "whatever-packing", "config_groups": config_groups}


FP8_DYNAMIC = {
    "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
    "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True},
}
W8A8_INT = {
    "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
    "input_activations": {"num_bits": 8, "type": "int", "strategy": "token"},
}
W4A16_INT = {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}
NVFP4 = {
    "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
    "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
}


@pytest.mark.contract
@pytest.mark.parametrize(
    ("groups", "expected", "trtllm_loads"),
    [
        ((FP8_DYNAMIC,), "fp8", True),
        ((NVFP4,), "nvfp4", True),
        ((W8A8_INT,), "int8_sq", False),  # TensorRT-LLM would take its 8-bit weights as FP8
        ((W4A16_INT,), "int4_weight_only", False),  # "Unsupported quant_bits"
        ((FP8_DYNAMIC, NVFP4), "mixed_precision", True),  # MIXED_PRECISION on newer builds
    ],
    ids=["fp8", "nvfp4", "w8a8-int", "w4a16-int", "two-groups"],
)
def test_compressed_tensors_are_read_from_their_config_groups(tmp_path, groups, expected, trtllm_loads):
    """Audit row 57 (was unverified): TensorRT-LLM decides from config_groups.group_0.weights (num_bits, type,
    strategy; update_quant_config_from_compressed_tensors), not from format."""
    write(tmp_path, config={**LLAMA, "quantization_config": compressed_tensors(*groups)})
    assert read_checkpoint(tmp_path).quantization == expected
    if trtllm_loads:
        assert validate_checkpoint(tmp_path, trtllm_loader="pytorch") is not None
    else:
        with pytest.raises(EngineConfigError, match="reads compressed-tensors checkpoints as FP8 or NVFP4 only"):
            validate_checkpoint(tmp_path, trtllm_loader="pytorch")


@pytest.mark.contract
def test_hf_fp8_is_refused_for_the_pytorch_loader_unless_block_scaled(tmp_path):
    """load_hf_quant_config reads quant_method fp8 only with weight_block_size (FP8_BLOCK_SCALES); a per-tensor
    HF FP8 export would get no quantization at all."""
    write(
        tmp_path / "pt",
        config={**LLAMA, "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}},
    )
    with pytest.raises(EngineConfigError, match="only when block-scaled"):
        validate_checkpoint(tmp_path / "pt", quantization="fp8", trtllm_loader="pytorch")
    block = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    write(tmp_path / "block", config={**LLAMA, "quantization_config": block})
    assert validate_checkpoint(tmp_path / "block", quantization="fp8", trtllm_loader="pytorch").quantization == "fp8"
    # ModelOpt FP8 (the shipped 70B config's kind of export) is fine.
    modelopt = write(tmp_path / "modelopt", config=LLAMA, hf_quant_config=MODELOPT_1X_FP8)
    assert validate_checkpoint(modelopt, quantization="fp8", trtllm_loader="pytorch").quantization == "fp8"


def test_an_hf_quant_config_json_overrides_config_json_for_the_loader_checks(tmp_path):
    """TensorRT-LLM reads hf_quant_config.json first; config.json's quantization_config is then not what loads."""
    inline = {"quant_method": "fp8", "activation_scheme": "static"}
    write(tmp_path, config={**LLAMA, "quantization_config": inline}, hf_quant_config=MODELOPT_1X_FP8)
    assert validate_checkpoint(tmp_path, quantization="fp8", trtllm_loader="pytorch").quantization == "fp8"
