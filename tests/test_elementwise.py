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


def test_calibration_layer_ratio_is_one():
    # llm-foundry MPT (LayerNorm, plain 4h MLP, no RoPE, eager): the layer elementwise_passes was fitted on
    for h in (2048, 4096, 7168):
        r = ew.traffic_ratio("eager", "hf", "layernorm", h, 4 * h, h, gated=False, rope=False, gqa=False)
        assert r == pytest.approx(1.0, rel=1e-12)


def test_llama_8b_eager_over_compiled_hand_arithmetic():
    # Llama 3.1 8B h 4096, i 14336, kv 8·128 = 1024, torchtitan:
    # eager 361.88·4096 + 29.6·14336 + 17.415·1024 = 1,924,439.2 B/token/layer
    # compiled 160·... : 40·4096 + 8·5120 + 16·14336 + 8·5120 = 475,136
    kw = dict(gated=True, rope=True, gqa=True)
    e = ew.traffic_ratio("eager", "torchtitan", "rms", 4096, 14336, 1024, **kw)
    c = ew.traffic_ratio("compiled", "torchtitan", "rms", 4096, 14336, 1024, **kw)
    assert e / c == pytest.approx(1_924_439.2 / 475_136, rel=1e-6)


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
