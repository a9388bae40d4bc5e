"""Fine-tuning tools as profiles (issue 20): Unsloth, TRL, Axolotl, LLaMA-Factory.

Defaults come from each tool's code (cited in scenario.TOOL_DEFAULTS); expected bytes by hand arithmetic on
Llama 3.1 8B's published shape (h 4096, 32 layers, 32 heads, 8 KV heads of 128, MLP 14336, vocabulary 128256)."""
from __future__ import annotations

import pytest

from gpuplan.errors import InputError
from gpuplan.estimate import memory as M
from gpuplan.estimate.activations import unsloth_layer_bytes
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict


def _scn(tool=None, **train):
    d = {"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "a100-sxm-80gb", "count": 1},
         "train": {"seq_len": 4096, **train}}
    if tool:
        d["tool"] = tool
    return scenario_from_dict(d)


def test_unsloth_defaults_fill_only_unset_fields():
    t = _scn("unsloth").train
    assert (t.method, t.lora_rank, t.recompute, t.activation_offload, t.loss) == ("qlora", 16, "full", True, "cce")
    t = _scn("unsloth", method="lora", lora_rank=32).train
    assert (t.method, t.lora_rank, t.loss) == ("lora", 32, "cce")


def test_trl_and_llama_factory_checkpoint_by_default_axolotl_does_not():
    assert _scn("trl").train.recompute == "full"
    assert _scn("llama-factory").train.recompute == "full"
    assert _scn("axolotl").train.recompute == "none"
    assert _scn("trl", recompute="none").train.recompute == "none"


def test_tool_needs_the_hf_stack():
    with pytest.raises(InputError) as err:
        scenario_from_dict({"model": "llama-3.1-8b", "task": "finetune", "tool": "unsloth", "framework": "megatron",
                            "hardware": {"gpu": "h100-sxm", "count": 1}})
    assert "framework" in str(err.value)


def test_unsloth_layer_working_set_by_hand():
    # saved: 12h + 4 kv d + 4i + 4a + 8 = 49152 + 4096 + 57344 + 128 + 8; backward adds dY (2h) and DW (2i)
    assert unsloth_layer_bytes(get_model("llama-3.1-8b")) == 110_728 + 8_192 + 28_672 == 147_592


def test_unsloth_releases_before_march_2025_add_the_lora_path_out_of_place():
    # matmul_lora at d9ed4bef: out += (X @ A) @ (s * B), a tokens x i temporary next to DW at the MLP backward's
    # peak: 2 x 14336 = 28,672 B per token more
    assert unsloth_layer_bytes(get_model("llama-3.1-8b"), lora_addmm=False) == 147_592 + 28_672
    m = get_model("llama-3.1-8b")
    new = M._train_components(_scn("unsloth"), m, "only")[0]["backward_end"]["activations"]
    old = M._train_components(_scn("unsloth", unsloth_lora_addmm=False), m, "only")[0]["backward_end"]["activations"]
    assert old - new == 4096 * 28_672


def test_unsloth_without_flash_attn_saves_expanded_k_and_v():
    # xformers path: K and V copied to all 32 heads, 4 x 32 x 128 = 16,384 B instead of 4 x 8 x 128 = 4,096
    assert unsloth_layer_bytes(get_model("llama-3.1-8b"), flash_attn=False) == 147_592 + 12_288
    m = get_model("llama-3.1-8b")
    fa = M._train_components(_scn("unsloth"), m, "only")[0]["backward_end"]["activations"]
    xf = M._train_components(_scn("unsloth", attention="sdpa"), m, "only")[0]["backward_end"]["activations"]
    assert xf - fa == 4096 * 12_288


def test_unsloth_lora_addmm_needs_tool_unsloth():
    with pytest.raises(InputError) as err:
        _scn("trl", unsloth_lora_addmm=False)
    assert "unsloth_lora_addmm" in str(err.value) and "tool: unsloth" in str(err.value)


def test_unsloth_kernels_do_not_apply_to_moe():
    assert unsloth_layer_bytes(get_model("mixtral-8x7b")) is None


def test_cut_cross_entropy_keeps_no_logits():
    phases, _ = M._train_components(_scn("unsloth"), get_model("llama-3.1-8b"), "only")
    # 8 bytes per token (fp32 log-sum-exp and loss) instead of 12 x 128256 for HF's full loss
    assert phases["backward"]["logits"] == 4096 * 8
    hf, _ = M._train_components(_scn("unsloth", loss="full"), get_model("llama-3.1-8b"), "only")
    assert hf["backward"]["logits"] == 4096 * 12 * 128256


def test_offloaded_checkpoints_live_in_host_memory():
    phases, _ = M._train_components(_scn("unsloth"), get_model("llama-3.1-8b"), "only")
    # every layer's bf16 input: 4096 tokens x 2 x 4096 x 32 layers
    assert phases["_cpu"]["cpu"] == 4096 * 2 * 4096 * 32 == 1_073_741_824
    # on the GPU: the recomputed layer's working set, the recomputed output the checkpointer holds through the
    # layer's backward (2 h = 8,192 B per token), the embedding output that enable_input_require_grads pins
    # (AccumulateGrad holds it: another 8,192 B), and at most one checkpoint in flight
    act = phases["backward_end"]["activations"]
    assert 4096 * (147_592 + 2 * 8192) <= act <= 4096 * (147_592 + 3 * 8192)


def test_recommend_keeps_the_tools_choices_and_the_hf_stack():
    from gpuplan.search.recommend import recommend
    rec = recommend({"model": "llama-3.1-8b", "task": "finetune", "tool": "unsloth",
                     "train": {"seq_len": 16384, "tokens": 1e8}}, gpus=["rtx-4090"], progress=False, top=5)
    assert rec.plans
    for p in rec.plans:
        t = p.scenario.train
        assert p.scenario.tool == "unsloth" and p.scenario.framework == "hf"
        assert (t.method, t.recompute, t.loss, t.activation_offload) == ("qlora", "full", "cce", True)


def test_unsloth_published_context_rows_median_within_15_percent():
    """validation/gathered/unsloth_context.csv (Unsloth's 2024-12 table, nothing fitted on it), with the release's
    settings as scripts/validate_unsloth_context.py sets them: the median |error| of the nine Unsloth rows stays
    within the issue's 15 % (7.5 % when written; the 8 GB row alone is +55 %)."""
    import csv
    import statistics
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "scripts"))
    from validate_unsloth_context import CSV, max_context
    errs = [(max_context(r) - int(r["max_seq_len"])) / int(r["max_seq_len"])
            for r in csv.DictReader(CSV.open(newline="", encoding="utf-8")) if r["tool"] == "unsloth"]
    assert len(errs) == 9
    assert statistics.median(abs(e) for e in errs) <= 0.15
