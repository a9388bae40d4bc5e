"""llama.cpp's output skipping (docs/speed.md §3.32): from build 2540 (commit 557410b8, PR #6122, 2024-03-26) a
prompt's last layer runs its feed-forward, and the lm_head runs, over the positions whose logits are asked for only
(llama-bench: the last one); earlier builds ran them over every prompt token. infer.llamacpp_build selects it.

The expected ratios are counted from Llama-3.2-3B's config.json (hidden 3072, intermediate 8192, 28 layers, 24
query and 8 KV heads of 128, vocab 128256), not read from the code under test."""
import pytest

from gpuplan.estimate import speed
from gpuplan.hardware import get_gpu
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict

H, I, L, V, KV = 3072, 8192, 28, 128256, 8 * 128
ATTN = H * (H + KV + KV + H)      # q, k, v, o projections per token
FFN = 3 * H * I                   # gate, up, down per token
HEAD = H * V                      # lm_head (tied to the embedding) per token


def _scn(build, gpu="m2-ultra", prompt=512, engine="llama.cpp"):
    infer = {"weights": "bf16" if engine != "llama.cpp" else "gguf-f16", "kv_cache": "fp16", "engine": engine,
             "prompt_len": prompt, "output_len": 1, "concurrency": 1}
    if build is not None:
        infer["llamacpp_build"] = build
    return scenario_from_dict({"model": "llama-3.2-3b", "task": "infer", "hardware": {"gpu": gpu, "count": 1},
                               "infer": infer})


def _linear_time(build, tokens=512, gpu="m2-ultra"):
    scn = _scn(build, gpu, tokens)
    sv = speed.serving_model(scn, get_model("llama-3.2-3b"), get_gpu(gpu))
    return sv._linear_time(float(tokens), prefill=True)


@pytest.mark.parametrize("gpu", ["m2-ultra", "rtx-4090"])
@pytest.mark.parametrize("tokens", [512, 4096])
def test_output_skipping_removes_the_last_layers_ffn_and_the_head_rows(gpu, tokens, monkeypatch):
    # before build 2540: every token through every linear and the lm_head; from 2540: the last layer's FFN and the
    # lm_head over one row. With one GEMM efficiency for every shape the times go as the FLOPs.
    monkeypatch.setattr(speed, "gemm_efficiency", lambda *a, **k: 0.5)
    old = tokens * (L * (ATTN + FFN) + HEAD)
    new = tokens * (L * ATTN + (L - 1) * FFN) + FFN + HEAD
    assert _linear_time(2540, tokens, gpu) / _linear_time(2539, tokens, gpu) == pytest.approx(new / old, rel=1e-9)


def test_default_is_a_current_build():
    assert _linear_time(None) == _linear_time(7825)
    assert _linear_time(None) < _linear_time(1786)


def test_the_build_is_llamacpps_own_field():
    with pytest.raises(Exception, match="llamacpp_build"):
        _scn(7315, engine="vllm")


def test_the_boundary_is_the_build_of_commit_557410b8():
    # ggml-ci's run of 557410b8f06380560155ac7fcb8316d71ddc9837 (PR #6122's merge) prints `main: build = 2540`
    assert speed.LLAMACPP_OUTPUT_SKIP_BUILD == 2540
