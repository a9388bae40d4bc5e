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


def test_shares_are_the_h200_kernel_arithmetic():
    # validation/device/h200-2026-12-04b-elementwise_layers.csv: priced bytes / (kernel seconds x 4.8 TB/s).
    # transformers' layer: 1B 1.6213e10 B in 5.589 ms, 8B 1.5743e10 B in 5.758 ms -> mean share
    hf = (1.6213098889e10 / 0.005589 + 1.5743336841e10 / 0.005758) / 2 / 4.8e12
    assert ew.bandwidth_share("eager", "hf") == pytest.approx(hf, abs=2e-4)
    # the loss: 36 B x 16,384 x 128,256 in 27.287 ms
    assert ew.bandwidth_share("eager", "loss") == pytest.approx(36 * 16_384 * 128_256 / 0.027287 / 4.8e12, abs=2e-4)
    # a 1 GiB copy reads and writes 2^31 B in 0.506 ms: the vectorised casts' rate
    assert ew.bandwidth_share("vectorized") == pytest.approx(2 ** 31 / 0.000506 / 4.8e12, abs=2e-3)
    # a recipe without a row of its own takes its mode's; framework-fused kernels take the compiled layers' mean
    assert ew.bandwidth_share("compiled", "other") == ew.bandwidth_share("fused", "hf") == pytest.approx(
        (ew.bandwidth_share("compiled", "torchtitan") + ew.bandwidth_share("compiled", "hf")
         + ew.bandwidth_share("compiled", "layernorm_gelu")) / 3, abs=1e-4)
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
    # loss kernels measured. Priced: the base layer and the loss at their eager shares, peft's adapter ops at the
    # copy rate (shares measured on other kernels: single layers, the loss block and a copy)
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


def test_counter_rmsnorm_module_bytes_per_element_hand_count():
    # transformers' LlamaRMSNorm on bf16 x, per element, forward: up-cast (read 2 write 4) 6, pow 8, mean (read 4) 4,
    # x * rsqrt 8, down-cast (read 4 write 2) 6, * weight (bf16) 4 = 36; backward: * weight 4, * normed 6 and the
    # weight's sum over tokens 2, the down-cast's backward 6, * rsqrt 8, * x 12, sum over h 4, mean's backward (div) 8,
    # pow's backward (pow 8, * 2 8, * grad 12), the two x-gradients' add 12, the up-cast's backward 6 = 96 -> 132.
    # Gemma2RMSNorm multiplies (1 + w) in fp32 before the cast: forward 36 - 4 + 8 = 40; backward the down-cast's
    # backward 6, * (1 + w) in fp32 8, * normed 12 and the sum 4, then as Llama's from * rsqrt (8+12+4+8+8+8+12+12+6)
    # = 108 -> 148
    _, mod = _tracer()
    pytest.importorskip("transformers")
    assert mod.norm_bytes_per_element("fp32_upcast") == pytest.approx(6 + 8 + 4 + 8 + 6 + 4 + 96, abs=1e-6)
    assert mod.norm_bytes_per_element("fp32") == pytest.approx(40 + 108, abs=1e-6)
    assert ew.EAGER_NORM_BYTES == {"fp32_upcast": 132.0, "fp32": 148.0}


def test_softcap_bytes_per_logit_hand_count():
    # logits / cap, tanh, * cap on bf16: forward 3 x (read 2 + write 2) = 12; backward * cap 4, tanh_backward (read
    # grad and output, write) 6, / cap 4 = 14 -> 26
    _, mod = _tracer()
    assert mod.softcap_bytes_per_logit() == 12 + 14 == ew.SOFTCAP_BYTES_PER_LOGIT


class _Traits:
    def __init__(self, **kw):
        self.norm_dtype, self.norm_placement, self.qk_norm = "fp32_upcast", "pre", "none"
        self.fused_qkv = self.fused_gate_up = False
        self.final_logit_softcap = None
        self.__dict__.update(kw)


