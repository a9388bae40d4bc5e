"""gpuplan trace on tiny configs: exact bytes against hand counts, and fake == real."""
import builtins

import pytest

torch = pytest.importorskip("torch")

from gpuplan.errors import GpuplanError, MissingExtraError, UnsupportedError  # noqa: E402
from gpuplan.scenario import scenario_from_dict  # noqa: E402
from gpuplan.trace import trace  # noqa: E402

H, I, A, KV, D, L, V = 64, 96, 4, 2, 16, 2, 128

TINY = {"model_type": "llama", "hidden_size": H, "intermediate_size": I, "num_attention_heads": A,
        "num_key_value_heads": KV, "head_dim": D, "num_hidden_layers": L, "vocab_size": V,
        "tie_word_embeddings": False, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
        "hidden_act": "silu"}


def r512(n):          # the CUDA caching allocator rounds every block up to 512 bytes
    return -(-n // 512) * 512


def param_shapes():
    """Hand list of the tiny llama's parameter tensors (numel)."""
    layer = [A * D * H, KV * D * H, KV * D * H, H * A * D,      # q, k, v, o
             I * H, I * H, H * I,                              # gate, up, down
             H, H]                                             # input / post-attention RMSNorm
    return [V * H] + layer * L + [H, V * H]                   # embed, layers, final norm, lm_head


def scen(task="train", **kw):
    d = {"model": dict(TINY), "task": task, "hardware": {"gpu": "h100-sxm"}}
    d.update(kw)
    return scenario_from_dict(d)


def test_fp32_training_weights_grads_adamw_exact():
    r = trace(scen(train={"precision": "fp32", "seq_len": 8, "micro_batch": 1, "attention": "sdpa"}))
    params = sum(r512(4 * n) for n in param_shapes())
    states = sum(2 * r512(4 * n) for n in param_shapes())
    assert r.phase == "optimizer_step"            # tiny activations: the step (states + foreach temp) wins
    assert r.details["weights:weights"] == params
    assert r.components["gradients"] == params
    assert r.details["optimizer_states:optimizer_states"] == states
    assert sum(r.components.values()) == r.peak_bytes
    assert set(r.to_json()["components"]) == {"weights", "gradients", "optimizer_states", "activations",
                                             "logits", "kv_cache", "temporary", "runtime_overhead"}


def test_master_weights_keep_bf16_weight_copies_and_fp32_params():
    r = trace(scen(train={"precision": "bf16", "master_weights": True, "seq_len": 8, "attention": "sdpa"}))
    assert r.details["weights:weights"] == sum(r512(4 * n) for n in param_shapes())
    assert r.details["optimizer_states:optimizer_states"] == sum(2 * r512(4 * n) for n in param_shapes())


def test_lora_trains_only_adapters():
    rank = 4
    r = trace(scen(task="finetune", train={"method": "lora", "lora_rank": rank, "seq_len": 8,
                                           "attention": "sdpa", "master_weights": True}))
    adapters = []
    for _ in range(L):
        for fin, fout in [(H, A * D), (H, KV * D), (H, KV * D), (A * D, H), (H, I), (H, I), (I, H)]:
            adapters += [rank * fin, fout * rank]
    # frozen base in bf16, fp32 adapters; AdamW states only for the adapters
    assert r.details["optimizer_states:optimizer_states"] == sum(2 * r512(4 * n) for n in adapters)
    assert r.details["weights:weights"] == (sum(r512(2 * n) for n in param_shapes())
                                            + sum(r512(4 * n) for n in adapters))


def test_inference_kv_cache_exact():
    B, P, N = 2, 12, 4                       # StaticCache for P + N = 16 tokens
    r = trace(scen(task="infer", infer={"prompt_len": P, "concurrency": B}), decode_steps=N)
    per_tensor = B * KV * (P + N) * D * 2    # bf16 [B, kv, T, d]
    assert r.kv_cache_bytes == 2 * L * per_tensor
    assert r.components["kv_cache"] == 2 * L * r512(per_tensor)
    assert r.phase in ("prefill", "decode")
    assert r.components["gradients"] == 0 and r.components["optimizer_states"] == 0


def test_loss_block_is_whole_fp32_logit_tensors():
    # vocab-heavy shape: the peak is at the start of backward, where the loss block is alive:
    # fp32 logits [B,S,V] (4 bytes x tokens x vocab) in whole tensors, e.g. logits, log-softmax, grad
    cfg = dict(TINY, vocab_size=4096)
    B, S = 2, 64
    r = trace(scenario_from_dict({"model": cfg, "task": "train", "hardware": {"gpu": "h100-sxm"},
                                  "train": {"precision": "fp32", "seq_len": S, "micro_batch": B,
                                            "optimizer": "sgd", "attention": "sdpa"}}))
    block = B * S * 4096 * 4
    assert r.components["logits"] > 0
    assert r.components["logits"] % block == 0, (r.components["logits"], block)


def test_activation_hand_count_full_recompute_saves_layer_inputs():
    # with full recompute, forward keeps one layer input [B,S,H] per checkpointed layer; the
    # difference between two traces with L and L+1 layers at the end of forward is one such input
    B, S = 1, 512
    def fwd_peak(layers):
        cfg = dict(TINY, num_hidden_layers=layers, vocab_size=128)
        r = trace(scenario_from_dict({"model": cfg, "task": "train", "hardware": {"gpu": "h100-sxm"},
                                      "train": {"precision": "bf16", "master_weights": False, "seq_len": S,
                                                "micro_batch": B, "optimizer": "sgd", "recompute": "full",
                                                "attention": "sdpa"}}))
        return r
    r2, r3 = fwd_peak(2), fwd_peak(3)
    layer_params = sum(r512(2 * n) for n in [A * D * H, KV * D * H, KV * D * H, H * A * D, I * H, I * H, H * I, H, H])
    # one more layer adds its bf16 weights + grads (pure bf16, SGD: no state) and one saved input
    delta_fwd = r3.phases["forward"] - r2.phases["forward"]
    assert delta_fwd == layer_params + r512(B * S * H * 2)


def _run(spec_cfg, fake):
    from gpuplan.models import get_model
    from gpuplan.trace._run import run_trace
    s = scenario_from_dict({"model": spec_cfg, "task": "train", "hardware": {"gpu": "h100-sxm"},
                            "train": {"precision": "bf16", "master_weights": False, "seq_len": 64,
                                      "micro_batch": 2, "attention": "sdpa"}})
    return run_trace(s, get_model(spec_cfg), iterations=2, decode_steps=0, fake=fake)


def test_fake_trace_equals_real_cpu_run_byte_for_byte():
    """DESIGN §6 mask pitfall: the fake run must take the unmasked SDPA path a real unpadded run takes."""
    torch.manual_seed(0)
    fake, real = _run(dict(TINY), True), _run(dict(TINY), False)
    assert fake.peak_bytes == real.peak_bytes
    assert fake.components == real.components
    assert fake.phases == real.phases


def test_unsupported_model_is_a_clear_error():
    cfg = dict(TINY, model_type="not_a_real_arch")
    with pytest.raises(GpuplanError) as e:
        trace({"model": cfg, "task": "train", "hardware": {"gpu": "h100-sxm"}})
    assert "Traceback" not in str(e.value) and "\n" not in str(e.value)


def test_pipeline_parallel_is_unsupported():
    s = scen(hardware={"gpu": "h100-sxm", "count": 2}, parallel={"pp": 2})
    with pytest.raises(UnsupportedError):
        trace(s)


def test_missing_extra(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *a, **k):
        if name == "transformers" or name.startswith("transformers."):
            raise ImportError("No module named 'transformers'")
        return real_import(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(MissingExtraError) as e:
        trace(scen(train={"seq_len": 8}))
    assert "pip install '.[trace]'" in str(e.value)


TINY_MOE = {"model_type": "mixtral", "hidden_size": H, "intermediate_size": I, "num_attention_heads": A,
            "num_key_value_heads": KV, "head_dim": D, "num_hidden_layers": 1, "vocab_size": V,
            "num_local_experts": 4, "num_experts_per_tok": 2, "tie_word_embeddings": False,
            "max_position_embeddings": 512, "sliding_window": None}


def test_moe_traces_with_fp32_master_weights():
    """transformers' grouped_mm experts cast inputs to the fp32 weight dtype; the trace runs them
    through transformers' fallback op instead of refusing MoE + master weights."""
    s = scenario_from_dict({"model": dict(TINY_MOE), "task": "train", "hardware": {"gpu": "h100-sxm"},
                            "train": {"seq_len": 16, "master_weights": True}})
    r = trace(s)
    assert r.peak_bytes > 0 and any("fp32" in n and "MoE" in n for n in r.method_notes)


def test_flash_only_family_traces_as_sdpa_and_dropout_keeps_bool_masks():
    """Gemma 2 has no SDPA path in transformers (soft-capping); the trace stands SDPA in for the
    flash kernel. GPT-2's dropout follows CUDA: a 1-byte mask per residual dropout, none in attention."""
    g2 = {"model_type": "gemma2", "hidden_size": H, "intermediate_size": I, "num_attention_heads": A,
          "num_key_value_heads": KV, "head_dim": D, "num_hidden_layers": 1, "vocab_size": V,
          "max_position_embeddings": 512}
    r = trace(scenario_from_dict({"model": g2, "task": "train", "hardware": {"gpu": "h100-sxm"},
                                  "train": {"seq_len": 16}}))
    assert any("no SDPA path" in n for n in r.method_notes)
    gpt2 = {"model_type": "gpt2", "n_embd": H, "n_head": A, "n_layer": 1, "vocab_size": V, "n_positions": 64}
    scn = scenario_from_dict({"model": gpt2, "task": "train", "hardware": {"gpu": "h100-sxm"},
                              "train": {"seq_len": 32, "master_weights": False}})
    from gpuplan.models import get_model
    from gpuplan.trace._run import run_trace
    fake = run_trace(scn, get_model(scn.model), iterations=1, decode_steps=0)
    real = run_trace(scn, get_model(scn.model), iterations=1, decode_steps=0, fake=False)
    assert fake.peak_bytes == real.peak_bytes and fake.components == real.components


def _saved_by_sdpa(q_shape, k_shape, v_shape, mask=None, fake=True):
    """Shapes of the tensors the traced SDPA call saves for backward (saved_tensors_hooks)."""
    import contextlib

    from torch._subclasses.fake_tensor import FakeTensorMode

    from gpuplan.trace._run import _cuda_kernel_semantics
    saved = []
    with (FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext()), _cuda_kernel_semantics([]), \
            torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        q, k, v = (torch.randn(s, dtype=torch.bfloat16, requires_grad=True) for s in (q_shape, k_shape, v_shape))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        out.sum().backward()
    return saved


def test_sdpa_with_mla_head_dims_saves_what_cuda_mem_efficient_kernel_saves():
    """q/k head dim 192, v 128 (DeepSeek MLA): torch's CPU dispatch falls back to the math path (S x S
    probabilities saved), CUDA's picks the memory-efficient kernel. The trace must follow CUDA: q, k, v,
    output and the fp32 log-sum-exp, nothing S x S."""
    B, Hh, S = 1, 4, 64
    saved = _saved_by_sdpa((B, Hh, S, 192), (B, Hh, S, 192), (B, Hh, S, 128))
    assert (B, Hh, S, S) not in saved
    assert {(B, Hh, S, 192), (B, Hh, S, 128), (B, Hh, S)} <= set(saved)
    # the real CPU run (what the trace would otherwise copy) keeps the scores
    assert (B, Hh, S, S) in _saved_by_sdpa((B, Hh, S, 192), (B, Hh, S, 192), (B, Hh, S, 128), fake=False)
    # with a boolean mask (HF StaticCache prefill) the bias is kept in 16-bit, padded to 16 columns
    mask = torch.ones(B, 1, S, S + 4, dtype=torch.bool).tril(4)
    with_mask = _saved_by_sdpa((B, Hh, S, 192), (B, Hh, S + 4, 192), (B, Hh, S + 4, 128), mask=mask)
    assert (B, Hh, S, S + 4) in with_mask and (B, Hh, S, S) not in with_mask


def test_implicit_mqa_keeps_the_math_path_as_on_cuda():
    """Falcon-7B passes one un-expanded K/V head without enable_gqa: torch 2.13's fused kernels all
    require equal head counts then (CUDA too), so the trace keeps the math path and its fp32 scores."""
    B, Hh, S = 1, 4, 32
    mask = torch.ones(B, 1, S, S, dtype=torch.bool).tril()
    saved = _saved_by_sdpa((B, Hh, S, 64), (B, 1, S, 64), (B, 1, S, 64), mask=mask)
    assert (B, Hh, S, S) in saved


def test_deep_copy_of_a_fake_tensor_is_a_same_sized_copy():
    # Dory deep-copies its recurrent cache layers in forward; Tensor.__deepcopy__ crashes on fake tensors
    import copy

    import torch
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    from gpuplan.trace._run import _fake_deepcopy
    with FakeTensorMode(), _fake_deepcopy(True):
        t = torch.zeros(3, 5, dtype=torch.bfloat16)
        c = copy.deepcopy({"a": t, "b": t})
        assert isinstance(c["a"], FakeTensor) and c["a"] is c["b"] and c["a"] is not t
        assert (c["a"].shape, c["a"].dtype) == (t.shape, t.dtype)
    assert "__deepcopy__" not in vars(FakeTensor)      # restored
