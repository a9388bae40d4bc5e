"""Element-wise HBM traffic by fusion mode (estimate/elementwise.py, scripts/trace_elementwise.py).

Expected numbers are hand counts: every aten op reads its inputs and writes its outputs once."""
from __future__ import annotations

import pytest

from gpuplan.estimate import elementwise as ew
from script_module import load_script


def _tracer():
    torch = pytest.importorskip("torch")
    return torch, load_script("scripts/trace_elementwise.py")


def test_counter_swiglu_forward_backward_hand_count():
    # y = silu(a) * b on n bf16 elements (2 B each), grad given; bytes:
    # fwd: silu r n w n = 4n; mul r 2n w n = 6n
    # bwd: grad*b (6n), grad*silu(a) (6n), silu_backward(grad_s, a) r 2n w n (6n)  -> 28n in all
    torch, mod = _tracer()
    n = 64
    a = torch.randn(n, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(n, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(n, dtype=torch.bfloat16)
    with mod.ByteCounter() as bc:
        (torch.nn.functional.silu(a) * b).backward(g)
    assert bc.total == 28 * n          # bytes (each term above is already in bytes)


def test_counter_rmsnorm_forward_hand_count():
    # torchtitan RMSNorm forward on x (1, 2, 4) bf16 = 8 elements, weight 4 elements:
    # to fp32 r16 w32 = 48; pow r32 w32 = 64; mean r32 w8 = 40; +eps r8 w8 = 16; rsqrt 16;
    # x*r r32+8 w32 = 72; type_as r32 w16 = 48; *weight r16+8 w16 = 40   -> 344
    torch, mod = _tracer()
    x = torch.randn(1, 2, 4, dtype=torch.bfloat16)
    w = torch.ones(4, dtype=torch.bfloat16)
    with mod.ByteCounter() as bc:
        mod._rms(x, w)
    assert bc.total == 344


def test_counter_skips_views_and_matmuls():
    torch, mod = _tracer()
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    w = torch.randn(8, 8, dtype=torch.bfloat16)
    with mod.ByteCounter() as bc:
        (x @ w).view(32).transpose(0, 0)
    assert bc.total == 0


def test_compiled_region_bytes_hand_count():
    # tiny GQA Llama layer h=4, i=8, kv=2: two add+norm regions 2·20·4 = 160; RoPE 8·(4+2) = 48;
    # SwiGLU 16·8 = 128; repeat_kv copies 8·(4+2) = 48  -> 384
    assert ew.region_bytes("compiled", 4, 8, 2, gated=True, rope=True, gqa_copies=True) == 384
    # framework kernels: norm and residual apart 2·22·4 = 176; RoPE 48; SwiGLU 128; GQA in the kernel -> 352
    assert ew.region_bytes("fused", 4, 8, 2, gated=True, rope=True, gqa_copies=True) == 352
    # GPT layer, plain GELU, no RoPE: 160 + 10·8 = 240
    assert ew.region_bytes("compiled", 4, 8, 2, gated=False, rope=False, gqa_copies=False) == 240


def test_eager_share_is_the_h200_kernel_arithmetic():
    # HK03 (validation/device/h200-2026-12-04-kernels.jsonl): Llama-3.2-1B, 16 layers, h 2048, i 8192, kv 512,
    # vocabulary 128,256, 8 x 2048 tokens; 123.9 ms of neither-GEMM-nor-attention-nor-optimizer kernels.
    # layer: 358.188·2048 + 28·8192 + 52·512 = 989,569 B per token per layer; loss 36 B per logit
    moved = 989_569.0 * 16 * 16_384 + 36 * 16_384 * 128_256
    assert ew.bandwidth_share("eager") == pytest.approx(moved / 0.1239 / 4.8e12, abs=1e-4)
    # fused/compiled kernels and plain vectorised ops: the measured copy rate, 4.20 of 4.8 TB/s
    for mode in ("compiled", "fused", "vectorized"):
        assert ew.bandwidth_share(mode) == pytest.approx(4.20 / 4.8, abs=1e-3)
    with pytest.raises(ValueError, match="no measured row"):
        ew.bandwidth_share("magic")


def test_eager_loss_only_where_the_stack_upcasts_logits():
    # upcast (2 + 4) + log_softmax (4 + 4) + zero-filled grad (4) + log_softmax backward (8 + 4) + downcast (4 + 2)
    assert ew.eager_loss_bytes_per_logit("hf", "eager") == 6 + 8 + 4 + 12 + 6
    assert ew.eager_loss_bytes_per_logit("torchtitan", "eager") == 36
    assert ew.eager_loss_bytes_per_logit("torchtitan", "compiled") is None
    assert ew.eager_loss_bytes_per_logit("megatron", "fused") is None


def test_llama_8b_eager_over_compiled_hand_arithmetic():
    # Llama 3.1 8B h 4096, i 14336, kv 8·128 = 1024, torchtitan:
    # eager 361.88·4096 + 29.6·14336 + 17.415·1024 = 1,924,439.2 B/token/layer
    # compiled 160·... : 40·4096 + 8·5120 + 16·14336 + 8·5120 = 475,136
    kw = dict(gated=True, rope=True, gqa=True)
    e = ew.layer_bytes("eager", "torchtitan", "rms", 4096, 14336, 1024, **kw)
    c = ew.layer_bytes("compiled", "torchtitan", "rms", 4096, 14336, 1024, **kw)
    assert e == pytest.approx(1_924_439.2, rel=1e-6)
    assert c == 475_136


def test_lora_element_wise_time_matches_the_h200_profile():
    # HK04: Llama-3.1-8B LoRA r16 on one H200, 4 x 2048 tokens, transformers eager: 324 ms of element-wise and
    # loss kernels measured. Priced: the base layer and the loss at the eager share, peft's adapter ops at the
    # copy rate (both shares measured on other kernels: HK03 and the copy benchmark)
    from gpuplan.estimate.speed import train_performance
    from gpuplan.hardware import get_gpu
    from gpuplan.models import get_model
    from gpuplan.scenario import scenario_from_dict
    scn = scenario_from_dict({
        "model": "llama-3.1-8b", "task": "finetune", "framework": "hf", "hardware": {"gpu": "h200-sxm", "count": 1},
        "train": {"method": "lora", "lora_rank": 16, "precision": "bf16", "seq_len": 2048, "micro_batch": 4,
                  "global_batch": 4, "recompute": "none"}})
    perf = train_performance(scn, get_model("llama-3.1-8b"), get_gpu("h200-sxm"))
    assert perf.breakdown["compute_memory_bound"] == pytest.approx(0.324, rel=0.05)


def test_stack_mode_defaults():
    assert ew.stack_mode("torchtitan", compile=True) == "compiled"
    assert ew.stack_mode("torchtitan", compile=False) == "eager"
    assert ew.stack_mode("hf", compile=False) == "eager"
    assert ew.stack_mode("megatron", compile=False) == "fused"
    assert ew.stack_mode("hf", compile=False, tool="unsloth") == "fused"
    assert ew.stack_mode("hf", compile=False, loss="fused-linear") == "fused"
    with pytest.raises(ValueError, match="mode"):
        ew.region_bytes("eager", 1, 1, 1, gated=True, rope=True, gqa_copies=False)


def _tps(compile_on: bool) -> float:
    from gpuplan.scenario import scenario_from_dict
    from gpuplan.models import get_model
    from gpuplan.hardware import get_gpu
    from gpuplan.estimate.speed import train_performance
    scn = scenario_from_dict({
        "model": "llama-3.1-8b", "task": "train", "framework": "torchtitan",
        "hardware": {"gpu": "h100-sxm", "count": 8, "gpus_per_node": 8},
        "parallel": {"dp": 8, "zero": 3},
        "train": {"precision": "bf16", "seq_len": 8192, "micro_batch": 2, "global_batch": 16,
                  "recompute": "selective", "compile": compile_on, "compile_loss": False}})
    return train_performance(scn, get_model("llama-3.1-8b"), get_gpu("h100-sxm")).tokens_per_s_per_gpu


def test_eager_torchtitan_is_slower_than_compiled():
    # same run, same loss: only the element-wise fusion differs; eager moves ~4x the bytes
    assert _tps(False) < _tps(True) * 0.95


@pytest.mark.parametrize("recipe", ["torchtitan", "layernorm_gelu"])
def test_measured_constants_match_a_fresh_trace(recipe):
    # the module's eager constants are what the script measures (re-traced here, five small layers)
    _, mod = _tracer()
    got = mod.coefficients(recipe)
    want = ew.EAGER_MEASURED[recipe]
    for g, w in zip(got[:3], want):
        assert g == pytest.approx(w, abs=0.01)
