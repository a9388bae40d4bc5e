"""Checkpoints as stored: safetensors headers (tiny files written here) and quantization_config."""
import json
import struct

import pytest

from gpuplan.errors import InputError
from gpuplan.models import get_model
from gpuplan.models.checkpoint import quantization_summary, read_checkpoint
from gpuplan.models.registry import registry_config, registry


def write_safetensors(path, tensors):
    """tensors: name -> (dtype, shape, bytes per element); data is zeros. Format per the safetensors README."""
    header, offset = {}, 0
    for name, (dtype, shape, size) in tensors.items():
        n = size
        for s in shape:
            n *= s
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
    return offset


@pytest.fixture
def fp8_checkpoint(tmp_path):
    """A two-shard mixed checkpoint: FP8 linears with fp32 scales, bf16 embeddings and norms."""
    cfg = dict(registry_config(registry()[0]))
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128],
                                  "activation_scheme": "dynamic", "modules_to_not_convert": ["lm_head"]}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    a = write_safetensors(tmp_path / "model-00001-of-00002.safetensors", {
        "model.embed_tokens.weight": ("BF16", (1000, 64), 2),
        "model.layers.0.mlp.up_proj.weight": ("F8_E4M3", (256, 64), 1),
        "model.layers.0.mlp.up_proj.weight_scale_inv": ("F32", (2, 1), 4)})
    b = write_safetensors(tmp_path / "model-00002-of-00002.safetensors", {
        "model.layers.0.input_layernorm.weight": ("BF16", (64,), 2),
        "model.layers.0.self_attn.q_proj.weight": ("F8_E4M3", (64, 64), 1),
        "lm_head.weight": ("BF16", (1000, 64), 2)})
    return tmp_path, a + b


def test_bytes_per_dtype_from_headers(fp8_checkpoint):
    folder, data_bytes = fp8_checkpoint
    info = read_checkpoint(folder)
    # by hand: bf16 2*1000*64*2 + 64*2; fp8 256*64 + 64*64; fp32 2*4
    assert info.bytes_by_dtype == {"BF16": 256_000 + 128, "F8_E4M3": 16_384 + 4_096, "F32": 8}
    assert info.elements_by_dtype["F8_E4M3"] == 20_480
    assert info.tensors == 6 and len(info.files) == 2
    assert info.tensor_bytes == data_bytes
    # weight memory from the headers matches the files' size within 0.5 % (the rest is the JSON headers)
    assert abs(info.file_bytes - info.tensor_bytes) / info.file_bytes < 0.005


def test_model_from_a_checkpoint_folder_says_where_weights_came_from(fp8_checkpoint):
    folder, data_bytes = fp8_checkpoint
    m = get_model(str(folder))
    assert m.stored_weight_bytes == data_bytes
    d = m.to_dict()
    assert d["weights_from"] == "checkpoint (safetensors headers)"
    assert d["checkpoint"]["quantization"]["method"] == "fp8" and d["checkpoint"]["quantization"]["bits"] == 8
    assert d["checkpoint"]["quantization"]["not_quantized"] == ["lm_head"]
    assert get_model(registry()[0].name).to_dict()["weights_from"] == "config"


@pytest.mark.parametrize("q, method, bits, group", [
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, "gptq", 4, 128),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}, "awq", 4, 128),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "bitsandbytes", 4, None),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "float", "group_size": None}, "targets": ["Linear"]}},
      "ignore": ["lm_head"]}, "compressed-tensors", 8, None),
])
def test_quantization_configs_understood(q, method, bits, group):
    s = quantization_summary({"quantization_config": q})
    assert (s["method"], s["bits"], s["group_size"]) == (method, bits, group)
    assert quantization_summary({}) is None


def test_broken_safetensors_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(registry_config(registry()[0])))
    (tmp_path / "model.safetensors").write_bytes(b"\x05\x00")
    with pytest.raises(InputError, match="not a readable safetensors file"):
        get_model(str(tmp_path))
    bad = tmp_path / "model.safetensors"
    header = json.dumps({"w": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 16]}}).encode()
    bad.write_bytes(struct.pack("<Q", len(header)) + header + bytes(16))
    with pytest.raises(InputError, match="32 expected"):
        get_model(str(tmp_path))


def test_reads_what_the_safetensors_library_writes(tmp_path):
    torch = pytest.importorskip("torch")
    save_file = pytest.importorskip("safetensors.torch").save_file
    save_file({"a": torch.zeros(3, 5, dtype=torch.bfloat16), "b": torch.zeros(7, dtype=torch.float8_e4m3fn),
               "c": torch.zeros(2, 2)}, str(tmp_path / "model.safetensors"))
    info = read_checkpoint(tmp_path)
    assert info.bytes_by_dtype == {"BF16": 30, "F8_E4M3": 7, "F32": 16}
