"""torch AdamW's optimizer-step traffic by implementation (estimate/optim.py), against the kernel times measured on
an H200 (validation/device/h200-2026-12-04-kernels.jsonl)."""
import pytest

from gpuplan import api
from gpuplan.estimate import optim


def test_adamw_element_passes_by_implementation():
    # foreach: mul_ 2 + lerp_ 3 + mul_ 2 + addcmul_ 3 + sqrt 2 + div_ 2 + add_ 2 + addcdiv_ 4 = 20 element accesses;
    # fused: read p, g, m, v and write p, m, v = 7
    assert optim.torch_adamw_traffic_bytes_per_param("foreach", 4.0) == 80.0
    assert optim.torch_adamw_traffic_bytes_per_param("fused", 4.0) == 28.0
    assert optim.torch_adamw_traffic_bytes_per_param("foreach", 2.0) == 40.0     # 16-bit params keep 16-bit states


def test_only_torch_optimizer_frameworks_follow_the_implementation():
    assert optim.step_traffic_bytes_per_param("adamw", "hf", "foreach", 4.0) == 80.0
    # Megatron-LM and DeepSpeed step with their own fused Adam whatever the field says
    assert optim.step_traffic_bytes_per_param("adamw", "megatron", "foreach", 4.0) == 30.0
    assert optim.step_traffic_bytes_per_param("adamw-8bit", "hf", "foreach", 4.0) == 18.0


def _opt_ms(impl: str) -> float:
    est = api.estimate({"model": "llama-3.2-1b", "task": "finetune", "hardware": {"gpu": "h200-sxm"},
                        "train": {"method": "full", "precision": "bf16", "seq_len": 2048, "micro_batch": 8,
                                  "recompute": "none", "optimizer_impl": impl}})
    return est.performance.breakdown["optimizer"] * 1e3


def test_llama_1b_optimizer_step_matches_the_measured_kernels():
    # measured on the H200: foreach AdamW kernels 26.4 ms, fused 10.0 ms for 1.24e9 fp32 parameters
    foreach, fused = _opt_ms("foreach"), _opt_ms("fused")
    assert foreach / fused == pytest.approx(20 / 7, rel=1e-6)
    assert foreach == pytest.approx(26.4, rel=0.10)
    assert fused == pytest.approx(10.0, rel=0.15)


def _hf_ttft(concurrency: int, prompt: int = 1024, engine: str = "hf") -> float:
    est = api.estimate({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h200-sxm"},
                        "infer": {"engine": engine, "weights": "bf16", "prompt_len": prompt, "output_len": 64,
                                  "concurrency": concurrency}})
    return est.performance.ttft_s


def test_hf_generate_prefills_the_whole_batch_before_the_first_token():
    """HF generate runs every prompt of a static batch in one forward: TTFT grows by one prompt's compute per
    sequence (measured on the H200, validation/gathered/measured.csv: 16 x 1024 tokens 0.44 s, 64 x 512 0.88 s,
    against 0.026 s for one 512-token prompt)."""
    one, b16, b32 = _hf_ttft(1), _hf_ttft(16), _hf_ttft(32)
    per_prompt = (b32 - b16) / 16
    assert b16 - one == pytest.approx(15 * per_prompt, rel=0.05)      # linear in the batch
    assert b16 > 8 * one
    # a continuous-batching engine admits one request's prompt at a time: its TTFT does not carry the batch
    assert _hf_ttft(16, engine="vllm") < 0.25 * b16


def test_hf_lora_steps_carry_the_adapters_elementwise_bytes():
    """peft's adapters on every linear of an HF layer under autocast: traced 591.125h + 95i + 86kv bytes per token per
    layer against the plain layer's 358.188h + 28i + 52kv (scripts/trace_elementwise.py, hf_lora vs hf)."""
    from gpuplan.estimate import elementwise as el
    h, i, kv = 4096.0, 14336.0, 1024.0
    plain = el.eager_bytes("hf", "rms", h, i, kv, gated=True, rope=True)
    lora = el.eager_bytes("hf", "rms", h, i, kv, gated=True, rope=True, lora=True)
    assert plain == pytest.approx(358.188 * h + 28.0 * i + 52.0 * kv)
    assert lora == pytest.approx(591.125 * h + 95.0 * i + 86.0 * kv)
    # torchtitan's own layer has no peft adapters: the flag leaves its recipe alone
    assert el.eager_bytes("torchtitan", "rms", h, i, kv, gated=True, rope=True, lora=True) == \
        el.eager_bytes("torchtitan", "rms", h, i, kv, gated=True, rope=True)


def test_lora_step_memory_bound_time_grows_by_the_traced_ratio():
    def mem_ms(method: str) -> float:
        est = api.estimate({"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "h200-sxm"},
                            "train": {"method": method, "precision": "bf16", "seq_len": 2048, "micro_batch": 4,
                                      "recompute": "none", "loss": "full"}})
        return est.performance.breakdown["compute_memory_bound"]
    h, i, kv = 4096.0, 14336.0, 1024.0
    ratio = (591.125 * h + 95.0 * i + 86.0 * kv) / (358.188 * h + 28.0 * i + 52.0 * kv)
    # the loss term (bytes per logit) is the same for both: the layer part grows by the ratio, the whole by less
    assert 1.2 < mem_ms("lora") / mem_ms("full") < ratio
