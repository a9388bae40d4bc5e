"""GGUF headers (models/gguf.py): a file written here by hand, byte for byte as ggml-org/ggml docs/gguf.md
lays it out; expected sizes by hand from ggml's block sizes (F16: 2 bytes; Q4_K: 144 bytes per 256)."""
from __future__ import annotations

import json
import struct

import pytest

from gpuplan.cli import main
from gpuplan.errors import InputError
from gpuplan.models.gguf import read_gguf


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _tiny_gguf(path, *, truncate: int = 0, magic: bytes = b"GGUF"):
    meta = (_s("general.architecture") + struct.pack("<I", 8) + _s("llama")
            + _s("llama.block_count") + struct.pack("<I", 4) + struct.pack("<I", 2)
            + _s("tokenizer.ggml.tokens") + struct.pack("<I", 9) + struct.pack("<IQ", 8, 3)
            + _s("a") + _s("bb") + _s("ccc"))
    tensors = (_s("token_embd.weight") + struct.pack("<I", 2) + struct.pack("<QQ", 64, 32) + struct.pack("<IQ", 1, 0)
               + _s("blk.0.attn_q.weight") + struct.pack("<I", 2) + struct.pack("<QQ", 256, 4)
               + struct.pack("<IQ", 12, 4096))
    data = magic + struct.pack("<IQQ", 3, 2, 3) + meta + tensors
    path.write_bytes(data[:len(data) - truncate] if truncate else data)
    return path


def test_header_gives_bytes_per_ggml_type_by_hand(tmp_path):
    info = read_gguf(_tiny_gguf(tmp_path / "tiny.gguf"))
    # F16 64 x 32 = 2,048 elements x 2 bytes = 4,096; Q4_K 256 x 4 = 1,024 elements = 4 blocks x 144 = 576
    assert dict(info.bytes_by_type) == {"F16": 4096, "Q4_K": 576}
    assert dict(info.elements_by_type) == {"F16": 2048, "Q4_K": 1024}
    assert info.tensor_bytes == 4672 and info.parameters == 3072 and info.tensors == 2 and info.version == 3
    assert info.metadata["general.architecture"] == "llama" and info.metadata["llama.block_count"] == 2
    assert info.metadata["tokenizer.ggml.tokens"] == "[3 items]"


@pytest.mark.parametrize("kw", [dict(truncate=5), dict(magic=b"GGML")])
def test_broken_files_are_named_errors(tmp_path, kw):
    with pytest.raises(InputError) as err:
        read_gguf(_tiny_gguf(tmp_path / "bad.gguf", **kw))
    assert "bad.gguf" in str(err.value)


def test_model_command_reports_the_stored_types(tmp_path, capsys):
    path = _tiny_gguf(tmp_path / "tiny.gguf")
    assert main(["model", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["result"]["checkpoint"]
    assert d["bytes_by_type"] == {"F16": 4096, "Q4_K": 576} and d["architecture"] == "llama"
    assert main(["model", str(path)]) == 0
    text = capsys.readouterr().out
    assert "Q4_K" in text and "4.5" in text          # 576 bytes x 8 / 1,024 elements = 4.5 bits
    assert main(["model", str(tmp_path / "missing.gguf")]) == 2


# ---- the architecture from GGUF metadata -----------------------------------------------------------------------
def _kv(key: str, vtype: int, fmt: str, value) -> bytes:
    return _s(key) + struct.pack("<I", vtype) + struct.pack(fmt, value)


def _llama_gguf(path, *, tied: bool = False, arch: str = "llama"):
    """A tiny Llama as llama.cpp's convert_hf_to_gguf.py writes it (names from llama.cpp's tensor map), all F32:
    hidden 64, 2 layers, 4 heads of 16 (2 KV heads), MLP 128, vocabulary 100 (from the token list)."""
    h, n, kv_dim, i, v = 64, 2, 32, 128, 100
    meta = [_s("general.architecture") + struct.pack("<I", 8) + _s(arch),
            _kv(f"{arch}.embedding_length", 4, "<I", h), _kv(f"{arch}.block_count", 4, "<I", n),
            _kv(f"{arch}.feed_forward_length", 4, "<I", i), _kv(f"{arch}.attention.head_count", 4, "<I", 4),
            _kv(f"{arch}.attention.head_count_kv", 4, "<I", 2), _kv(f"{arch}.context_length", 4, "<I", 2048),
            _kv(f"{arch}.rope.freq_base", 6, "<f", 500000.0),
            _s("tokenizer.ggml.tokens") + struct.pack("<I", 9) + struct.pack("<IQ", 8, v)
            + b"".join(_s(f"t{k}") for k in range(v))]
    shapes = [("token_embd.weight", (h, v)), ("output_norm.weight", (h,)), ("rope_freqs.weight", (8,))]
    if not tied:
        shapes.append(("output.weight", (h, v)))
    for b in range(n):
        shapes += [(f"blk.{b}.attn_norm.weight", (h,)), (f"blk.{b}.attn_q.weight", (h, h)),
                   (f"blk.{b}.attn_k.weight", (h, kv_dim)), (f"blk.{b}.attn_v.weight", (h, kv_dim)),
                   (f"blk.{b}.attn_output.weight", (h, h)), (f"blk.{b}.ffn_norm.weight", (h,)),
                   (f"blk.{b}.ffn_gate.weight", (h, i)), (f"blk.{b}.ffn_up.weight", (h, i)),
                   (f"blk.{b}.ffn_down.weight", (i, h))]
    tensors = b"".join(_s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", x) for x in dims)
                       + struct.pack("<IQ", 0, 0) for name, dims in shapes)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, len(shapes), len(meta)) + b"".join(meta) + tensors)
    return path


@pytest.mark.parametrize("tied", [False, True])
def test_llama_architecture_from_gguf_metadata_by_hand(tmp_path, tied):
    from gpuplan.models.gguf import spec_from_gguf
    info = read_gguf(_llama_gguf(tmp_path / "tiny.gguf", tied=tied))
    m = spec_from_gguf(info)
    # per layer: q 64x64 + k, v 64x32 + o 64x64 + gate, up, down 64x128 + 2 norms of 64 = 36,992; x 2 layers
    # + embedding 100x64 + final norm 64 (+ untied output 100x64)
    expected = 2 * 36_992 + 6_400 + 64 + (0 if tied else 6_400)
    assert (m.model_type, m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim) == \
        ("llama", 2, 64, 4, 2, 16)
    assert m.vocab_size == 100 and m.tie_embeddings is tied and m.intermediate_size == 128
    assert m.params_total == expected
    # the file holds the same elements plus llama.cpp's 8-element rope_freqs table
    assert info.parameters == expected + 8 and info.weight_parameters == expected


def test_model_command_gives_the_architecture_of_a_gguf(tmp_path, capsys):
    path = _llama_gguf(tmp_path / "tiny.gguf")
    assert main(["model", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["result"]
    assert d["modelled"] is True and d["model"]["num_layers"] == 2 and d["model"]["params_match_file"] is True
    assert main(["model", str(path)]) == 0
    assert "2 layers" in capsys.readouterr().out


def test_unknown_gguf_architecture_still_reports_the_bytes(tmp_path, capsys):
    path = _llama_gguf(tmp_path / "odd.gguf", arch="rwkv6")
    assert main(["model", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["result"]
    assert d["modelled"] is False and "rwkv6" in d["not_modelled"] and d["checkpoint"]["tensors"] == 22
