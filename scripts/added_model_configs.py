"""Configs added for issue 15 (families beyond the first 17), written to src/gpuplan/models/configs/.

Run from the repo root: python scripts/added_model_configs.py  (build_model_registry.py calls it too).
Two kinds of source, recorded per row in registry.csv:
- MLC: real config.json dicts from mlc-llm's preset table (python/mlc_llm/model/model_preset.py at
  commit 01ced331a9e1), re-serialised to JSON, completeness "full" (changes named in the notes);
- PUBLISHED: the architecture fields of the repo's config.json on huggingface.co, transcribed (not a
  byte copy: tokenizer ids and generation keys left out), completeness "structural".
SAME_ARCH rows reuse a config whose architecture is identical (instruct/chat vs base).
"""
from __future__ import annotations

import json
from pathlib import Path

OUT = Path("src/gpuplan/models")
MLC = "github.com/mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py MODEL_PRESETS[\"{}\"] @01ced331a9e1"


def hf(repo: str) -> str:
    return f"https://huggingface.co/{repo}/blob/main/config.json (architecture fields transcribed)"


def llama_like(mt, h, n, a, kv, i, v, *, tie=False, maxpos=4096, theta=10000.0, arch=None, **extra):
    cfg = {"architectures": [arch], "model_type": mt, "hidden_size": h, "num_hidden_layers": n,
           "num_attention_heads": a, "num_key_value_heads": kv, "intermediate_size": i, "vocab_size": v,
           "tie_word_embeddings": tie, "max_position_embeddings": maxpos, "rope_theta": theta}
    cfg.update(extra)
    return cfg


def qwen15(h, n, a, kv, i, v, tie=False):
    return llama_like("qwen2", h, n, a, kv, i, v, tie=tie, maxpos=32768, theta=1000000.0, arch="Qwen2ForCausalLM",
                      hidden_act="silu", rms_norm_eps=1e-06, use_sliding_window=False, sliding_window=32768,
                      max_window_layers=21)


def bloom(h, n, a):
    return {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "hidden_size": h, "n_layer": n, "n_head": a,
            "vocab_size": 250880, "layer_norm_epsilon": 1e-05, "apply_residual_connection_post_layernorm": False,
            "hidden_dropout": 0.0, "attention_dropout": 0.0, "pretraining_tp": 1, "slow_but_exact": False}


def gemma(h, n, a, kv, i):
    return llama_like("gemma", h, n, a, kv, i, 256000, tie=True, maxpos=8192, arch="GemmaForCausalLM", head_dim=256,
                      hidden_act="gelu", hidden_activation=None, rms_norm_eps=1e-06, attention_bias=False)


