"""HF generate under transformers before 4.36 holds the old KV tuple beside the new one in a decode step
(estimate/memory.py legacy_tuple_cache_bytes; v4.35.0 modeling_llama.py LlamaAttention.forward grows the cache
with torch.cat into a new tuple while generation/utils.py greedy_search still references the old one)."""
from __future__ import annotations

from types import SimpleNamespace

from gpuplan import api


def _scn(version: str, batch: int = 16) -> dict:
    return {"model": "llama-2-13b-hf", "task": "infer", "hardware": {"gpu": "a100-sxm-80gb", "count": 1},
            "infer": {"engine": "hf", "weights": "fp16", "kv_cache": "fp16", "prompt_len": 512, "output_len": 512,
                      "concurrency": batch, "transformers_version": version}}


def test_legacy_tuple_cache_adds_the_old_tuple():
    # Llama-2-13B: 40 layers x (K + V) x 5120 x 2 bytes = 819,200 bytes a token; the last decode step of a
    # 512 + 512 run holds the old tuple of 1,023 tokens for each of 16 sequences: 13,408,665,600 bytes
    from gpuplan.estimate.memory import legacy_tuple_cache_bytes
    inf = SimpleNamespace(engine="hf", output_len=512, transformers_version="4.35.2")
    assert legacy_tuple_cache_bytes(inf, 16 * 819_200, 1024) == 13_408_665_600
    old = api.estimate(_scn("4.35.2")).memory
    new = api.estimate(_scn("4.46.3")).memory
    # the decode step is then the peak, the old tuple in its temporary share
    assert old.components["temporary"] - new.components["temporary"] >= 13_408_665_600
    assert old.components["kv_cache"] == new.components["kv_cache"]
    assert old.peak_bytes_per_gpu > new.peak_bytes_per_gpu + 12e9


def test_later_or_unknown_transformers_hold_one_cache():
    a = api.estimate(_scn("unknown", 4)).memory.peak_bytes_per_gpu
    b = api.estimate(_scn("4.36.0", 4)).memory.peak_bytes_per_gpu
    assert a == b



def test_autogptq_kernel_buffers_follow_auto_gptq_050():
    """auto_gptq 0.5.0 autogptq_post_init: exllamav2 keeps one scratch of max(in x out x 2 + 128 + out x 2048 x 8 x 4
    + 128) over its linears; Llama-2-13B's gate/up (5120 -> 13824): 141,557,888 + 905,969,792 = 1,047,527,680
    bytes. exllama (v1) without act-order: temp_dq of in x out fp16 (141,557,760) + a 1 x 1 temp_state."""
    from gpuplan.estimate.quant_kernels import gptq_kernel_buffer_bytes
    shapes = [(5120, 5120), (5120, 13824), (13824, 5120)]
    assert gptq_kernel_buffer_bytes("exllamav2", shapes) == 1_047_527_680
    assert gptq_kernel_buffer_bytes("exllama", shapes) == 141_557_762
    assert gptq_kernel_buffer_bytes("cuda-old", shapes) == 0 and gptq_kernel_buffer_bytes(None, shapes) == 0
    scn = _scn("4.35.2", 1)
    scn["infer"]["weights"] = "gptq-int4"
    base = api.estimate(scn).memory.components["temporary"]
    scn["infer"]["gptq_kernel"] = "exllamav2"
    assert api.estimate(scn).memory.components["temporary"] - base == 1_047_527_680