def test_trait_bytes_hand_arithmetic():
    # Gemma-2-2B: h 2304, i 9216, q 8 x 256 = 2048, kv 4 x 256 = 1024. Sandwich of four Gemma norms against Llama's
    # two: (4·148 - 2·132)·2304 = 755,712
    g2 = _Traits(norm_dtype="fp32", norm_placement="sandwich")
    assert ew.eager_trait_bytes(g2, 2304, 9216, 1024, 2048) == (4 * 148 - 2 * 132) * 2304
    # Gemma-3: the same plus per-head q/k norms of its class on q and k: + 148·(2048 + 1024)
    g3 = _Traits(norm_dtype="fp32", norm_placement="sandwich", qk_norm="per_head")
    assert ew.eager_trait_bytes(g3, 2304, 9216, 1024, 2048) == (4 * 148 - 2 * 132) * 2304 + 148 * 3072
    # Qwen3-8B: h 4096, q 4096, kv 8 x 128: Llama-class q/k norms 132·(4096 + 1024)
    assert ew.eager_trait_bytes(_Traits(qk_norm="per_head"), 4096, 12288, 1024, 4096) == 132 * 5120
    # Phi-3-mini: h 3072, i 8192, kv 3072: 18·3072 + 8·8192 + 52·3072
    phi = _Traits(fused_qkv=True, fused_gate_up=True)
    assert ew.eager_trait_bytes(phi, 3072, 8192, 3072, 3072) == 18 * 3072 + 8 * 8192 + 52 * 3072
    # a Llama layer adds nothing
    assert ew.eager_trait_bytes(_Traits(), 4096, 14336, 1024, 4096) == 0
    # compiled: two extra norm regions of 14 B per element on h, on top of the Llama layer's regions
    base = ew.region_bytes("compiled", 2304, 9216, 1024, gated=True, rope=True, gqa_copies=True)
    assert ew.region_bytes("compiled", 2304, 9216, 1024, gated=True, rope=True, gqa_copies=True,
                           extra_norm_elements=2 * 2304) == base + 14 * 2 * 2304


