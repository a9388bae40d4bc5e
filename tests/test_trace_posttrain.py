"""Post-training steps on fake tensors (trace/_posttrain.py, TRL v1.9.0's DPO, KTO, ORPO, SimPO steps and GRPO
training pass)
against hand counts on a tiny config, and the memory engine against those traces (issue 20: within 5 %):
live on a two-layer cut of SmolLM-135M, and on the stored full-size traces (scripts/trace_posttrain.py)."""
import json
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import ROOT  # noqa: E402
from gpuplan.errors import UnsupportedError  # noqa: E402
from gpuplan.scenario import scenario_from_dict  # noqa: E402
from gpuplan.trace import trace  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from trace_posttrain import estimated  # noqa: E402

H, I, A, KV, D, L, V = 64, 96, 4, 2, 16, 2, 1024
TINY = {"model_type": "llama", "hidden_size": H, "intermediate_size": I, "num_attention_heads": A,
        "num_key_value_heads": KV, "head_dim": D, "num_hidden_layers": L, "vocab_size": V,
        "tie_word_embeddings": False, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "hidden_act": "silu"}


def r512(n):          # the CUDA caching allocator rounds every block up to 512 bytes
    return -(-n // 512) * 512


def param_numels():
    layer = [A * D * H, KV * D * H, KV * D * H, H * A * D, I * H, I * H, H * I, H, H]
    return [V * H] + layer * L + [H, V * H]


def tiny(train, task="train"):
    return scenario_from_dict({"model": dict(TINY), "task": task, "hardware": {"gpu": "h100-sxm"},
                               "train": {"precision": "bf16", "master_weights": False, "attention": "sdpa", **train}})


def test_dpo_full_holds_a_reference_copy_in_the_policy_dtype():
    r = trace(tiny({"objective": "dpo", "seq_len": 32, "micro_batch": 1}))
    one_copy = sum(r512(2 * n) for n in param_numels())
    assert r.details["weights:weights"] == 2 * one_copy
    assert "reference_forward" in r.phases and "loss_metrics" in r.phases


def test_dpo_lora_runs_the_base_without_a_copy():
    sft = trace(tiny({"method": "lora", "lora_rank": 4, "seq_len": 32}, task="finetune"))
    dpo = trace(tiny({"objective": "dpo", "method": "lora", "lora_rank": 4, "seq_len": 32}, task="finetune"))
    assert dpo.details["weights:weights"] == sft.details["weights:weights"]


def test_dpo_backward_holds_four_fp32_logit_tensors():
    """[chosen; rejected] = 2 sequences of S: the fp32 logits (accelerate AMP's output copy; logsumexp saves
    them), and in the loss backward the stacked per-row gradients, gather's zero-filled gradient and its
    scatter_add over the S - 1 shifted positions."""
    S = 256
    r = trace(tiny({"objective": "dpo", "seq_len": S, "micro_batch": 1}))
    assert r.phase == "backward"
    assert r.components["logits"] == r512(2 * S * V * 4) + 3 * r512(2 * (S - 1) * V * 4)


def test_grpo_backward_holds_the_in_place_temperature_division_buffers():
    """logits_to_keep = C + 1, sliced to C, divided in place: its backward (CopySlices) holds the gradient of
    the C + 1 logits, a fresh buffer of that size, a clone of the C slice and the division's output."""
    P, C, B = 32, 224, 2
    r = trace(tiny({"objective": "grpo", "micro_batch": B,
                    "rl": {"prompts_per_step": 1, "group_size": B, "prompt_len": P, "max_new_tokens": C}}))
    assert r.phase == "backward"
    assert r.components["logits"] == 2 * r512(B * (C + 1) * V * 4) + 2 * r512(B * C * V * 4)
    assert "logprob_forward" in r.phases


def test_kto_backward_holds_four_fp32_logit_tensors_of_the_unpaired_batch():
    """B = 2 unpaired sequences (no pairing): the DPO block over B sequences, not 2B."""
    S = 256
    r = trace(tiny({"objective": "kto", "seq_len": S, "micro_batch": 2}))
    assert r.phase == "backward"
    assert r.components["logits"] == r512(2 * S * V * 4) + 3 * r512(2 * (S - 1) * V * 4)
    assert {"kl_forward", "reference_forward", "loss_metrics"} <= set(r.phases)


def test_kto_metrics_hold_the_index_select_copies():
    """loss_metrics at S = 1024, B = 2: the policy's and reference's fp32 logits (2 x 2 S V 4), the chosen and
    rejected index_select copies (2 (S-1) V 4 together) and one side's boolean-mask copy ((S-1) V 4). The 2-layer
    model's saved activations, weights and optimizer state are the rest, equal in the backward phase; the two
    moments differ besides only by per-token tensors (log-probs, masks and their gradients: a few B x S x 4-byte
    vectors, under 16 B S 4 = 64 KiB here, against 4 MB per logit tensor)."""
    S = 1024
    r = trace(tiny({"objective": "kto", "seq_len": S, "micro_batch": 2}))
    logits = 2 * r512(2 * S * V * 4) + r512((S - 1) * V * 4) * 2 + r512((S - 1) * V * 4)
    backward = r512(2 * S * V * 4) + 3 * r512(2 * (S - 1) * V * 4)
    assert abs((r.phases["backward"] - r.phases["loss_metrics"]) - (backward - logits)) <= 16 * S * 4


@pytest.mark.parametrize("objective", ["orpo", "simpo"])
def test_orpo_and_simpo_add_the_chosen_halfs_log_softmax(objective):
    """[chosen; rejected] = 2 sequences: DPO's four fp32 logit tensors, plus the cross-entropy's saved fp32
    log-softmax over the chosen sequence's S - 1 shifted positions; no reference weights."""
    S = 256
    r = trace(tiny({"objective": objective, "seq_len": S, "micro_batch": 1}))
    assert r.phase == "backward"
    assert r.components["logits"] == r512(2 * S * V * 4) + 3 * r512(2 * (S - 1) * V * 4) + r512((S - 1) * V * 4)
    one_copy = sum(r512(2 * n) for n in param_numels())
    assert r.details["weights:weights"] == one_copy


@pytest.mark.parametrize("train,why", [
    ({"objective": "reward", "seq_len": 32}, "objective 'reward'"),
    ({"objective": "dpo", "seq_len": 32}, "more than one GPU"),
    ({"objective": "dpo", "seq_len": 32, "pair_concat": "sequence"}, "pair_concat = sequence"),
])
def test_untraced_post_training_is_a_clear_error(train, why):
    scn = {"model": dict(TINY), "task": "train", "hardware": {"gpu": "h100-sxm", "count": 1}, "train": train}
    if "more than" in why:
        scn["hardware"]["count"] = 2
        scn["parallel"] = {"dp": 2}
    with pytest.raises(UnsupportedError) as err:
        trace(scenario_from_dict(scn))
    assert why in str(err.value)


# ---- the memory engine against the traces ---------------------------------------------------------------
def _cut_smollm():
    from gpuplan.models import get_model
    cfg = dict(get_model("smollm-135m").config)
    cfg["num_hidden_layers"] = 2
    return cfg


LIVE = {
    "dpo full": ("train", {"objective": "dpo", "seq_len": 512, "micro_batch": 1}),
    "dpo full mw": ("train", {"objective": "dpo", "seq_len": 512, "micro_batch": 1, "master_weights": True}),
    "dpo lora": ("finetune", {"objective": "dpo", "method": "lora", "seq_len": 512, "micro_batch": 1}),
    # a completion of half the sequence: TRL's block (16 B per completion logit) is 8 B per sequence logit here,
    # HF's fp32 cross-entropy over the whole sequence would be 12 (equal only when the completion is 3/4)
    "kto full": ("train", {"objective": "kto", "seq_len": 512, "micro_batch": 2}),
    "orpo lora": ("finetune", {"objective": "orpo", "method": "lora", "seq_len": 512, "micro_batch": 1}),
    "simpo full": ("train", {"objective": "simpo", "seq_len": 512, "micro_batch": 1}),
    "grpo full": ("train", {"objective": "grpo", "micro_batch": 2, "rl": {
        "prompts_per_step": 1, "group_size": 2, "prompt_len": 256, "max_new_tokens": 256}}),
}


@pytest.mark.parametrize("name", LIVE)
def test_estimate_within_5_percent_of_a_live_trace(name):
    task, train = LIVE[name]
    scn = {"model": _cut_smollm(), "task": task, "hardware": {"gpu": "h100-sxm", "count": 1},
           "train": {"master_weights": False, **train}}
    traced = trace(scenario_from_dict(scn)).peak_bytes
    est, _ = estimated(scn)
    assert abs(est - traced) / traced <= 0.05, f"{name}: traced {traced}, estimated {est:.0f}"


STORED = json.loads((ROOT / "validation" / "traces_posttrain.json").read_text())


@pytest.mark.parametrize("row", STORED, ids=[r["name"] for r in STORED])
def test_estimate_within_5_percent_of_stored_traces(row):
    est, phase = estimated(row["scenario"])
    traced = row["peak_bytes"]
    assert abs(est - traced) / traced <= 0.05, f"traced {traced} ({row['phase']}), estimated {est:.0f} ({phase})"


def test_stored_traces_cover_dpo_full_lora_and_grpo():
    objs = {(r["scenario"]["train"]["objective"], r["scenario"]["train"].get("method", "full")) for r in STORED}
    assert {("dpo", "full"), ("dpo", "lora"), ("grpo", "full"), ("grpo", "lora"), ("kto", "full"), ("kto", "lora"),
            ("orpo", "full"), ("simpo", "lora")} <= objs
