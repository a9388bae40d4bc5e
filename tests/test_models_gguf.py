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
