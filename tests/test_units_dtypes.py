"""Units and the closed dtype vocabulary: hand-checked values (sources in the dtypes module docstring)."""
import pytest

from gpuplan.dtypes import WEIGHT_FORMATS, dtype_bytes, kv_bytes, weight_format
from gpuplan.errors import UnknownNameError
from gpuplan.units import GB, GiB, MiB, fmt_bytes, fmt_count, fmt_seconds


def test_gb_and_gib_differ():
    assert GB == 1_000_000_000 and GiB == 1_073_741_824 and MiB == 1_048_576


@pytest.mark.parametrize("n,unit,text", [
    (GiB, "GiB", "1.00 GiB"), (80 * GB, "GB", "80.00 GB"), (80 * GB, "GiB", "74.51 GiB"),
    (1536 * MiB, "MiB", "1,536.00 MiB"), (None, "GiB", "-"),
])
def test_fmt_bytes(n, unit, text):
    assert fmt_bytes(n, unit) == text


@pytest.mark.parametrize("s,text", [
    (5e-4, "500 µs"), (0.0123, "12.3 ms"), (1.5, "1.50 s"), (119.0, "119.00 s"), (120.0, "2.0 min"),
    (3 * 3600.0, "3.0 h"), (3 * 86400.0, "3.0 days"), (None, "-"),
])
def test_fmt_seconds_boundaries(s, text):
    assert fmt_seconds(s) == text


@pytest.mark.parametrize("n,text", [(999, "999"), (1500, "1.50k"), (2.5e6, "2.50M"), (7e9, "7.00B"), (1.2e12, "1.20T"),
                                    (-3000, "-3.00k"), (None, "-")])
def test_fmt_count(n, text):
    assert fmt_count(n) == text


@pytest.mark.parametrize("name,nbytes", [("fp32", 4), ("tf32", 4), ("bf16", 2), ("fp16", 2), ("fp8", 1),
                                         ("int4", 0.5), ("float16", 2), ("BFloat16", 2), (" half ", 2)])
def test_dtype_bytes(name, nbytes):
    assert dtype_bytes(name) == nbytes


@pytest.mark.parametrize("name,bits", [
    ("gptq-int4", 4.15625),              # 4 + fp16 scale/128 + 4-bit zero/128
    ("awq-int4", 4.15625),
    ("nf4", 4.5),                        # 4 + fp32 absmax per 64
    ("nf4-dq", 4.126953125),             # 4 + 8-bit absmax/64 + fp32 second-level scale per 64*256
    ("gguf-q4_0", 4.5), ("gguf-q8_0", 8.5), ("gguf-q6_k", 6.5625),
    ("bf16", 16), ("fp8", 8),
])
def test_weight_format_bits(name, bits):
    assert weight_format(name).bits == pytest.approx(bits, abs=1e-12)


@pytest.mark.parametrize("alias,name", [("awq", "awq-int4"), ("gptq", "gptq-int4"), ("bnb-nf4", "nf4-dq"),
                                        ("q4_k_m", "gguf-q4_k_m"), ("llm.int8", "int8"), ("bfloat16", "bf16")])
def test_weight_format_aliases(alias, name):
    assert weight_format(alias) is WEIGHT_FORMATS[name]


def test_quantized_formats_keep_16bit_embeddings():
    # GPTQ/AWQ/NF4 quantize the linears only; GGUF mixes are whole-file averages
    assert weight_format("awq-int4").scope == "linear" and weight_format("nf4").scope == "linear"
    assert weight_format("gguf-q4_k_m").scope == "file" and weight_format("bf16").scope == "all"


@pytest.mark.parametrize("name,nbytes", [("bf16", 2), ("fp8", 1), ("q8_0", 8.5 / 8), ("q4_0", 4.5 / 8)])
def test_kv_bytes(name, nbytes):
    assert kv_bytes(name) == nbytes


@pytest.mark.parametrize("fn,name,match", [(dtype_bytes, "fp9", "fp8"), (weight_format, "awq-int3", "awq-int4"),
                                           (kv_bytes, "fp7", "fp8")])
def test_unknown_names_are_errors_with_close_matches(fn, name, match):
    with pytest.raises(UnknownNameError) as err:
        fn(name)
    assert name in err.value.what and match in err.value.matches and err.value.fix
