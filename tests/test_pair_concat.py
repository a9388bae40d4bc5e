"""train.pair_concat: a preference pair in the batch (TRL's concatenated_forward: two seq_len rows) or joined on the
sequence axis (open-instruct's OLMo-core DPO with packing: one 2 x seq_len row, attention causal across both
sides). Attention FLOPs by hand for a 2 x 16,384-token row against two 16,384-token rows, speed against the SFT
steps of the same rows, memory (flash: equal; eager: the scores of the longer row), refusals and launch."""
from __future__ import annotations

import pytest

from gpuplan import api
from gpuplan.errors import GpuplanError, InputError, UnsupportedError
from gpuplan.estimate.flops import attention_flops_per_token_forward, attention_span
from gpuplan.launch import launch_files
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict

L1B = get_model("llama-3.2-1b")   # 16 layers, 32 query heads, head dim 64 (q/k and v), full causal attention


def _scn(pair_concat=None, objective="dpo", seq_len=16384, attention="flash", micro_batch=1, model="llama-3.2-1b",
         **train):
    t = {"objective": objective, "seq_len": seq_len, "micro_batch": micro_batch, "attention": attention,
         "allow_longer_context": True, **train}
    if objective in ("dpo", "ipo", "kto") and "reference" not in t:
        t["reference"] = "precomputed"
    if pair_concat is not None:
        t["pair_concat"] = pair_concat
    return {"model": model, "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1}, "train": t}


def _train(**kw):
    return scenario_from_dict(_scn(**kw)).train


def test_attention_flops_of_a_joined_pair_by_hand():
    per_pair = 16 * 32 * 2 * (64 + 64)                 # QK^T and PV, 2 FLOPs per multiply-add, all layers
    joined = per_pair * 32768 * 32769 // 2             # one causal span of 2 x 16,384 tokens
    two_rows = 2 * per_pair * (16384 * 16385 // 2)     # chosen and rejected, each its own causal span
    assert (joined, two_rows) == (70_370_891_661_312, 35_186_519_572_480)
    seq = attention_flops_per_token_forward(L1B, attention_span(_train(pair_concat="sequence"))) * 32768
    bat = attention_flops_per_token_forward(L1B, attention_span(_train())) * 32768
    assert seq == pytest.approx(joined, rel=1e-12)
    assert bat == pytest.approx(two_rows, rel=1e-12)
    assert seq / bat == pytest.approx(32769 / 16385, rel=1e-12)   # about twice: the rejected side sees the chosen


def test_span_of_a_joined_pair_with_documents():
    # open-instruct after #1670 passes doc_lens: each side's documents attend to themselves, under flash only
    assert attention_span(_train(pair_concat="sequence")) == 32768
    assert attention_span(_train(pair_concat="batch")) == 16384
    assert attention_span(_train(pair_concat="sequence", document_len=2048)) == 2048
    assert attention_span(_train(pair_concat="sequence", document_len=2048, attention="sdpa")) == 32768
    assert attention_span(_train(pair_concat="sequence", document_len=16384)) == 16384


def _sft(seq_len, micro_batch):
    return api.estimate(_scn(objective="sft", seq_len=seq_len, micro_batch=micro_batch)).performance


def test_joined_pair_is_priced_as_one_long_row_of_the_same_tokens():
    seq = api.estimate(_scn(pair_concat="sequence", seq_len=4096)).performance
    bat = api.estimate(_scn(seq_len=4096)).performance
    one_long, two_short = _sft(8192, 1), _sft(4096, 2)
    assert seq.details["tokens_per_step"] == bat.details["tokens_per_step"] == 8192
    assert seq.breakdown["compute_matmul"] == pytest.approx(bat.breakdown["compute_matmul"], rel=1e-12)
    # the policy pass with the reference cached is the SFT step of the rows it runs
    assert seq.breakdown["compute_attention"] == pytest.approx(one_long.breakdown["compute_attention"], rel=1e-9)
    assert bat.breakdown["compute_attention"] == pytest.approx(two_short.breakdown["compute_attention"], rel=1e-9)
    assert seq.step_time_s == pytest.approx(one_long.step_time_s, rel=1e-9)
    assert seq.breakdown["compute_attention"] > 1.5 * bat.breakdown["compute_attention"]


def _mem(**kw):
    return api.estimate(_scn(seq_len=2048, **kw)).memory


def test_memory_equal_under_flash():
    seq, bat = _mem(pair_concat="sequence"), _mem()
    assert seq.components == bat.components and seq.peak_bytes_per_gpu == bat.peak_bytes_per_gpu
    # TRL's logged metrics copy the shifted logits: one position fewer per row, so one row (128,256 fp32 logits)
    # more when the pair is one row
    assert seq.phases["loss_metrics"] - bat.phases["loss_metrics"] == 128_256 * 4


def test_eager_keeps_the_scores_of_the_joined_row():
    # eager scores are per (head, query, key): 2 rows x s^2 against one row of (2s)^2, twice as many
    extra_bat = _mem(attention="eager").components["activations"] - _mem().components["activations"]
    extra_seq = (_mem(attention="eager", pair_concat="sequence").components["activations"]
                 - _mem(pair_concat="sequence").components["activations"])
    assert extra_bat > 0 and extra_seq == 2 * extra_bat
    assert extra_bat % (2 * 32 * 2048 * 2048 * 16) == 0      # whole bytes per score, rows x heads x s^2 x layers


@pytest.mark.parametrize("objective", ["sft", "kto", "reward", "grpo", "distill"])
def test_refused_without_a_pair(objective):
    extra = {"teacher": "llama-3.2-1b"} if objective == "distill" else {}
    with pytest.raises((GpuplanError, ValueError)) as err:
        scenario_from_dict(_scn(pair_concat="sequence", objective=objective, seq_len=1024, **extra))
    assert "pair_concat" in str(err.value) and objective in str(err.value)


@pytest.mark.parametrize("objective", ["dpo", "ipo", "orpo", "simpo"])
def test_pair_objectives_accept_it(objective):
    assert scenario_from_dict(_scn(pair_concat="sequence", objective=objective)).train.pair_concat == "sequence"


def test_encoder_decoder_is_refused():
    with pytest.raises(InputError) as err:
        api.estimate(_scn(pair_concat="sequence", model="t5-small", seq_len=512))
    assert "pair_concat" in str(err.value) and "encoder-decoder" in str(err.value)


def test_context_counts_the_joined_row():
    d = _scn(pair_concat="sequence", seq_len=16384)
    d["train"]["allow_longer_context"] = False
    d["model"] = "llama-3.1-8b"                       # 131,072-token context: 2 x 16,384 fits
    api.estimate(d)
    d["train"]["seq_len"] = 98304                      # one side fits, the joined row (196,608) does not
    with pytest.raises(InputError) as err:
        api.estimate(d)
    assert "pair_concat" in str(err.value) and "196,608" in str(err.value)


def test_launch_refuses_the_sequence_layout():
    with pytest.raises(UnsupportedError) as err:
        launch_files(scenario_from_dict(_scn(pair_concat="sequence", seq_len=2048)), "trl")
    assert "pair_concat" in str(err.value)


def test_partial_scenario_context_counts_the_joined_row():
    from gpuplan.validate import check_partial_against_model
    m = get_model("llama-3.1-8b")
    data = {"model": "llama-3.1-8b", "task": "finetune",
            "train": {"objective": "dpo", "seq_len": 98304, "pair_concat": "sequence", "reference": "precomputed"}}
    with pytest.raises(InputError) as err:
        check_partial_against_model(data, m)
    assert "pair_concat" in str(err.value) and "196,608" in str(err.value)
    data["train"]["pair_concat"] = "batch"
    check_partial_against_model(data, m)
