"""train.document_len: rows packed with documents that attend only to themselves (flash-attention varlen
cu_seqlens). Attention FLOPs by hand for 16,384-token rows of 8 x 2,048-token documents, speed and memory
against unpacked scenarios, what sdpa/eager do, refusals, and the launch keys (Axolotl, LLaMA-Factory)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuplan import api
from gpuplan.errors import GpuplanError, UnsupportedError
from gpuplan.estimate.flops import attention_flops_per_token_forward, attention_span
from gpuplan.launch import launch_files
from gpuplan.models import get_model
from gpuplan.scenario import Scenario, load_scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
L1B = get_model("llama-3.2-1b")   # 16 layers, 32 query heads, head dim 64 (q/k and v), full causal attention


def _scn(attention="flash", document_len=None, seq_len=16384, micro_batch=1, **train):
    t = {"seq_len": seq_len, "micro_batch": micro_batch, "attention": attention, "allow_longer_context": True,
         **train}
    if document_len is not None:
        t["document_len"] = document_len
    return {"model": "llama-3.2-1b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1}, "train": t}


def _train(**kw):
    return scenario_from_dict(_scn(**kw)).train


def test_attention_flops_of_a_packed_row_by_hand():
    assert (L1B.num_layers, L1B.num_heads, L1B.head_dim, L1B.v_head_dim) == (16, 32, 64, 64)
    per_pair = 16 * 32 * 2 * (64 + 64)          # QK^T and PV, 2 FLOPs per multiply-add, all layers
    whole_row = per_pair * 16384 * 16385 // 2   # one causal span of 16,384 tokens
    documents = per_pair * 8 * (2048 * 2049 // 2)   # eight causal spans of 2,048 tokens
    assert per_pair == 131_072 and (whole_row, documents) == (17_593_259_786_240, 2_200_096_997_376)
    packed = attention_flops_per_token_forward(L1B, attention_span(_train(document_len=2048))) * 16384
    plain = attention_flops_per_token_forward(L1B, attention_span(_train())) * 16384
    assert packed == pytest.approx(documents, rel=1e-12)
    assert plain == pytest.approx(whole_row, rel=1e-12)
    assert packed / plain == pytest.approx(2049 / 16385, rel=1e-12)   # about an eighth


def test_span_only_under_flash_and_never_past_the_row():
    assert attention_span(_train(document_len=2048)) == 2048
    assert attention_span(_train(attention="sdpa", document_len=2048)) == 16384
    assert attention_span(_train(attention="eager", document_len=2048)) == 16384
    assert attention_span(_train(document_len=16384)) == 16384


def _est(**kw):
    return api.estimate(_scn(**kw))


def test_packed_row_prices_attention_as_its_documents_and_linears_as_its_tokens():
    packed = _est(document_len=2048)
    separate = _est(seq_len=2048, micro_batch=8)        # the same 8 documents as 8 unpacked sequences
    whole = _est()
    b_p, b_s, b_w = (e.performance.breakdown for e in (packed, separate, whole))
    # cu_seqlens: the kernel runs each 2,048-token document, at the 2,048-token rate, as 8 sequences would
    assert b_p["compute_attention"] == pytest.approx(b_s["compute_attention"], rel=1e-9)
    assert b_p["compute_attention"] < 0.2 * b_w["compute_attention"]
    # the linears see the row's 16,384 tokens either way
    assert b_p["compute_matmul"] == pytest.approx(b_w["compute_matmul"], rel=1e-12)
    assert b_p["compute_matmul"] == pytest.approx(b_s["compute_matmul"], rel=1e-9)
    assert packed.performance.details["tokens_per_step"] == whole.performance.details["tokens_per_step"] == 16384
    assert packed.performance.step_time_s < whole.performance.step_time_s


def test_memory_is_unchanged_by_packing():
    # flash varlen keeps activations per token (no scores); eager keeps the whole row's masked scores
    for attention in ("flash", "eager"):
        assert _est(attention=attention, document_len=2048).memory.peak_bytes_per_gpu == \
            _est(attention=attention).memory.peak_bytes_per_gpu


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_masking_stacks_compute_the_whole_row_and_say_so(attention):
    packed, whole = _est(attention=attention, document_len=2048), _est(attention=attention)
    assert packed.performance.step_time_s == pytest.approx(whole.performance.step_time_s, rel=1e-12)
    assert any("document_len" in w and "whole row" in w for w in packed.warnings)
    assert not any("document_len" in w for w in whole.warnings)


@pytest.mark.parametrize("change, needle", [
    ({"document_len": 4096, "seq_len": 2048}, "longer than the packed row"),
    ({"document_len": 512, "objective": "grpo"}, "rl.packing"),
])
def test_scenario_refusals(change, needle):
    data = _scn(seq_len=change.pop("seq_len", 16384), **change)
    with pytest.raises(GpuplanError) as err:
        api.estimate(data)
    assert needle in str(err.value)


def test_megatron_without_transformer_engine_attention_is_refused():
    data = dict(_scn(attention="eager", document_len=2048), framework="megatron")
    with pytest.raises(GpuplanError) as err:
        api.estimate(data)
    assert "Transformer Engine" in str(err.value)


def test_encoder_decoder_is_refused():
    data = {"model": "t5-small", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1},
            "train": {"seq_len": 512, "document_len": 128}}
    with pytest.raises(GpuplanError) as err:
        api.estimate(data)
    assert "encoder-decoder" in str(err.value)


# ---- launch ------------------------------------------------------------------------------------------------
def _dpo_example(**train) -> Scenario:
    return load_scenario(str(ROOT / "examples" / "dpo-lora-8b.yaml")).replace(train=train)


def test_axolotl_writes_sample_packing_for_sft():
    cfg = yaml.safe_load(launch_files(_dpo_example(objective="sft", document_len=512), "axolotl")["axolotl.yaml"])
    assert (cfg["sample_packing"], cfg["pad_to_sequence_len"], cfg["sequence_len"]) == (True, True, 2048)
    plain = yaml.safe_load(launch_files(_dpo_example(objective="sft"), "axolotl")["axolotl.yaml"])
    assert "sample_packing" not in plain


def test_llamafactory_writes_neat_packing_for_sft_one_row_per_micro_step():
    scn = _dpo_example(objective="sft", document_len=512, micro_batch=1)
    cfg = yaml.safe_load(launch_files(scn, "llama-factory")["llamafactory.yaml"])
    assert (cfg["neat_packing"], cfg["cutoff_len"], cfg["stage"]) == (True, 2048, "sft")
    with pytest.raises(UnsupportedError, match="bsz|one packed row"):
        launch_files(_dpo_example(objective="sft", document_len=512, micro_batch=2), "llama-factory")


@pytest.mark.parametrize("engine", ["axolotl", "llama-factory", "trl"])
def test_packed_preference_rows_are_refused(engine):
    with pytest.raises(UnsupportedError, match="document_len"):
        launch_files(_dpo_example(document_len=512, micro_batch=1), engine)


@pytest.mark.parametrize("engine", ["hf", "torchrun", "deepspeed"])
def test_engines_that_do_not_pack_refuse(engine):
    with pytest.raises(UnsupportedError, match="axolotl, llama-factory"):
        launch_files(_dpo_example(objective="sft", document_len=512), engine)