def phi(h, n, a, i, rotary_dim, resid_pdrop):
    # transformers' convert_phi_weights_to_hf.py maps n_embd->hidden_size, n_layer->num_hidden_layers,
    # n_head->num_attention_heads, rotary_dim/head_dim->partial_rotary_factor, n_inner=None->4h
    return {"architectures": ["PhiForCausalLM"], "model_type": "phi", "hidden_size": h, "num_hidden_layers": n,
            "num_attention_heads": a, "num_key_value_heads": a, "intermediate_size": i, "vocab_size": 51200,
            "hidden_act": "gelu_new", "max_position_embeddings": 2048, "partial_rotary_factor": rotary_dim / (h // a),
            "layer_norm_eps": 1e-05, "resid_pdrop": resid_pdrop, "embd_pdrop": 0.0, "attention_dropout": 0.0,
            "qk_layernorm": False, "tie_word_embeddings": False, "rope_theta": 10000.0}


def granite(h, n, a, kv, i, v, logits_scaling, attention_multiplier, maxpos, theta):
    return llama_like("granite", h, n, a, kv, i, v, tie=True, maxpos=maxpos, theta=theta, arch="GraniteForCausalLM",
                      hidden_act="silu", rms_norm_eps=1e-05, attention_bias=False, mlp_bias=False,
                      embedding_multiplier=12.0, residual_multiplier=0.22, logits_scaling=logits_scaling,
                      attention_multiplier=attention_multiplier)


def cohere(h, n, a, kv, i, logit_scale, theta, maxpos, qk_norm=False):
    return llama_like("cohere", h, n, a, kv, i, 256000, tie=True, maxpos=maxpos, theta=theta,
                      arch="CohereForCausalLM", hidden_act="silu", layer_norm_eps=1e-05, logit_scale=logit_scale,
                      attention_bias=False, use_qk_norm=qk_norm)


def nemotron(h, n, a, kv, i, head_dim, maxpos=4096):
    return llama_like("nemotron", h, n, a, kv, i, 256000, maxpos=maxpos, arch="NemotronForCausalLM",
                      head_dim=head_dim, hidden_act="relu2", norm_eps=1e-05,
                      partial_rotary_factor=0.5, attention_bias=False, mlp_bias=False)


# hf_id -> (config, source, completeness, notes)
ADDED: dict[str, tuple[dict, str, str, str]] = {}


def add(hf_id, cfg, source, completeness, notes=""):
    ADDED[hf_id] = (cfg, source, completeness, notes)


def mlc(hf_id, key, cfg, notes=""):
    add(hf_id, cfg, MLC.format(key), "full", notes)


# ---- from the mlc-llm preset table (real config.json dicts) -------------------------------------------
mlc("EleutherAI/gpt-j-6b", "gpt_j", {
    "activation_function": "gelu_new", "architectures": ["GPTJForCausalLM"], "attn_pdrop": 0.0, "bos_token_id": 50256,
    "embd_pdrop": 0.0, "eos_token_id": 50256, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05,
    "model_type": "gptj", "n_embd": 4096, "n_head": 16, "n_inner": None, "n_layer": 28, "n_positions": 2048,
    "resid_pdrop": 0.0, "rotary": True, "rotary_dim": 64, "scale_attn_weights": True, "tie_word_embeddings": False,
    "tokenizer_class": "GPT2Tokenizer", "transformers_version": "4.18.0.dev0", "use_cache": True, "vocab_size": 50400},
    "summary_* keys and mlc's added rope_scaling {rope_type: gptj} left out (no parameters)")
mlc("Qwen/Qwen1.5-1.8B-Chat", "qwen2", {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 5504, "max_position_embeddings": 4096, "max_window_layers": 21, "model_type": "qwen2",
    "num_attention_heads": 16, "num_hidden_layers": 24, "num_key_value_heads": 16, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.37.2", "use_sliding_window": False, "vocab_size": 151936}, "_name_or_path in the preset")
mlc("Qwen/Qwen1.5-MoE-A2.7B", "qwen2moe", {
    "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 5632, "max_position_embeddings": 32768, "max_window_layers": 21, "model_type": "qwen2_moe",
    "num_attention_heads": 16, "num_hidden_layers": 24, "num_key_value_heads": 16, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.39.0.dev0", "use_sliding_window": False, "vocab_size": 151936, "decoder_sparse_step": 1,
    "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4,
    "num_experts": 60, "norm_topk_prob": False, "router_aux_loss_coef": 0.001},
    "the preset does not name the repo; 60 experts top-4, 1408/5632 widths are Qwen1.5-MoE-A2.7B's")
mlc("stabilityai/stablelm-3b-4e1t", "stablelm", {
    "architectures": ["StableLmForCausalLM"], "hidden_act": "silu", "hidden_size": 2560, "intermediate_size": 6912,
    "max_position_embeddings": 4096, "model_type": "stablelm", "layer_norm_eps": 1e-05, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "partial_rotary_factor": 0.25, "rope_theta": 10000,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.38.0", "use_qkv_bias": False,
    "vocab_size": 50304}, "the preset is named 'stablelm'; its shape is stablelm-3b-4e1t's (2.8B)")
_stablelm2 = {
    "architectures": ["StableLmForCausalLM"], "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5632,
    "max_position_embeddings": 4096, "model_type": "stablelm", "layer_norm_eps": 1e-05, "num_attention_heads": 32,
    "num_hidden_layers": 24, "num_key_value_heads": 32, "partial_rotary_factor": 0.25, "rope_theta": 10000,
    "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.38.0", "use_qkv_bias": True,
    "vocab_size": 100352}
mlc("stabilityai/stablelm-2-zephyr-1_6b", "stablelm-2-zephyr-1_6b", _stablelm2)
mlc("google/gemma-2b", "gemma_2b", {
    "architectures": ["GemmaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "head_dim": 256,
    "hidden_act": "gelu", "hidden_size": 2048, "intermediate_size": 16384, "max_position_embeddings": 8192,
    "model_type": "gemma", "num_attention_heads": 8, "num_hidden_layers": 18, "num_key_value_heads": 1,
    "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "torch_dtype": "bfloat16", "transformers_version": "4.38.0.dev0",
    "vocab_size": 256000})
mlc("CohereForAI/aya-23-8B", "aya-23", {
    "architectures": ["CohereForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "layer_norm_eps": 1e-05, "logit_scale": 0.0625,
    "max_position_embeddings": 8192, "model_type": "cohere", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "rope_theta": 10000, "torch_dtype": "float16", "transformers_version": "4.40.0.dev0",
    "use_qk_norm": False, "vocab_size": 256000})
for size, (h, n, a, kv, i) in {"7b": (4096, 32, 32, 32, 11008), "13b": (5120, 40, 40, 40, 13824),
                               "34b": (8192, 48, 64, 8, 22016)}.items():
    mlc(f"codellama/CodeLlama-{size}-hf", f"codellama_{size}", llama_like(
        "llama", h, n, a, kv, i, 32016, maxpos=16384, theta=1000000, arch="LlamaForCausalLM", hidden_act="silu",
        rms_norm_eps=1e-05, torch_dtype="bfloat16"))
mlc("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "tinyllama_1b_chat_v1.0", llama_like(
    "llama", 2048, 22, 32, 4, 5632, 32000, maxpos=2048, arch="LlamaForCausalLM", hidden_act="silu",
    rms_norm_eps=1e-05, attention_bias=False, torch_dtype="bfloat16"))
for name, key, (h, n, a, kv, i) in (("SmolLM-135M", "smollm_135m", (576, 30, 9, 3, 1536)),
                                    ("SmolLM-360M", "smollm_360m", (960, 32, 15, 5, 2560)),
                                    ("SmolLM-1.7B", "smollm_1_7b", (2048, 24, 32, 32, 8192))):
    mlc(f"HuggingFaceTB/{name}", key, llama_like("llama", h, n, a, kv, i, 49152, tie=True, maxpos=2048,
                                                arch="LlamaForCausalLM", hidden_act="silu", rms_norm_eps=1e-05,
                                                attention_bias=False, mlp_bias=False),
        "preset _name_or_path is the HuggingFaceTB cosmo2 training checkpoint the release was made from")
for name, key, (h, n, a, kv, i, v, tie, mwl) in (
        ("Qwen2-0.5B", "qwen2_0_5b", (896, 24, 14, 2, 4864, 151936, True, 24)),
        ("Qwen2-1.5B", "qwen2_1_5b", (1536, 28, 12, 2, 8960, 151936, True, 28)),
        ("Qwen2-7B", "qwen2_7b", (3584, 28, 28, 4, 18944, 152064, False, 28))):
    mlc(f"Qwen/{name}", key, llama_like("qwen2", h, n, a, kv, i, v, tie=tie, maxpos=32768, theta=1000000.0,
                                        arch="Qwen2ForCausalLM", hidden_act="silu", rms_norm_eps=1e-06,
                                        use_sliding_window=False, sliding_window=32768 if tie else 131072,
                                        max_window_layers=mwl))
mlc("google/gemma-2-2b-jpn-it", "gemma2_2b-jpn", {
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304, "intermediate_size": 9216,
    "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 8, "num_hidden_layers": 26,
    "num_key_value_heads": 4, "query_pre_attn_scalar": 224, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "sliding_window": 4096, "torch_dtype": "bfloat16", "vocab_size": 256000})
mlc("microsoft/Phi-3.5-mini-instruct", "phi-3_5", llama_like(
    "phi3", 3072, 32, 32, 32, 8192, 32064, maxpos=131072, arch="Phi3ForCausalLM", hidden_act="silu",
    original_max_position_embeddings=4096, rms_norm_eps=1e-05, resid_pdrop=0.0, embd_pdrop=0.0,
    attention_dropout=0.0, sliding_window=262144, attention_bias=False),
    "longrope long_factor/short_factor lists (48 each) left out: they change no parameter or memory term")
mlc("microsoft/Phi-4-mini-instruct", "phi-4", llama_like(
    "phi3", 3072, 32, 24, 8, 8192, 200064, tie=True, maxpos=131072, arch="Phi3ForCausalLM", hidden_act="silu",
    original_max_position_embeddings=4096, partial_rotary_factor=0.75, rms_norm_eps=1e-05, resid_pdrop=0.0,
    embd_pdrop=0.0, attention_dropout=0.0, sliding_window=262144, attention_bias=False, mlp_bias=False,
    lm_head_bias=False), "longrope factor lists left out (no parameters)")
# phi-msft presets converted to transformers' phi keys (see phi())
add("microsoft/phi-1_5", phi(2048, 24, 32, 8192, 32, 0.0), MLC.format("phi-1_5") + " (phi-msft keys converted)",
    "structural", "n_embd 2048, n_layer 24, n_head 32, rotary_dim 32, n_inner null -> 4h, resid_pdrop 0.0")
add("microsoft/phi-2", phi(2560, 32, 32, 10240, 32, 0.1), MLC.format("phi-2") + " (phi-msft keys converted)",
    "structural", "n_embd 2560, n_layer 32, n_head 32, rotary_dim 32 (factor 0.4), n_inner null -> 4h, resid_pdrop 0.1")
add("microsoft/phi-1", phi(2048, 24, 32, 8192, 32, 0.0), hf("microsoft/phi-1"), "structural",
    "same shape as phi-1.5 (phi-1 model card: 1.3B, 24 layers)")

# ---- BLOOM (ALiBi) ------------------------------------------------------------------------------------
for name, (h, n, a) in {"bloom-560m": (1024, 24, 16), "bloom-1b1": (1536, 24, 16), "bloom-1b7": (2048, 24, 16),
                        "bloom-3b": (2560, 30, 32), "bloom-7b1": (4096, 30, 32), "bloom": (14336, 70, 112)}.items():
    add(f"bigscience/{name}", bloom(h, n, a), hf(f"bigscience/{name}"), "structural")
add("bigscience/bloomz-7b1", bloom(4096, 30, 32), hf("bigscience/bloomz-7b1"), "structural",
    "bloom-7b1 fine-tuned on xP3: same architecture")

# ---- Gemma 1 ------------------------------------------------------------------------------------------
add("google/gemma-7b", gemma(3072, 28, 16, 16, 24576), hf("google/gemma-7b"), "structural")

# ---- Qwen1.5 / Qwen2-MoE ------------------------------------------------------------------------------
for name, args in {"Qwen1.5-0.5B": (1024, 24, 16, 16, 2816, 151936, True),
                   "Qwen1.5-4B": (2560, 40, 20, 20, 6912, 151936, False),
                   "Qwen1.5-7B": (4096, 32, 32, 32, 11008, 151936, False),
                   "Qwen1.5-14B": (5120, 40, 40, 40, 13696, 152064, False),
                   "Qwen1.5-32B": (5120, 64, 40, 8, 27392, 152064, False),
                   "Qwen1.5-72B": (8192, 80, 64, 64, 24576, 152064, False),
                   "Qwen1.5-110B": (8192, 80, 64, 8, 49152, 152064, False)}.items():
    add(f"Qwen/{name}", qwen15(*args), hf(f"Qwen/{name}"), "structural")
add("Qwen/Qwen2-57B-A14B", llama_like(
    "qwen2_moe", 3584, 28, 28, 4, 18944, 151936, maxpos=131072, theta=1000000.0, arch="Qwen2MoeForCausalLM",
    hidden_act="silu", rms_norm_eps=1e-06, num_experts=64, num_experts_per_tok=8, moe_intermediate_size=2560,
    shared_expert_intermediate_size=20480, decoder_sparse_step=1, norm_topk_prob=False, use_sliding_window=False,
    sliding_window=131072, max_window_layers=28), hf("Qwen/Qwen2-57B-A14B"), "structural")

# ---- StableLM -----------------------------------------------------------------------------------------
add("stabilityai/stablelm-2-12b", llama_like(
    "stablelm", 5120, 40, 32, 8, 13824, 100352, maxpos=4096, arch="StableLmForCausalLM", hidden_act="silu",
    layer_norm_eps=1e-05, partial_rotary_factor=0.25, use_qkv_bias=False, qk_layernorm=True,
    use_parallel_residual=True), hf("stabilityai/stablelm-2-12b"), "structural",
    "parallel residual (no post_attention_layernorm) and per-head q/k LayerNorms")

# ---- Cohere -------------------------------------------------------------------------------------------
add("CohereForAI/c4ai-command-r-v01", cohere(8192, 40, 64, 64, 22528, 0.0625, 8000000.0, 131072),
    hf("CohereForAI/c4ai-command-r-v01"), "structural", "gated repo")
add("CohereForAI/c4ai-command-r-08-2024", cohere(8192, 40, 64, 8, 24576, 0.0625, 4000000.0, 131072),
    hf("CohereForAI/c4ai-command-r-08-2024"), "structural", "gated repo; GQA with 8 KV heads")
add("CohereForAI/c4ai-command-r-plus", cohere(12288, 64, 96, 8, 33792, 0.8333333333333334, 75000000.0, 131072, True),
    hf("CohereForAI/c4ai-command-r-plus"), "structural", "gated repo; use_qk_norm true (LayerNorms over heads x head_dim)")
add("CohereForAI/aya-23-35B", cohere(8192, 40, 64, 64, 22528, 0.0625, 8000000.0, 8192),
    hf("CohereForAI/aya-23-35B"), "structural", "Command-R v01 architecture")

# ---- Granite ------------------------------------------------------------------------------------------
for name, (h, i, a, ls, am, v, maxpos, theta) in {
        "granite-3.0-2b-instruct": (2048, 8192, 32, 8.0, 0.015625, 49155, 4096, 10000.0),
        "granite-3.0-8b-instruct": (4096, 12800, 32, 16.0, 0.0078125, 49155, 4096, 10000.0),
        "granite-3.1-2b-instruct": (2048, 8192, 32, 8.0, 0.015625, 49155, 131072, 5000000.0),
        "granite-3.1-8b-instruct": (4096, 12800, 32, 16.0, 0.0078125, 49155, 131072, 10000000.0),
        "granite-3.3-2b-instruct": (2048, 8192, 32, 8.0, 0.015625, 49159, 131072, 10000000.0),
        "granite-3.3-8b-instruct": (4096, 12800, 32, 16.0, 0.0078125, 49159, 131072, 10000000.0)}.items():
    add(f"ibm-granite/{name}", granite(h, 40, a, 8, i, v, ls, am, maxpos, theta), hf(f"ibm-granite/{name}"),
        "structural", "muP multipliers: embedding 12, residual 0.22, attention and logits scaling per size")

# ---- Nemotron -----------------------------------------------------------------------------------------
add("nvidia/Minitron-4B-Base", nemotron(3072, 32, 24, 8, 9216, 128),
    "github.com/NVIDIA/TensorRT-LLM tests (Nemotron_4_4B_CONFIG, transformers_version 4.48.0); " + hf("nvidia/Minitron-4B-Base"),
    "structural", "kv_channels 128 written as head_dim")
add("nvidia/Nemotron-Mini-4B-Instruct", nemotron(3072, 32, 24, 8, 9216, 128), hf("nvidia/Nemotron-Mini-4B-Instruct"),
    "structural", "Minitron-4B architecture")
add("nvidia/Minitron-8B-Base", nemotron(4096, 32, 48, 8, 16384, 128), hf("nvidia/Minitron-8B-Base"), "structural")
add("nvidia/Nemotron-4-340B-Base", nemotron(18432, 96, 96, 8, 73728, 192), hf("nvidia/Nemotron-4-340B-Base"),
    "structural", "released as a NeMo checkpoint; HF-format config as in the community conversions")

# ---- encoder-decoders (models/encdec.py) ------------------------------------------------------------
def t5(h, ff, dkv, heads, layers, *, v11, vocab=32128, arch="T5ForConditionalGeneration", mt="t5"):
    """T5 v1.0 (relu, tied, scaled head) or v1.1/Flan/mT5 (gated-gelu, own lm_head) config fields."""
    cfg = {"architectures": [arch], "model_type": mt, "d_model": h, "d_ff": ff, "d_kv": dkv, "num_heads": heads,
           "num_layers": layers, "num_decoder_layers": layers, "vocab_size": vocab,
           "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128, "dropout_rate": 0.1,
           "layer_norm_epsilon": 1e-06, "feed_forward_proj": "gated-gelu" if v11 else "relu",
           "is_encoder_decoder": True, "tie_word_embeddings": not v11, "n_positions": 512,
           "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}
    return cfg


for size, dims in {"small": (512, 2048, 64, 8, 6), "base": (768, 3072, 64, 12, 12), "large": (1024, 4096, 64, 16, 24),
                   "3b": (1024, 16384, 128, 32, 24), "11b": (1024, 65536, 128, 128, 24)}.items():
    add(f"google-t5/t5-{size}", t5(*dims, v11=False), hf(f"google-t5/t5-{size}"), "structural",
        "T5 v1.0: relu MLP, lm_head tied to the shared embedding")
for size, dims in {"small": (512, 1024, 64, 6, 8), "base": (768, 2048, 64, 12, 12), "large": (1024, 2816, 64, 16, 24),
                   "xl": (2048, 5120, 64, 32, 24), "xxl": (4096, 10240, 64, 64, 24)}.items():
    add(f"google/flan-t5-{size}", t5(*dims, v11=True), hf(f"google/flan-t5-{size}"), "structural",
        "T5 v1.1 architecture: gated-gelu, own lm_head")
    add(f"google/t5-v1_1-{size}", t5(*dims, v11=True), hf(f"google/t5-v1_1-{size}"), "structural",
        "gated-gelu, own lm_head")
    add(f"google/mt5-{size}", t5(*dims, v11=True, vocab=250112, arch="MT5ForConditionalGeneration", mt="mt5"),
        hf(f"google/mt5-{size}"), "structural", "T5 v1.1 architecture, 250,112-token vocabulary")

# ---- same architecture as a config above or already bundled -----------------------------------------
SAME_ARCH = {
    "stabilityai/stablelm-2-1_6b": "stabilityai/stablelm-2-zephyr-1_6b",
    "stabilityai/stablelm-zephyr-3b": "stabilityai/stablelm-3b-4e1t",
    "google/gemma-2b-it": "google/gemma-2b",
    "google/gemma-7b-it": "google/gemma-7b",
    "google/gemma-1.1-7b-it": "google/gemma-7b",
    "Qwen/Qwen1.5-7B-Chat": "Qwen/Qwen1.5-7B",
    "Qwen/Qwen1.5-14B-Chat": "Qwen/Qwen1.5-14B",
    "Qwen/Qwen1.5-72B-Chat": "Qwen/Qwen1.5-72B",
    "Qwen/Qwen2-7B-Instruct": "Qwen/Qwen2-7B",
    "Qwen/Qwen2-57B-A14B-Instruct": "Qwen/Qwen2-57B-A14B",
    "Qwen/Qwen1.5-MoE-A2.7B-Chat": "Qwen/Qwen1.5-MoE-A2.7B",
    "ibm-granite/granite-3.0-8b-base": "ibm-granite/granite-3.0-8b-instruct",
    "ibm-granite/granite-3.1-8b-base": "ibm-granite/granite-3.1-8b-instruct",
    "codellama/CodeLlama-7b-Instruct-hf": "codellama/CodeLlama-7b-hf",
    "codellama/CodeLlama-34b-Instruct-hf": "codellama/CodeLlama-34b-hf",
}


def write_configs(added: dict, out: Path) -> list[dict[str, str]]:
    """Write each transcribed config as configs/<owner>__<name>.json; return its registry row."""
    rows = []
    for hf_id, (cfg, source, completeness, notes) in added.items():
        fname = hf_id.replace("/", "__") + ".json"
        (out / "configs" / fname).write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
        rows.append(dict(hf_id=hf_id, config=fname, source=source, completeness=completeness, notes=notes[:300]))
    return rows


def write(out: Path = OUT) -> list[dict[str, str]]:
    """Write the config files; return registry rows (name filled in by the caller)."""
    rows = write_configs(ADDED, out)
    by_id = {r["hf_id"]: r for r in rows}
    for hf_id, same in SAME_ARCH.items():
        rows.append(dict(by_id[same], hf_id=hf_id, notes=f"same architecture as {same}"))
    return rows


if __name__ == "__main__":
    print(f"{len(write())} added rows")
