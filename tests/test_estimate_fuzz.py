"""Robustness: random but fixed (seeded) scenarios across models, GPUs, tasks, layouts and techniques.
Every one either estimates (components summing to the peak, null where a key does not apply) or fails
with a GpuplanError that names the problem; never an unexpected exception."""
import random

import pytest

from gpuplan.api import estimate
from gpuplan.errors import GpuplanError

MODELS = ["llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b-v0.1", "deepseek-v2-lite", "gemma-2-9b", "gpt2",
          "falcon-7b-instruct", "phi-3-mini-4k-instruct", "gpt-oss-20b", "llama-3.1-70b", "qwen2.5-0.5b",
          "olmo-2-1124-7b", "gemma-3-4b-it", "gpt-neox-20b", "deepseek-v3"]
GPUS = ["h100-sxm", "a100-sxm-80gb", "rtx-4090", "mi300x", "l40s", "t4", "v100-sxm2-32gb", "tpu-v5p", "m2-ultra",
        "gaudi3", "b200", "rtx-3090", "h200-sxm"]


def _scenario(rng: random.Random) -> dict:
    task = rng.choice(["train", "finetune", "infer"])
    count = rng.choice([1, 2, 4, 8, 16, 64])
    tp, pp, cp = rng.choice([1, 1, 2, 4, 8]), rng.choice([1, 1, 2, 4]), rng.choice([1, 1, 2])
    if count % (tp * pp * cp):
        tp, pp, cp = 1, 1, 1
    d = {"model": rng.choice(MODELS), "task": task, "hardware": {"gpu": rng.choice(GPUS), "count": count},
         "parallel": {"tp": tp, "pp": pp, "cp": cp, "zero": rng.choice([0, 1, 2, 3]), "ep": rng.choice([1, 1, 2, 8]),
                      "offload": rng.choice(["none", "none", "optimizer", "optimizer+params"]),
                      "vpp": rng.choice([1, 2])},
         "framework": rng.choice(["hf", "megatron", "deepspeed", "torchtitan", "torchtune", "litgpt"])}
    if task == "infer":
        d["parallel"].update(cp=1, zero=0, offload="none")
        d["infer"] = {"engine": rng.choice(["vllm", "sglang", "trtllm", "llama.cpp", "hf"]),
                      "weights": rng.choice(["bf16", "fp8", "awq-int4", "gguf-q4_k_m", "nf4", "fp16"]),
                      "kv_cache": rng.choice(["bf16", "fp8"]), "concurrency": rng.choice([1, 8, 64, 512]),
                      "prompt_len": rng.choice([128, 4096]), "output_len": rng.choice([1, 128]),
                      "gpu_layers": rng.choice([None, 10])}
    else:
        d["train"] = {"method": rng.choice(["full", "lora", "qlora"]),
                      "precision": rng.choice(["bf16", "fp16", "fp32", "fp8"]),
                      "master_weights": rng.choice([True, False]),
                      "optimizer": rng.choice(["adamw", "adamw-8bit", "sgd", "adafactor", "lion"]),
                      "seq_len": rng.choice([512, 4096, 32768]), "micro_batch": rng.choice([1, 4]),
                      "global_batch": rng.choice([None, 64, 512]), "recompute": rng.choice(["none", "selective", "full"]),
                      "attention": rng.choice(["flash", "sdpa", "eager"]), "tokens": rng.choice([None, 1e9]),
                      "loss": rng.choice(["full", "chunked", "fused-linear"]), "compile": rng.choice([True, False]),
                      "lora_dropout": rng.choice([0.0, 0.05]), "optimizer_in_backward": rng.choice([False, True]),
                      "activation_offload": rng.choice([False, True])}
    return d


@pytest.mark.parametrize("seed", range(6))
def test_random_scenarios_estimate_or_explain(seed):
    rng = random.Random(seed)
    for _ in range(40):
        d = _scenario(rng)
        try:
            est = estimate(d, allow_hub=False)
        except GpuplanError as err:
            assert err.what and err.why
            continue
        j = est.to_json()
        assert sum(j["memory"]["components"].values()) == j["memory"]["peak_bytes_per_gpu"], d
        perf = j["performance"]
        if d["task"] == "infer":
            assert perf["step_time_s"] is None
        else:
            assert perf["ttft_s"] is None and perf["tpot_s"] is None
