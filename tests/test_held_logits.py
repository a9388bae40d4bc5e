"""train.held_logits: the model output (its logits) a training loop keeps through backward (hand arithmetic)."""
from __future__ import annotations

from gpuplan import api
from gpuplan.estimate.memory import stranded_logits_bytes
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict


def _scn(held: str) -> dict:
    return {"model": "llama-2-7b-hf", "task": "finetune", "framework": "hf",
            "hardware": {"gpu": "a100-sxm-80gb", "count": 1},
            "train": {"method": "lora", "precision": "bf16", "master_weights": False, "seq_len": 2048,
                      "micro_batch": 2, "global_batch": 2, "recompute": "full", "held_logits": held}}


def test_fp32_output_adds_four_bytes_per_logit_and_model_dtype_two():
    # Llama-2-7B: vocabulary 32,000; 2 x 2,048 tokens -> 131,072,000 logits
    logits = 32_000 * 2 * 2048
    base = api.estimate(_scn("none")).memory.components["logits"]
    assert api.estimate(_scn("fp32")).memory.components["logits"] - base == 4 * logits
    assert api.estimate(_scn("model")).memory.components["logits"] - base == 2 * logits


def test_fp32_output_strands_the_freed_16_bit_logits():
    model = get_model("llama-2-7b-hf")
    held = scenario_from_dict(_scn("fp32"), "t")
    assert stranded_logits_bytes(held, model, "only") == 2 * 32_000 * 2 * 2048
    # HF Trainer drops the output: the 16-bit logits are freed before the fp32 backward requests all the same
    assert stranded_logits_bytes(scenario_from_dict(_scn("none"), "t"), model, "only") == 2 * 32_000 * 2 * 2048
    # a loop that holds the 16-bit output keeps the block in use
    assert stranded_logits_bytes(scenario_from_dict(_scn("model"), "t"), model, "only") == 0.0


def test_default_is_the_hf_trainer():
    # HF Trainer's compute_loss returns the loss alone: nothing held
    scn = _scn("none")
    scn["train"] = {k: v for k, v in scn["train"].items() if k != "held_logits"}
    assert scenario_from_dict(scn, "t").train.held_logits == "none"