@pytest.mark.parametrize("family,traits", [
    ("gemma2", dict(norm_dtype="fp32", norm_placement="sandwich")),
    ("qwen3", dict(qk_norm="per_head")),
    ("phi3", dict(fused_qkv=True, fused_gate_up=True)),
])
def test_composed_traits_match_the_traced_family_layer(family, traits):
    # the module-level counts (norm per element, fused splits) composed on the Llama layer reproduce a fresh trace of
    # the family's own transformers decoder layer (widths with q = h, as the tracer builds them) within 0.5 %
    _, mod = _tracer()
    pytest.importorskip("transformers")
    t = _Traits(**traits)
    a, b, c = ew.EAGER_MEASURED["hf"]
    for h, i, nh, nkv in mod.SHAPES[:2]:
        kv = nkv * (h // nh)
        traced = mod.layer_bytes(family, h, i, nh, nkv)[0]
        composed = a * h + b * i + c * kv + 1144.0 + ew.eager_trait_bytes(t, h, i, kv, h)
        assert composed == pytest.approx(traced, rel=0.005)


def test_softcap_only_on_an_eager_hf_step():
    from gpuplan.models import get_model
    g = get_model("gemma-2-2b")
    assert g.traits.final_logit_softcap == 30.0
    assert ew.softcap_bytes_per_logit(g, "hf", "eager") == 26
    assert ew.softcap_bytes_per_logit(g, "hf", "compiled") == 0
    assert ew.softcap_bytes_per_logit(get_model("llama-3.2-1b"), "hf", "eager") == 0


def test_llama_layer_bytes_unchanged_by_traits():
    # every Llama-architecture model keeps the traced Llama layer: 358.188·h + 28·i + 52·kv (Llama-3.2-1B:
    # h 2048, i 8192, kv 8 x 64 = 512)
    from gpuplan.models import get_model
    m = get_model("llama-3.2-1b")
    assert ew.model_layer_bytes(m, 8192, "hf", "eager") == pytest.approx(358.188 * 2048 + 28 * 8192 + 52 * 512)
    assert ew.model_layer_bytes(m, 8192, "hf", "compiled") == ew.region_bytes(
        "compiled", 2048, 8192, 512, gated=True, rope=True, gqa_copies=True)


def test_megatron_unfused_glu_bytes_are_the_traced_chunk_silu_mul():
    # Megatron-Core's gated activation with bias_activation_fusion off (mlp.py L146-155 @2ff0f099):
    # x = torch.chunk(x, 2, dim=-1); silu(x[0]) * x[1] on n tokens of a 2i-wide bf16 fc1 output. Hand count per i:
    # fwd silu 4 + mul 6, bwd two products 12 + silu_backward 6, the chunk's backward cat r 4 w 4 = 36
    torch, mod = _tracer()
    n, i = 4, 16
    x = torch.randn(n, 2 * i, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(n, i, dtype=torch.bfloat16)
    with mod.ByteCounter() as bc:
        a, b = torch.chunk(x, 2, dim=-1)
        (torch.nn.functional.silu(a) * b).backward(g)
    assert bc.total == 36 * n * i
    assert ew.UNFUSED_GLU_BYTES == 36.0


def test_unfused_activation_adds_its_excess_over_the_fused_region_only_when_gated():
    h, i, kv = 4096.0, 14336.0, 1024.0
    fused = ew.region_bytes("fused", h, i, kv, gated=True, rope=True, gqa_copies=True)
    unfused = ew.region_bytes("fused", h, i, kv, gated=True, rope=True, gqa_copies=True, activation_fused=False)
    assert unfused - fused == (36.0 - 16.0) * i
    assert ew.region_bytes("fused", h, i, kv, gated=False, rope=True, gqa_copies=True, activation_fused=False) == \
        ew.region_bytes("fused", h, i, kv, gated=False, rope=True, gqa_copies=True)


def test_megatron_unfused_activation_time_by_hand():
    # Llama-3.1-8B on one H100, Megatron, 1 x 4096 tokens, no recompute: the unfused SwiGLU moves 20 B more per
    # element of i = 14,336 per token and layer, 32 layers, at the fused kernels' measured share of the HBM bandwidth
    from gpuplan.estimate.speed import train_performance
    from gpuplan.hardware import get_gpu
    from gpuplan.models import get_model
    from gpuplan.scenario import scenario_from_dict

    def mem_bound(fused: bool) -> float:
        scn = scenario_from_dict({
            "model": "llama-3.1-8b", "task": "train", "framework": "megatron",
            "hardware": {"gpu": "h100-sxm", "count": 1},
            "train": {"precision": "bf16", "seq_len": 4096, "micro_batch": 1, "global_batch": 1,
                      "recompute": "none", "activation_fusion": fused}})
        return train_performance(scn, get_model("llama-3.1-8b"), get_gpu("h100-sxm")).breakdown["compute_memory_bound"]

    gpu = get_gpu("h100-sxm")
    extra = 20.0 * 14336 * 4096 * 32 / (float(gpu.mem_bandwidth_bytes_per_s) * ew.bandwidth_share("fused"))
    assert mem_bound(False) - mem_bound(True) == pytest.approx(extra, rel=1e-6)


def test_activation_fusion_is_a_megatron_switch():
    from gpuplan.errors import InputError
    from gpuplan.scenario import scenario_from_dict
    with pytest.raises(InputError, match="bias_activation_fusion"):
        scenario_from_dict({"model": "llama-3.1-8b", "task": "train", "framework": "torchtitan",
                            "hardware": {"gpu": "h100-sxm", "count": 1},
                            "train": {"seq_len": 4096, "micro_batch": 1, "global_batch": 1,
                                      "activation_fusion": False}})
