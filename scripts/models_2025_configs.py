"""Popular 2025 models (Llama 4, Qwen3-Coder / Qwen3-Next, Kimi-K2, DeepSeek-V3.1 / R1 distills, QwQ, ...),
bundled so that a name users (and held-out published runs) give resolves offline.

Run from the repo root: python scripts/models_2025_configs.py  (merges its rows into registry.csv, keeping every
other row; build_model_registry.py calls write() too).

Two kinds of row, each with its source in registry.csv:
- COPIED: a real config.json, copied byte for byte (plus a final newline where the source has none) into
  src/gpuplan/models/configs/ from a public repository at a pinned commit, e.g.
      git -C aiconfigurator show 095f58a51c4c:aic-core/src/aiconfigurator_core/model_configs/X_config.json
  The files are committed; write() only checks they are there. completeness "full", except the Llama 4 copies,
  which hold the text_config only (see their notes) and are "structural".
  Also committed, completeness "structural": architecture fields transcribed from a config.json page on
  huggingface.co (the row's source names it; what was left out is in the notes).
- MLC: a config dict from mlc-llm's preset table, re-serialised (as in added_model_configs.py).
- SAME_ARCH: a fine-tune or re-release whose weights have the shapes of a bundled config (its model card names
  that base and lists the same layers/heads/parameter count); it reuses that config file.
Each row's notes give gpuplan's count and the published one.
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

OUT = Path("src/gpuplan/models")
AIC = "github.com/ai-dynamo/aiconfigurator"
AIC_NOW = AIC + " aic-core/src/aiconfigurator_core/model_configs/{}_config.json @095f58a51c4c"
AIC_OLD = AIC + " src/aiconfigurator/model_configs/{}_config.json @{} (file removed in a later commit)"
MLC = "github.com/mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py MODEL_PRESETS[\"{}\"] @79d603f085f5"
R1_CARD = "https://huggingface.co/deepseek-ai/DeepSeek-R1 (README, 'DeepSeek-R1-Distill Models' table: base model)"

# hf_id -> (source, completeness, notes); config file configs/<org>__<name>.json is committed
COPIED: dict[str, tuple[str, str, str]] = {
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": (
        AIC_NOW.format("meta-llama--Llama-4-Scout-17B-16E-Instruct"), "structural",
        "text_config of the published config.json only (vision_config omitted in the copy): text model "
        "107,769,861,120 total / 17,172,894,720 active (16 experts top-1 + shared, MoE every layer); model card: "
        "109B total, 17B active (the 109B includes the vision encoder, not counted here)"),
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": (
        AIC_NOW.format("meta-llama--Llama-4-Maverick-17B-128E-Instruct"), "structural",
        "text_config of the published config.json only (vision_config omitted in the copy): text model "
        "400,711,848,960 total / 17,184,691,200 active (128 experts top-1, MoE every 2nd layer); model card: 400B "
        "total, 17B active (the vision encoder is not counted here)"),
    "Qwen/Qwen3-Coder-480B-A35B-Instruct": (
        AIC_NOW.format("Qwen--Qwen3-Coder-480B-A35B-Instruct"), "full",
        "480,154,875,392 total / 35,474,765,312 active = model card 480B total, 35B activated (160 experts, top-8)"),
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": (
        "github.com/ztxz16/fastllm Qwen3-Coder-30B-A3B-Instruct/config.json @f8f04c33abb6 (a copy of the HF repo's "
        "files: config.json, model.safetensors.index.json, README)", "full",
        "exact: 30,532,122,624 = model.safetensors.index.json total_size 61,064,245,248 bytes / 2 (bf16, same "
        "commit); 3,353,032,704 active = model card 30.5B total, 3.3B activated"),
    "moonshotai/Kimi-K2-Instruct": (
        AIC_NOW.format("moonshotai--Kimi-K2-Instruct"), "full",
        "model_type kimi_k2 with architectures DeepseekV3ForCausalLM and auto_map DeepseekV3Config: read as "
        "deepseek_v3 (spec._ALIAS_TYPES); 1,026,408,232,448 total / 32,861,500,928 active = model card 1T total, "
        "32B activated (384 experts, top-8, 1 shared); checkpoint FP8 block-quantized as stored"),
    "deepseek-ai/DeepSeek-V3.1": (
        AIC_OLD.format("deepseek-ai--DeepSeek-V3.1", "39033e8cd1f8"), "full",
        "DeepSeek-V3 shapes (128K->160K positions, ue8m0 FP8 scales); main model 671,026,419,200 total / "
        "37,552,297,472 active = model card 671B total, 37B activated (685B on the Hub includes the MTP module "
        "and FP8 scales, as for deepseek-v3)"),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B": (
        AIC_OLD.format("deepseek-ai--DeepSeek-R1-Distill-Qwen-32B", "39033e8cd1f8"), "full",
        "Qwen2.5-32B shapes (R1 README: distilled from Qwen2.5-32B); 32,763,876,352 = qwen2.5-32b's exact count; "
        "Hub 32.8B"),
    "Qwen/Qwen3-Next-80B-A3B-Thinking": (
        AIC_OLD.format("Qwen--Qwen3-Next-80B-A3B-Thinking", "1b7cfb10a6fa"), "full",
        "hybrid: gated DeltaNet on 3 layers in 4, gated full attention on the 4th; 512 experts top-10 + shared "
        "expert; 79,674,391,296 total / 3,874,929,408 active (incl. embeddings) vs model card 80B total, 3B "
        "activated; the Hub total (81.3B) also holds the multi-token-prediction layer, not in the HF class"),
    "mistralai/Mistral-Small-3.1-24B-Instruct-2503": (
        "https://huggingface.co/mistralai/Mistral-Small-3.1-24B-Instruct-2503/blob/main/config.json (text_config "
        "fields transcribed; text via docs index)", "structural",
        "the text model only: text_config as a MistralForCausalLM config (vision_config, projector and token ids "
        "left out); 23,572,403,200 = 23.6B, the Hub total of the text-only conversion "
        "mrfakename/mistral-small-3.1-24b-instruct-2503-hf; model card: 24B with the vision encoder"),
    "mistralai/Ministral-8B-Instruct-2410": (
        "https://huggingface.co/stan-hua/Ministral-8B-Instruct-2410-AWQ-W4A16/blob/main/config.json (saved from the "
        "official snapshot 4847e87e5975, its _name_or_path; architecture fields transcribed; text via docs index)",
        "structural",
        "quantization_config, dtype and cache keys left out; the same fields in the fine-tunes rivaon/sydney and "
        "Spestly/Ava-1.0-8B; 8,019,808,256 = Hub 8.02B (nm-testing/Ministral-8B-Instruct-2410-FP8-dynamic); "
        "sliding_window 32768 = max_position_embeddings, as configured"),
    "tiiuae/Falcon3-7B-Instruct": (
        "https://huggingface.co/tiiuae/Falcon3-7B-Instruct/blob/ca6ceed0f6d5852f44ac1fdf5f8403bccb4449c9/config.json "
        "(all keys transcribed; text via docs index)", "structural",
        "Llama architecture, head_dim 256 (12 x 256 = hidden 3072), 4 KV heads, 131,072-token vocabulary; "
        "7,455,550,464 = 14.91 GB in bf16, the repo's four safetensors shards (4.94 + 4.94 + 4.22 GB + 805 MB, "
        "huggingface.co/tiiuae/Falcon3-7B-Instruct/tree/main); model card: 7B"),
    "01-ai/Yi-1.5-34B-Chat": (
        "https://huggingface.co/01-ai/Yi-1.5-34B-Chat/blob/7b967a3a456738c0330b1624980dd6a7d3ed33f5/config.json "
        "(all keys transcribed; text via docs index)", "structural",
        "Llama architecture, 60 layers, 56 Q / 8 KV heads, 64,000-token vocabulary, 4,096 positions; "
        "34,388,917,248 vs the model card's 34B"),
    "mistralai/Mistral-Large-Instruct-2411": (
        "https://huggingface.co/NarrativAI/Cakrawala-123B/blob/refs%2Fpr%2F2/config.json (a fine-tune whose "
        "_name_or_path is mistralai/Mistral-Large-Instruct-2411; architecture fields transcribed; text via docs "
        "index)", "structural",
        "fine-tune's own keys (_name_or_path, use_cache, transformers_version) left out; 88 layers, 96 Q / 8 KV "
        "heads, 32,768-token vocabulary; 122,610,069,504 = model card 123B"),
}

MLC_ROWS: dict[str, tuple[str, dict, str]] = {
    "allenai/OLMo-2-0325-32B": ("olmo2_32b", {
        "architectures": ["Olmo2ForCausalLM"], "hidden_act": "silu", "hidden_size": 5120,
        "intermediate_size": 27648, "max_position_embeddings": 4096, "model_type": "olmo2",
        "num_attention_heads": 40, "num_hidden_layers": 64, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
        "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "float32",
        "transformers_version": "4.49.0", "use_cache": True, "vocab_size": 100352},
        "preset keeps only architectural keys (token ids, attention_bias, rope_scaling omitted) like olmo2_7b/13b; "
        "vocab_size 100352 is the padded embedding size; 32,234,279,936 = model card 32B (no exact published count "
        "found)"),
}

# hf_id -> (bundled hf_id with the same architecture, why / counts)
SAME_ARCH: dict[str, tuple[str, str]] = {
    "meta-llama/Llama-4-Scout-17B-16E": ("meta-llama/Llama-4-Scout-17B-16E-Instruct",
        "pre-trained checkpoint of the Instruct model (Llama 4 model card: same 17B active / 109B total, 16 experts)"),
    "meta-llama/Llama-4-Maverick-17B-128E": ("meta-llama/Llama-4-Maverick-17B-128E-Instruct",
        "pre-trained checkpoint of the Instruct model (Llama 4 model card: same 17B active / 400B total, 128 "
        "experts)"),
    "mistralai/Mistral-Small-3.1-24B-Base-2503": ("mistralai/Mistral-Small-3.1-24B-Instruct-2503",
        "the base model of the Instruct release (model card); text model 23,572,403,200"),
    "mistralai/Mistral-Small-3.2-24B-Instruct-2506": ("mistralai/Mistral-Small-3.1-24B-Instruct-2503",
        "minor update of Mistral-Small-3.1-24B-Instruct-2503 (model card); the same text fields in the text-only copy "
        "huggingface.co/darkc0de/3.2test config.json (5120 / 32768 / 40 layers / 32+8 heads / rope 1e9 / 131072)"),
    "01-ai/Yi-1.5-34B": ("01-ai/Yi-1.5-34B-Chat",
        "the base model of the Chat release; the same fields in huggingface.co/adamo1139/Yi-1.5-34B-base-mirror "
        "config.json; 34,388,917,248"),
    "mistralai/Mistral-Large-Instruct-2407": ("mistralai/Mistral-Large-Instruct-2411",
        "Mistral Large 2 (model card: dense, 123B parameters, 128k context); 2411 is its update with the same "
        "architecture; 122,610,069,504"),
    "Qwen/Qwen3-Next-80B-A3B-Instruct": ("Qwen/Qwen3-Next-80B-A3B-Thinking",
        "model cards list the same architecture (80B total, 3B activated, 48 layers, hybrid layout 12 x (3 x "
        "(Gated DeltaNet -> MoE) -> 1 x (Gated Attention -> MoE)), 512 experts, 10 routed + 1 shared)"),
    "deepseek-ai/DeepSeek-R1-0528": ("deepseek-ai/DeepSeek-R1",
        "R1-0528 is a post-training update of DeepSeek-R1 (same 671B / 37B architecture, model card)"),
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B": ("meta-llama/Llama-3.3-70B-Instruct",
        "fine-tune of Llama-3.3-70B-Instruct (" + R1_CARD + "); 70,553,706,496 = llama-3.3-70b-instruct's count"),
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": ("meta-llama/Llama-3.1-8B",
        "fine-tune of Llama-3.1-8B (" + R1_CARD + "); 8,030,261,248 = llama-3.1-8b's count"),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B": ("Qwen/Qwen2.5-14B",
        "fine-tune of Qwen2.5-14B (" + R1_CARD + "); 14,770,033,664 = qwen2.5-14b's count (card 14.7B)"),
    "Qwen/QwQ-32B": ("Qwen/Qwen2.5-32B",
        "model card: base_model Qwen/Qwen2.5-32B, 32.5B parameters, 64 layers, 40 Q / 8 KV heads, QKV bias; "
        "32,763,876,352 (qwen2.5-32b's exact count; the card's 32.5B is the Qwen2.5-32B card's figure)"),
    "Qwen/Qwen2.5-Coder-32B-Instruct": ("Qwen/Qwen2.5-32B",
        "model card: 32.5B parameters, 64 layers, 40 Q / 8 KV heads, QKV bias = Qwen2.5-32B's; "
        "32,763,876,352"),
    "Qwen/Qwen2.5-Coder-7B-Instruct": ("Qwen/Qwen2.5-7B",
        "model card: 7.61B parameters (6.53B non-embedding), 28 layers, 28 Q / 4 KV heads = Qwen2.5-7B's; "
        "7,615,616,512"),
    "Qwen/Qwen2.5-Coder-7B": ("Qwen/Qwen2.5-7B",
        "model card: 7.61B parameters (6.53B non-embedding), 28 layers, 28 Q / 4 KV heads = Qwen2.5-7B's; "
        "7,615,616,512"),
    "nvidia/Llama-3.1-Nemotron-70B-Instruct-HF": ("meta-llama/Llama-3.1-70B",
        "RLHF fine-tune of Llama-3.1-70B-Instruct (model card); same shapes as the Llama-3.1-70B config; "
        "70,553,706,496"),
    "google/gemma-3-27b-pt": ("google/gemma-3-27b-it",
        "pre-trained checkpoint of the -it model: same shapes (gemma-3-27b-it row)"),
    "google/gemma-3-12b-it": ("google/gemma-3-12b-pt",
        "instruction-tuned checkpoint of the -pt model: same shapes (gemma-3-12b-pt row)"),
    "Qwen/Qwen3-30B-A3B-Instruct-2507": ("Qwen/Qwen3-30B-A3B",
        "model card: 30.5B total, 3.3B activated, 48 layers, 32 Q / 4 KV heads, 128 experts top-8 = Qwen3-30B-A3B's "
        "(native context 262,144 in the 2507 release; the bundled config says 40,960)"),
    "Qwen/Qwen3-30B-A3B-Thinking-2507": ("Qwen/Qwen3-30B-A3B",
        "model card: 30.5B total, 3.3B activated, 48 layers, 32 Q / 4 KV heads, 128 experts top-8 = Qwen3-30B-A3B's "
        "(native context 262,144 in the 2507 release; the bundled config says 40,960)"),
    "Qwen/Qwen3-235B-A22B-Thinking-2507": ("Qwen/Qwen3-235B-A22B",
        "model card: 235B total, 22B activated, 94 layers, 64 Q / 4 KV heads, 128 experts top-8 = Qwen3-235B-A22B's "
        "(native context 262,144 in the 2507 release; the bundled config says 40,960)"),
    "deepseek-ai/DeepSeek-V3-0324": ("deepseek-ai/DeepSeek-V3",
        "post-training update of DeepSeek-V3 with the same architecture (model card: same 671B/37B model, "
        "MTP module as V3)"),
    "moonshotai/Kimi-K2-Instruct-0905": ("moonshotai/Kimi-K2-Instruct",
        "update of Kimi-K2-Instruct (model card: same 1T total / 32B activated MoE, 384 experts top-8; context "
        "extended to 256K, the reused config says 131,072)"),
    "Qwen/Qwen3-235B-A22B-Instruct-2507": ("Qwen/Qwen3-235B-A22B",
        "model card: 235B total, 22B activated, 94 layers, 64 Q / 4 KV heads, 128 experts top-8 = Qwen3-235B-A22B's "
        "(native context 262,144 in the 2507 release; the bundled config says 40,960)"),
}


def write(out: Path = OUT) -> list[dict[str, str]]:
    """Check the copied configs, write the MLC ones; return registry rows (without name)."""
    rows = []
    for hf_id, (source, completeness, notes) in COPIED.items():
        fname = hf_id.replace("/", "__") + ".json"
        json.loads((out / "configs" / fname).read_text(encoding="utf-8"))  # committed copy, must parse
        rows.append(dict(hf_id=hf_id, config=fname, source=source, completeness=completeness, notes=notes))
    for hf_id, (key, cfg, notes) in MLC_ROWS.items():
        fname = hf_id.replace("/", "__") + ".json"
        (out / "configs" / fname).write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
        rows.append(dict(hf_id=hf_id, config=fname, source=MLC.format(key), completeness="structural", notes=notes))
    return rows


def same_arch_rows(existing: dict[str, dict[str, str]]) -> list[dict[str, str]]:
    """SAME_ARCH rows, each reusing the config, source and completeness of its bundled twin."""
    return [dict(existing[same], hf_id=hf_id, notes=f"same architecture as {same}: {why}")
            for hf_id, (same, why) in SAME_ARCH.items()]


def main() -> int:
    sys.path.insert(0, str(Path(__file__).parent))
    from build_model_registry import merge_registry
    with open(OUT / "registry.csv", encoding="utf-8", newline="") as fh:
        existing = {r["hf_id"]: r for r in csv.DictReader(fh)}
    new = write(OUT)
    new += same_arch_rows(existing | {r["hf_id"]: r for r in new})
    rows = merge_registry(new, OUT)
    print(f"{len(new)} rows merged, {len(rows)} registry rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
