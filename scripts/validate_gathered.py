"""Score gpuplan on the gathered public measurements (validation/gathered/*.csv): runs no constant
was fitted on. Prints each row's prediction next to the measurement and the error summary.

    PYTHONPATH=src python scripts/validate_gathered.py [--csv]
"""
from __future__ import annotations

import argparse
import csv
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpuplan import api  # noqa: E402
from gpuplan.errors import GpuplanError  # noqa: E402

GiB = 1024 ** 3


def torch_version(row: dict) -> str:
    """The torch a row ran (train.csv `torch_version`, measured.csv `torch`), which picks PyTorch SDPA's attention
    kernel (estimate/attention_kernels.py `sdpa_prefers_cudnn`); "unknown" where the source does not state it:
    FlashAttention-2, the default before torch 2.11, rather than the current torch's cuDNN."""
    return row.get("torch_version") or row.get("torch") or "unknown"


def scenario(row: dict) -> dict:
    """The gpuplan scenario a row's stated settings describe."""
    dp = int(row["fsdp"])
    zero = int(row["zero"]) if row.get("zero") else (3 if dp > 1 else 0)
    train = {"precision": row["precision"], "seq_len": int(row["seq_len"]),
             "micro_batch": int(row["micro_batch"]), "global_batch": int(row["global_batch"]),
             "recompute": row["recompute"], "compile": row["compile"] == "true",
             "compile_loss": row["compile_loss"] == "true", "pp_keep_outputs": row.get("pp_keep_outputs") == "true",
             "torch_version": torch_version(row)}
    if row.get("recompute_layers"):
        train["recompute_layers"] = int(row["recompute_layers"])
    if row.get("fp8_recipe"):
        train["fp8_recipe"] = row["fp8_recipe"]
    if row.get("recompute_modules"):       # Megatron --recompute-modules under selective granularity
        train["recompute_modules"] = row["recompute_modules"].split()
    if row.get("moe_capacity_factor"):     # Megatron token-drop, inputs padded to capacity
        train["moe_capacity_factor"] = float(row["moe_capacity_factor"])
    return {
        "model": row["model"], "task": "train", "framework": row["framework"],
        "hardware": {"gpu": row["gpu"], "count": int(row["gpus"]), "gpus_per_node": int(row["gpus_per_node"])},
        "parallel": {"tp": int(row["tp"]), "pp": int(row["pp"]), "vpp": int(row["vpp"]), "cp": int(row["cp"]),
                     "ep": int(row.get("ep") or 1), "zero": zero, "dp": dp,
                     **({"etp": int(row["etp"])} if row.get("etp") else {}),
                     "tp_comm_overlap": row.get("tp_comm_overlap") == "true",
                     "ep_comm_overlap": row.get("ep_comm_overlap") == "true",
                     "ep_dispatcher": row.get("ep_dispatcher") or "alltoall",
                     **({"ep_dispatcher_sms": int(row["ep_dispatcher_sms"])} if row.get("ep_dispatcher_sms") else {})},
        "train": train,
    }


def finetune_scenario(row: dict) -> dict:
    """The LoRA/QLoRA fine-tuning scenario a finetune-memory.csv row's stated settings describe."""
    gpus = int(row["gpus"])
    train = {"method": row["method"], "precision": row["precision"],
             "master_weights": row["master_weights"] == "true", "optimizer": row["optimizer"],
             "seq_len": int(row["seq_len"]), "micro_batch": int(row["micro_batch"]),
             "global_batch": int(row["micro_batch"]) * gpus, "recompute": row["recompute"],
             "attention": row["attention"],
             # the loop keeps the model output (its logits) through backward: fp32 before transformers 4.46
             "held_logits": row.get("held_logits") or "none", "torch_version": torch_version(row)}
    if row["method"] in ("lora", "qlora"):
        targets = row["lora_targets"]
        train.update(lora_rank=int(row["lora_rank"]), lora_dropout=float(row["lora_dropout"] or 0),
                     lora_targets=targets if targets == "all-linear" else targets.split())
    if row["method"] == "qlora":
        train["qlora_double_quant"] = row["qlora_double_quant"] == "true"
    # torchtune's single-device full fine-tune: the optimizer stepped inside backward, bitsandbytes' paged states
    if row.get("optimizer_in_backward") == "true":
        train["optimizer_in_backward"] = True
    if row.get("paged_optimizer") == "true":
        train["paged_optimizer"] = True
    return {"model": row["model"], "task": "finetune", "framework": row["framework"],
            "hardware": {"gpu": row["gpu"], "count": gpus},
            "parallel": {"zero": int(row["zero"]), "dp": gpus, "offload": row["offload"]},
            "train": train}


def outside_torch_bytes(est, gpus: int) -> float:
    """The part of gpuplan's runtime overhead that no torch.cuda memory counter sees: the CUDA context and
    NCCL's buffers (estimate/memory.py Overhead; both are cudaMalloc'd outside the caching allocator). The rest,
    the cuBLAS workspaces (torch takes them from its caching allocator) and the allocator's unused reserve, is
    inside max_memory_reserved."""
    from gpuplan.estimate.memory import Overhead
    o = Overhead()
    return o.cuda_context + (o.nccl_per_peer_group if gpus > 1 else 0)


def allocator_reserve_bytes(est, gpus: int) -> float:
    """The caching allocator's unused reserve in gpuplan's runtime overhead: the overhead less the CUDA context,
    the library workspaces and NCCL's buffers (estimate/memory.py Overhead, its `fragmentation` share)."""
    from gpuplan.estimate.memory import Overhead
    o = Overhead()
    fixed = o.cuda_context + o.workspaces + (o.nccl_per_peer_group if gpus > 1 else 0)
    return max(0.0, est.memory.components["runtime_overhead"] - fixed)


def memory_pair(row: dict, est) -> tuple[float, float]:
    """(predicted, measured) GiB of a finetune-memory.csv row, compared at the level the source read:
    torch max_memory_allocated (gpuplan's allocated bytes: the peak less its runtime overhead),
    max_memory_reserved (the peak less what lies outside torch) or nvidia-smi (the whole peak)."""
    m = est.memory
    metric = row["memory_metric"]
    if metric == "max allocated":
        pred = m.peak_bytes_per_gpu - m.components["runtime_overhead"]
    elif metric == "max reserved":
        pred = m.peak_bytes_per_gpu - outside_torch_bytes(est, int(row["gpus"]))
    elif metric == "nvidia-smi":
        pred = m.peak_bytes_per_gpu
    elif metric == "max allocated, slept engine counted":
        pred = slept_engine_allocated_bytes(est)
    elif metric == "allocated + outside torch":
        # optimum's benchmark_gptq.py: torch's peak allocated plus (nvidia-smi peak - torch's peak reserved), i.e.
        # the whole peak less the caching allocator's unused reserve
        pred = m.peak_bytes_per_gpu - allocator_reserve_bytes(est, int(row["gpus"]))
    else:
        raise ValueError(f"row {row['id']}: memory_metric {metric!r} is not one of max allocated, max reserved, "
                         "nvidia-smi, allocated + outside torch, max allocated, slept engine counted")
    unit = {"GiB": GiB, "GB": 1e9, "MB": 1e6, "MiB": 2 ** 20}[row["memory_unit"]]
    return pred / GiB, float(row["memory"]) * unit / GiB


def slept_engine_allocated_bytes(est) -> float:
    """torch.cuda.max_memory_allocated() of a colocated RL step whose rollout engine sleeps in vLLM's sleep mode
    (posttrain-memory.csv, metric "max allocated, slept engine counted"). vLLM's CuMemAllocator creates the
    engine's weights and KV cache inside a torch MemPool, so torch counts them as allocated; asleep, it unmaps their
    memory itself (`unmap_and_release` on each handle, vllm/device_allocator/cumem.py `CuMemAllocator.sleep`) while
    the tensors stay allocated in torch's view. The counters therefore keep the engine's weights and KV pool through
    the log-prob and training passes: the peak they read is the larger of the rollout phase (trainer's resident
    states + the awake engine) and every other phase's allocation plus the slept engine's weights and pool. The
    engine's other share (profile-run workspace, graphs) is freed through torch and not kept. Allocated bytes: each
    phase's total less the runtime overhead (CUDA context, NCCL, library workspaces, the allocator's reserve)."""
    m = est.memory
    overhead = m.components["runtime_overhead"]
    slept = (m.limits.get("rollout_engine_weights_bytes") or 0) + (m.limits.get("rollout_kv_pool_bytes") or 0)
    best = 0.0
    for name, total in m.phases.items():
        alloc = total - overhead
        best = max(best, alloc if name == "rollout" else alloc + slept)
    return best


def measured_scenario(row: dict) -> dict:
    """The scenario a measured.csv row ran (scripts/measure_suite.py on a lent GPU: one GPU, HF transformers)."""
    hw = {"gpu": row["gpu"], "count": 1, **({"host_cpu": row["host_cpu"]} if row.get("host_cpu") else {})}
    base = {"model": row["model"], "task": row["task"], "framework": row["framework"], "hardware": hw}
    if row["task"] == "infer":
        return {**base, "infer": {"engine": row["engine"], "weights": row["weights"], "prompt_len": int(row["prompt_len"]),
                                  "output_len": int(row["output_len"]), "concurrency": int(row["concurrency"])}}
    train = {"objective": row.get("objective") or "sft", "method": row["method"], "precision": row["precision"],
             "master_weights": row["master_weights"] == "true",
             "optimizer": row["optimizer"], "optimizer_impl": row["optimizer_impl"], "recompute": row["recompute"],
             "attention": row["attention"], "seq_len": int(row["seq_len"]), "micro_batch": int(row["micro_batch"]),
             "torch_version": torch_version(row)}
    if row["lora_rank"]:
        train["lora_rank"] = int(row["lora_rank"])
    if row.get("reference"):
        train["reference"] = row["reference"]
    return {**base, **({"tool": row["tool"]} if row.get("tool") else {}), "train": train}


def measured_memory_pair(row: dict, est) -> tuple[float, float]:
    """(predicted, measured) GiB at torch's max_memory_reserved: what the caching allocator held at the peak, the
    level at which a run fails; gpuplan's peak less the CUDA context, which lies outside the allocator, plus the
    segment the harness's own model build leaves free (`harness_build_reserve_bytes`)."""
    pred = est.memory.peak_bytes_per_gpu - outside_torch_bytes(est, 1) + harness_build_reserve_bytes(row, est)
    return pred / GiB, float(row["peak_reserved_gib"])


def harness_build_reserve_bytes(row: dict, est) -> float:
    """The cached segment `gpuplan measure`'s model build leaves free, which a user's `from_pretrained` load does not.

    The harness builds the model with `AutoModelForCausalLM.from_config(...)` inside `torch.device("cuda")`
    (local/measure.py `_build_model`). A causal LM whose output projection is tied to the input embedding first
    allocates its own `lm_head = nn.Linear(hidden, vocab)` weight on the device (`LlamaForCausalLM.__init__`) and
    `post_init()` then ties it to the embedding, freeing that vocab x hidden block (transformers 5.x
    `tie_weights`); the caching allocator keeps its segment, and the peaks are reset after the build, so
    max_memory_reserved counts it. `from_pretrained` builds on the meta device and never allocates it.

    The run's first requests are served from that free block (best fit: it is the only free block then), so what
    stays free is at least the block less the peak phase's transient tensors (activations, KV cache, temporaries);
    a training run's gradients and lazily created optimizer states fill it whole. Replayed through the allocator
    model (scripts/trace_measure_reserve.py, with and without the build's block): HI04 0.45 GiB of its 0.49
    (this rule: 0.44), HI07 0.29 of 1.10 (this rule: 0, a lower bound), HS01 and HT06 0 (training)."""
    if row.get("task") != "infer":
        return 0.0
    from gpuplan.models import get_model
    from gpuplan.dtypes import weight_format
    spec = get_model(row["model"])
    if not spec.tie_embeddings:
        return 0.0
    block = spec.vocab_size * spec.hidden_size * weight_format(row["weights"]).bits / 8
    c = est.memory.components
    transient = c.get("activations", 0) + c.get("kv_cache", 0) + c.get("temporary", 0) + c.get("logits", 0)
    return float(max(0.0, block - transient))


def serve_scenario(row: dict) -> dict:
    scn = {"model": row["model"], "task": "infer",
           "hardware": {"gpu": row["gpu"], "count": int(row["gpus"])},
           "infer": {"engine": row["engine"], "weights": row["weights"], "kv_cache": row["kv_cache"],
                     "prompt_len": int(row["prompt_len"]), "output_len": int(row["output_len"]),
                     "concurrency": int(row["concurrency"])}}
    if row.get("tp"):
        scn["parallel"] = {"tp": int(row["tp"])}
    if row.get("max_num_seqs"):          # the engine's running-request cap, where the source states it
        scn["infer"]["max_num_seqs"] = int(row["max_num_seqs"])
    if row["engine"] == "vllm" and vllm_v0(row.get("engine_version", "")):
        scn["infer"]["vllm_v0"] = True         # V0's scheduler defaults and CUDA-graph rule (docs/speed.md §3.21)
        release = vllm_release(row.get("engine_version", ""))
        if release:                            # its code's host work, its async output processor (§3.35)
            scn["infer"]["vllm_v0_release"] = release
    if row["engine"] == "sglang" and sglang_before_overlap(row.get("engine_version", "")):
        scn["infer"]["async_scheduling"] = False   # no overlap scheduler: its host work adds (engine_host.py)
    version = re.search(r"transformers (\d+)\.(\d+)", row.get("source", ""))
    if row["engine"] == "hf" and version and int(version.group(1)) < 5:
        scn["infer"]["repeat_kv"] = True       # transformers 4.x copies a GQA cache to every query head (repeat_kv)
    tf_ver = re.search(r"transformers (\d+\.\d+(?:\.\d+)?)", row.get("source", ""))
    if row["engine"] == "hf" and tf_ver:
        scn["infer"]["transformers_version"] = tf_ver.group(1)   # ops per decoder layer (docs/speed.md §3.30)
    torch_ver = re.search(r"torch (\d+\.\d+(?:\.\d+)?)", row.get("source", ""))
    if row["engine"] == "hf" and torch_ver:
        scn["infer"]["torch_version"] = torch_ver.group(1)   # the torch the source states (cat kernel: < 2.1)
    kernel = _GPTQ_KERNELS.get(row.get("notes", "").split(";")[0].removeprefix("kernel ").strip())
    if kernel and row["engine"] == "hf" and row["weights"].startswith("gptq"):
        scn["infer"]["gptq_kernel"] = kernel   # the AutoGPTQ kernel the row names (optimum's benchmark table)
    return scn


def _leading_minor(version: str) -> tuple[int, int] | None:
    """(major, minor) of the release an engine_version's free text starts with ("0.6 V0 (...)" -> (0, 6)), or None."""
    m = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def vllm_v0(version: str) -> bool:
    """A row's vLLM release runs the V0 engine: every release before 0.8.0 (V1 became the default in 0.8.0; its
    first code landed on 2024-10-22, so a run of 2024 is V0). "0.6 V0 (...)" and "0.6.3" are V0, "0.10.2" is not."""
    v = _leading_minor(version)
    # a 0.8-0.10 release still ran V0 where the row says so (vLLM 0.8.3 falls back to V0 under
    # VLLM_ATTENTION_BACKEND=XFORMERS, logging "Falling back to V0": posttrain-memory.csv PV01/PV02)
    return v is not None and (v < (0, 8) or "V0 engine" in version)


def vllm_release(version: str) -> str | None:
    """The x.y.z release a row's engine_version names ("0.5.4.dev (main 2024-08-04, V0 engine)" -> "0.5.4": a main
    branch between 0.5.3.post1 and 0.5.4 runs 0.5.4's code but for what landed on the last day); None where the
    patch release is not stated ("0.6 V0 (release not stated; ...)")."""
    m = re.match(r"\s*(\d+\.\d+\.\d+)", version or "")
    return m.group(1) if m else None


def sglang_before_overlap(version: str) -> bool:
    """A row's SGLang release predates the overlap scheduler, on by default from v0.4 (engine_host.SGLANG; the same
    rule as validate_serving_load.OVERLAP_FROM): its scheduler's host work adds to every step."""
    v = _leading_minor(version)
    return v is not None and v < (0, 4)


# the kernel names optimum's GPTQ benchmark table uses (notes "kernel <name>; ...") -> infer.gptq_kernel
_GPTQ_KERNELS = {"exllama": "exllama", "exllamav2": "exllamav2", "autogptq-cuda-old": "cuda-old"}


def offline_tokens_per_s(row: dict, perf) -> float:
    """Predicted output tokens/s of a row. A row whose harness hands all its requests to the engine at once
    (harness `offline`: vLLM's benchmark_latency.py times one batch of `concurrency` prompts, benchmark_throughput.py
    its whole dataset) takes the engine's own run of that batch where gpuplan prices one (vLLM V0's chunked-prefill
    schedule: performance.details v0_offline_run); otherwise the steady state."""
    run = perf.details.get("v0_offline_run") if row.get("harness") == "offline" else None
    return run["output_tokens_per_s"] if run else perf.output_tokens_per_s


def tpot_pair(row: dict, perf) -> tuple[float, float]:
    """(predicted, measured) seconds per token of a serve.csv row, of the quantity the source timed:
    `tpot_measures` 'decode_step' for consecutive decode steps alone (bitsandbytes' tables: optimum-benchmark's
    per-token latency, docs/speed.md §3.37), else generate() time per new token (gpuplan's TPOT, which carries the
    batch's prefill share)."""
    pred = perf.breakdown["decode_step"] if row.get("tpot_measures") == "decode_step" else perf.tpot_s
    return pred, float(row["tpot_s"])


def throughput_pair(row: dict, perf) -> tuple[float, float] | None:
    """(predicted, measured) tokens/s of a batched-throughput row: output tokens/s, or input + output
    tokens/s where the source gives the total; None where the source leaves the kind unstated."""
    kind = row.get("throughput_kind")
    if not row.get("throughput_tokens_per_s") or kind not in ("output", "total"):
        return None
    pred = offline_tokens_per_s(row, perf)
    if kind == "total":
        pred *= (int(row["prompt_len"]) + int(row["output_len"])) / int(row["output_len"])
    return pred, float(row["throughput_tokens_per_s"])


# the training backend a row names -> gpuplan's framework. NeMo RL's DTensor worker wraps the HF model's blocks
# with FSDP2 `fully_shard` under MixedPrecisionPolicy(param_dtype bf16, reduce_dtype fp32) over fp32 parameters
# (nemo_rl/models/dtensor/parallelize.py L464-488, dtensor_policy_worker.py L188-205, v0.3.0 b1c86a8): the
# sharding, gather and fp32 reduce-scatter of torchtitan's FSDP2 profile; its HF modules' kernels are not
# torchtitan's own (flash-attention 2 over the packed sequences in both)
# verl's FSDP workers (strategy fsdp: FSDP1 FULL_SHARD over the HF model, MixedPrecision(param bf16, reduce fp32,
# buffer fp32), verl/workers/fsdp_workers.py L59-67 and L232-234 @44a65f9; strategy fsdp2: fully_shard) take the same
# FSDP2 profile. OpenRLHF and DeepSpeed-Chat train with DeepSpeed ZeRO (gpuplan's deepspeed profile).
# which PyTorch FSDP a torch backend shards with (parallel.fsdp_version): verl's `strategy: fsdp` is
# FullyShardedDataParallel (verl @44a65f9 verl/workers/fsdp_workers.py L154, the VL rows' code), `fsdp2` and NeMo RL's
# DTensor worker are fully_shard (nemo_rl/models/dtensor/parallelize.py L464-488 @v0.3.0)
# torch backends whose model is transformers' own code (train.hf_modules): NeMo RL's DTensor worker builds
# AutoModelForCausalLM (dtensor_policy_worker.py L188-216 @v0.3.0), verl's FSDP workers too (fsdp_workers.py @44a65f9)
HF_MODULE_BACKENDS = ("pytorch-dtensor", "pytorch-fsdp", "pytorch-fsdp2")
FSDP_VERSION = {"pytorch-fsdp": 1, "pytorch-fsdp2": 2, "pytorch-dtensor": 2}
TRAIN_BACKENDS = {"megatron-core": "megatron", "pytorch-dtensor": "torchtitan", "pytorch-fsdp": "torchtitan",
                  "pytorch-fsdp2": "torchtitan", "deepspeed": "deepspeed"}


def micro_batch(row: dict, col: str, prompt: int, max_new: int) -> int:
    """A row's micro-batch in gpuplan's units. gpuplan's packing fills a micro-batch up to
    micro_batch x (prompt + max_new_tokens) tokens. verl with use_remove_padding and without use_dynamic_bsz
    splits the batch into micro-batches of a fixed number of sequences and then strips their padding
    (dp_actor.py `batch.split(micro_batch_size)` then unpad_input, @44a65f9): `micro_batch_unit: sequences`
    says so, and that count of sequences of the row's mean length is stated as the padded sequences holding
    as many tokens."""
    n = int(row[col])
    if row.get("micro_batch_unit") != "sequences":
        return n
    return max(1, round(n * (prompt + int(row["mean_response_len"])) / (prompt + max_new)))


def posttrain_scenario(row: dict) -> dict:
    """The RL scenario a posttrain.csv row describes: the table's layout and batch, the recipe's engine
    settings; response lengths from the stated maximum and mean sequence lengths less the prompt."""
    prompt = int(row["prompt_len"])
    split = row["placement"] == "split"
    rollout_gpus = int(row["rollout_gpus"]) if split else 0
    rl = {"prompts_per_step": int(row["prompts_per_step"]), "group_size": int(row["group_size"]),
          "prompt_len": prompt, "max_new_tokens": int(row["max_seq_len"]) - prompt,
          "mean_response_len": int(row["mean_response_len"]), "engine": row["engine"],
          "placement": row["placement"], "rollout_tp": int(row["rollout_tp"]),
          "gpu_memory_utilization": float(row["gpu_memory_utilization"]), "reference": True,
          "async_steps": int(row["async_steps"] or 0)}
    if split:
        rl["rollout_gpus"] = rollout_gpus
    if row.get("packing"):
        rl["packing"] = row["packing"] == "true"
    if row.get("dynamic_batching"):     # NeMo RL dynamic batching instead of packing (exclusive)
        rl["dynamic_batching"] = row["dynamic_batching"] == "true"
    if row.get("engine_async_scheduling"):   # the rollout engine's version: async scheduling on or off
        rl["engine_async_scheduling"] = row["engine_async_scheduling"] == "true"
    if row.get("engine_in_process"):    # the vLLM engine core in the worker's process (NeMo RL's synchronous worker)
        rl["engine_in_process"] = row["engine_in_process"] == "true"
    if row["engine"] == "vllm" and vllm_v0(row.get("engine_version", "")):
        rl["engine_vllm_v0"] = True     # vLLM's V0 LLMEngine (before 0.8): its scheduler defaults and host work
    if row["engine"] == "vllm" and vllm_release(row.get("engine_version", "")):
        # the release sets how the engine sizes its KV pool beside the trainer (rl.engine_release, docs/posttrain.md)
        rl["engine_release"] = vllm_release(row["engine_version"])
    if row["framework"] == "nemo-rl":
        # NeMo RL builds vLLM before the policy, on a GPU the trainer has not touched (grpo.py L301-329 @v0.3.0)
        rl["engine_started"] = "before_trainer"
    if row.get("engine_python") and rl.get("engine_vllm_v0"):   # the CPython V0's host work runs under
        rl["engine_python"] = row["engine_python"]
    if row.get("engine_cuda_graphs"):   # false: the rollout engine runs eagerly (verl rollout.enforce_eager)
        rl["engine_cuda_graphs"] = row["engine_cuda_graphs"] == "true"
    if row.get("logprob_impl"):         # the trainer's log-prob block (NeMo RL's fp32 DistributedLogprob, by version)
        rl["logprob_impl"] = row["logprob_impl"]
    if row.get("host_loop"):            # the RL framework's own host work around the passes (rl.host_loop)
        rl["host_loop"] = row["host_loop"]
    if row.get("logprob_batch"):        # sequences per micro-batch of the log-prob passes
        rl["logprob_micro_batch"] = micro_batch(row, "logprob_batch", prompt, rl["max_new_tokens"])
    if row.get("train_global_batch"):   # sequences per optimizer step of the training pass
        rl["mini_batch"] = int(row["train_global_batch"])
    if row.get("reference_on_host"):
        rl["reference_on_host"] = row["reference_on_host"] == "true"
    if row.get("engine_sleep_level"):
        rl["engine_sleep_level"] = int(row["engine_sleep_level"])
    if row.get("offload_train_states"):
        rl["offload_train_states"] = row["offload_train_states"] == "true"
    if row.get("offload_pageable"):     # which offloaded states go to fresh pageable host memory (rl.offload_time)
        rl["offload_pageable"] = row["offload_pageable"]
    tp, pp, cp, ep = (int(row[k]) for k in ("train_tp", "train_pp", "train_cp", "train_ep"))
    return {"model": row["model"], "task": "finetune", "framework": TRAIN_BACKENDS[row["train_backend"]],
            "hardware": {"gpu": row["gpu"], "count": int(row["gpus"]), "gpus_per_node": int(row["gpus_per_node"])},
            "parallel": {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "zero": int(row.get("zero") or 0),
                         **({"etp": int(row["train_etp"])} if row.get("train_etp") else {}),
                         **({"sp": row["train_sp"].strip().lower() == "true"} if row.get("train_sp") else {}),
                         **({"fsdp_version": FSDP_VERSION[row["train_backend"]]}
                            if row["train_backend"] in FSDP_VERSION and int(row.get("zero") or 0) >= 3 else {})},
            "train": {"objective": row["objective"], "method": row["method"],
                      "micro_batch": micro_batch(row, "micro_batch", prompt, rl["max_new_tokens"]),
                      "recompute": row["recompute"], "rl": rl, "torch_version": torch_version(row),
                      # NeMo RL's DTensor worker and verl's FSDP workers train transformers' AutoModelForCausalLM
                      **({"hf_modules": True} if row["train_backend"] in HF_MODULE_BACKENDS else {}),
                      **({"grad_reduce_dtype": row["grad_reduce_dtype"]} if row.get("grad_reduce_dtype") else {}),
                      # Megatron's bias_activation_fusion as the run's model config set it (false: unfused SwiGLU)
                      **({"activation_fusion": row["activation_fusion"] == "true"}
                         if row.get("activation_fusion") else {}),
                      # Megatron's gradient_accumulation_fusion as the run's environment set it (false: no APEX)
                      **({"grad_accum_fusion": row["grad_accum_fusion"] == "true"}
                         if row.get("grad_accum_fusion") else {}),
                      # Megatron's moe_router_dtype as the run's config set it (NeMo RL: fp64, docs/speed.md §2.16)
                      **({"moe_router_dtype": row["moe_router_dtype"]} if row.get("moe_router_dtype") else {}),
                      # Megatron's moe_permute_fusion as the run's config set it (NeMo RL v0.4 Qwen3-30B: false)
                      **({"moe_permute_fusion": row["moe_permute_fusion"] == "true"}
                         if row.get("moe_permute_fusion") else {}),
                      # Megatron's precision-aware optimizer keeps 16-bit master-weight remainders
                      **({"master_weight_remainders": row["master_weight_remainders"] == "true"}
                         if row.get("master_weight_remainders") else {})}}


# preference.csv's training backends -> gpuplan's framework. open-instruct's dpo.py trains OLMo-core's
# TransformerTrainModule: FSDP2 fully_shard (HSDP, blocks wrapped) with param bf16 / reduce fp32 (dpo.py
# TransformerDataParallelConfig @ee0c4608), the torchtitan profile; dpo_tune_cache.py runs DeepSpeed ZeRO
PREFERENCE_BACKENDS = {"olmo-core-fsdp": "torchtitan", "deepspeed": "deepspeed", "pytorch-fsdp": "torchtitan"}
PREFERENCE_OBJECTIVES = ("dpo", "ipo", "kto", "orpo", "simpo")


def preference_scenario(row: dict) -> dict:
    """The preference-tuning scenario a preference.csv row describes. `micro_batch` is in gpuplan's unit, pairs of
    `max_seq_len`-token rows per GPU per micro-step (a packed micro-step padded to the budget is one pair);
    the optimizer step holds micro_batch x data-parallel ranks x grad_accum pairs."""
    if row["objective"] not in PREFERENCE_OBJECTIVES:
        raise ValueError(f"row {row['id']}: objective {row['objective']!r} is not one of {PREFERENCE_OBJECTIVES}")
    gpus, tp, pp, cp = (int(row[k]) for k in ("gpus", "train_tp", "train_pp", "train_cp"))
    dp = gpus // (tp * pp * cp)
    micro = int(row["micro_batch"])
    train = {"objective": row["objective"], "method": row["method"], "precision": row["precision"],
             "seq_len": int(row["max_seq_len"]), "micro_batch": micro,
             "global_batch": micro * dp * int(row["grad_accum"]), "recompute": row["recompute"],
             "compile": row["compile"] == "true", "reference": row["reference"],
             # a 16k packed row on a 4k-context model: the source trains past max_position_embeddings (RoPE)
             "allow_longer_context": True, "torch_version": torch_version(row)}
    if row.get("mean_document_len"):    # packed rows whose documents the model sees apart (varlen / doc_lens)
        train["document_len"] = int(row["mean_document_len"])
    if row.get("pack_tokens"):          # a pack padded to the row, its padding one more attended segment (doc_lens)
        train["pack_tokens"] = int(row["pack_tokens"])
    if row.get("attention_kernel"):     # the fused attention kernel the run's code picks (empty: the framework's)
        train["attention_kernel"] = row["attention_kernel"]
    if row.get("pair_concat"):          # chosen and rejected in the batch (TRL) or joined into one row (OLMo-core)
        train["pair_concat"] = row["pair_concat"]
    return {"model": row["model"], "task": "finetune", "framework": PREFERENCE_BACKENDS[row["train_backend"]],
            "hardware": {"gpu": row["gpu"], "count": gpus, "gpus_per_node": int(row["gpus_per_node"])},
            "parallel": {"tp": tp, "pp": pp, "cp": cp, "dp": dp, "zero": int(row["zero"]),
                         # HSDP: FSDP over shard_group data-parallel ranks, replicated dp/shard_group times
                         **({"shard_group": int(row["shard_group"])} if row.get("shard_group") else {})},
            "train": train}


# a source's per-phase times and the gpuplan phases each one covers (NeMo RL: generation; policy training;
# get logprobs = the old-policy and reference passes and the reference's swap; refit = the weight transfer and the
# states' move to the host: NeMo RL's refit timer `prepare_for_generation` holds offload_before/after_refit, while the
# move back (state_onload) runs in the timers logprob_inference_prep and training_prep, outside the four phases,
# grpo.py @06f6343); the engine's level-1 sleep runs inside `generation`, its weights' wake-up inside the refit; a
# rule-based reward's scoring (rule_reward, priced only when a row gives a rate) inside `generation` too
# (run_multi_turn_rollout -> calculate_rewards, grpo.py and rollouts.py @b1c86a8)
PHASES = {"generation_time_s": ("rollout", "engine_sleep", "rule_reward"),
          "train_time_s": ("actor_update", "critic_update"),
          "logprob_time_s": ("actor_logprob", "reference_logprob", "reference_swap", "critic_values", "reward"),
          "refit_time_s": ("weight_sync", "state_offload", "engine_wake")}


# verl's timers (ray_trainer.py fit() @44a65f9): `gen` wraps generate_sequences, whose rollout sharding manager
# loads the FSDP state_dict into the engine on entry and frees its weights and KV cache on exit
# (sharding_manager/fsdp_vllm.py __enter__/__exit__), so the weight transfer is inside generation; `old_log_prob`,
# `ref` and `values` are the no-grad passes; `update_actor` and `update_critic` the training (the rule-based
# reward and the advantages run in `adv`, which no column holds)
VERL_PHASES = {"generation_time_s": ("rollout", "engine_sleep", "engine_wake", "weight_sync", "engine_reload"),
               "train_time_s": ("actor_update", "critic_update"),
               "logprob_time_s": ("actor_logprob", "reference_logprob", "reference_swap", "critic_values")}
FRAMEWORK_PHASES = {"verl": VERL_PHASES}


def phase_pairs(row: dict, phases: dict) -> dict[str, tuple[float, float]]:
    """{source phase: (predicted s, measured s)} for the phases the row states, read with its framework's
    timers (NeMo RL's unless the framework has its own)."""
    cover = FRAMEWORK_PHASES.get(row.get("framework", ""), PHASES)
    return {col: (sum(phases.get(k, 0.0) for k in keys), float(row[col]))
            for col, keys in cover.items() if row.get(col)}


UNSCORED = "unscored:"   # a row whose notes start with this is listed, not scored (the reason follows)


def score(path: Path) -> list[dict]:
    out = []
    serving = path.stem == "serve"
    posttrain = path.stem == "posttrain"
    finetune = path.stem == "finetune-memory"
    preference = path.stem == "preference"
    measured = path.stem == "measured"
    pt_memory = path.stem == "posttrain-memory"
    with path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            rec = {"id": row["id"], "source": row["source"], "gpu": row["gpu"], "weights": row.get("weights", "")}
            if row.get("notes", "").startswith(UNSCORED):
                # listed for the record, never in the summary: its settings are unknown or not expressible
                rec["unscored"] = row["notes"][len(UNSCORED):].split(";")[0].split(". ")[0].strip()
                out.append(rec)
                continue
            try:
                scn = (measured_scenario(row) if measured
                       else serve_scenario(row) if serving else posttrain_scenario(row) if posttrain or pt_memory
                       else preference_scenario(row) if preference
                       else finetune_scenario(row) if finetune else scenario(row))
                est = api.estimate(scn)
            except GpuplanError as exc:
                rec["skip"] = str(exc).splitlines()[0]
                out.append(rec)
                continue
            if serving and row.get("throughput_tokens_per_s"):
                rec["engine"] = row["engine"]
                pair = throughput_pair(row, est.performance)
                if pair is not None:
                    rec["thr"] = pair
                else:   # kind unstated: both readings, kept out of the summary
                    out_tps = offline_tokens_per_s(row, est.performance)
                    total = out_tps * (int(row["prompt_len"]) + int(row["output_len"])) / int(row["output_len"])
                    rec["thr_unstated"] = (out_tps, total, float(row["throughput_tokens_per_s"]))
                out.append(rec)
                continue
            if measured:    # one GPU, HF transformers, measured here: reserved peak, and training tokens/s
                rec["mem"] = measured_memory_pair(row, est)
                rec["method"] = row["method"] or "infer"
                if row.get("objective", "sft") not in ("", "sft"):   # a preference step: its own category
                    rec["pref"] = (est.performance.step_time_s, float(row["step_time_s"]))
                    rec["framework"] = row["framework"]
                elif row["task"] != "infer":
                    rec["tps"] = (est.performance.tokens_per_s_per_gpu, float(row["tokens_per_s_per_gpu"]))
                    rec["moe"] = est.model.is_moe
                out.append(rec)
                continue
            if pt_memory:   # a post-training run's peak memory, at the level the source read it (one pipeline)
                rec["mem"] = memory_pair(row, est)
                rec["objective"] = row["objective"]
                rec["method"] = row["method"]
                out.append(rec)
                continue
            if finetune:    # LoRA/QLoRA peak memory, at the level the source read it
                rec["mem"] = memory_pair(row, est)
                rec["method"] = row["method"]
                out.append(rec)
                continue
            if preference:  # a preference-tuning optimizer step (its own category: no RL phases)
                rec["pref"] = (est.performance.step_time_s, float(row["step_time_s"]))
                rec["framework"] = row["framework"]
                out.append(rec)
                continue
            if posttrain:   # RL step time (and the phases gpuplan predicts, printed beside it)
                rec["rl"] = (est.performance.step_time_s, float(row["step_time_s"]))
                rec["phases"] = est.performance.details.get("phases_s", {})
                rec["phase_pairs"] = phase_pairs(row, rec["phases"])
                rec["placement"] = row["placement"]
                rec["framework"] = row["framework"]
                out.append(rec)
                continue
            if serving:
                rec["tpot"] = tpot_pair(row, est.performance)
                rec["batch1"] = row["concurrency"] == "1"
                if row.get("memory"):      # the same run's peak memory, at the level the source read it
                    rec["mem"] = memory_pair(row, est)
                    rec["engine"] = row["engine"]
                out.append(rec)
                continue
            if row["tokens_per_s_per_gpu"]:
                rec["tps"] = (est.performance.tokens_per_s_per_gpu, float(row["tokens_per_s_per_gpu"]))
                rec["moe"] = est.model.is_moe       # its own error-bar category (make_uncertainty.py)
            if row["memory_gib"]:
                rec["mem"] = (est.memory.peak_bytes_per_gpu / GiB, float(row["memory_gib"]))
            out.append(rec)
    return out


def _summary(name: str, pairs: list[tuple[float, float]]) -> str:
    if not pairs:
        return f"{name:8s} n=  0"
    errs = [(p - m) / m for p, m in pairs]
    abs_ = sorted(abs(e) for e in errs)
    return (f"{name:8s} n={len(pairs):3d}  median |err| {100 * statistics.median(abs_):5.1f}%  "
            f"MAPE {100 * statistics.fmean(abs_):5.1f}%  median signed {100 * statistics.median(errs):+5.1f}%  "
            f"under-predicted >10%: {sum(e < -0.10 for e in errs)}")


# the gathered files scored here; the others have their own scripts: serve-load.csv (latency under load,
# scripts/validate_serving_load.py), unsloth_context.csv (maximum context, scripts/validate_unsloth_context.py)
SCORED = ("train", "serve", "posttrain", "preference", "finetune-memory", "measured", "posttrain-memory")


def _err(pred: float, meas: float) -> str:
    """Signed relative error as every row prints it: +12.3%."""
    return f"{100 * (pred - meas) / meas:+6.1f}%"


def scored_files() -> list[Path]:
    return [ROOT / "validation" / "gathered" / f"{name}.csv" for name in SCORED]


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    rows = []
    for path in scored_files():
        rows += score(path)
    print(f"{'id':6s} {'tokens/s/GPU pred':>18s} {'meas':>8s} {'err':>7s}   {'memory GiB pred':>15s} {'meas':>6s} {'err':>7s}")
    for r in rows:
        if "skip" in r:
            print(f"{r['id']:6s} SKIP {r['skip']}")
            continue
        if "unscored" in r:
            print(f"{r['id']:6s} UNSCORED {r['unscored']}")
            continue
        if "thr" in r:
            p, m_ = r["thr"]
            print(f"{r['id']:6s} THR  {p:8,.0f} tok/s measured {m_:8,.0f} tok/s {_err(p, m_)}   "
                  f"{r['gpu']} {r['weights']} {r['engine']}")
            continue
        if "thr_unstated" in r:
            o, t, m_ = r["thr_unstated"]
            print(f"{r['id']:6s} THR? as output {o:8,.0f} ({_err(o, m_)}), as total {t:8,.0f} "
                  f"({_err(t, m_)}) measured {m_:8,.0f} tok/s (kind unstated; not in the summary)")
            continue
        if "rl" in r:
            p, m_ = r["rl"]
            ph = " ".join(f"{k} {v:.1f}" for k, v in r["phases"].items())
            print(f"{r['id']:6s} RL step {p:7.1f} s  measured {m_:7.1f} s  {_err(p, m_)}   "
                  f"{r['gpu']} {r['placement']}; phases (s): {ph}")
            for col, (pp_, mm) in r["phase_pairs"].items():
                print(f"{'':6s}   {col[:-7]:>10s} {pp_:7.1f} s  measured {mm:7.1f} s  {_err(pp_, mm)}")
            continue
        if "pref" in r:
            p, m_ = r["pref"]
            print(f"{r['id']:6s} preference step {p:7.2f} s  measured {m_:7.2f} s  {_err(p, m_)}   {r['gpu']}")
            continue
        if "tpot" in r:
            p, m_ = r["tpot"]
            mem = (f"   memory {r['mem'][0]:6.2f} GiB measured {r['mem'][1]:6.2f} GiB {_err(*r['mem'])}"
                   if "mem" in r else "")
            print(f"{r['id']:6s} TPOT {1e3 * p:8.1f} ms  measured {1e3 * m_:8.1f} ms  {_err(p, m_)}   "
                  f"{r['gpu']} {r['weights']}{mem}")
            continue
        t = r.get("tps")
        m = r.get("mem")
        ts = f"{t[0]:18,.0f} {t[1]:8,.0f} {100 * (t[0] - t[1]) / t[1]:+6.1f}%" if t else " " * 35
        ms = f"{m[0]:15.1f} {m[1]:6.1f} {100 * (m[0] - m[1]) / m[1]:+6.1f}%" if m else ""
        print(f"{r['id']:6s} {ts}   {ms}")
    print(_summary("speed", [r["tps"] for r in rows if "tps" in r]))
    print(_summary("memory", [r["mem"] for r in rows if "mem" in r]))
    lora = [r for r in rows if "mem" in r and r.get("method") in ("lora", "qlora") and "objective" not in r]
    print(_summary("  LoRA/QLoRA", [r["mem"] for r in lora]))
    for src in sorted({r["source"] for r in lora}):
        print(_summary(f"    {src[:38]}", [r["mem"] for r in lora if r["source"] == src]))
    print(_summary("  HF inference", [r["mem"] for r in rows if "mem" in r and "tpot" in r]))
    print(_summary("  measured here", [r["mem"] for r in rows if "mem" in r and r["source"].startswith("gpuplan measure")]))
    print(_summary("  post-training", [r["mem"] for r in rows if "mem" in r and "objective" in r]))
    print(_summary("tpot", [r["tpot"] for r in rows if "tpot" in r]))
    print(_summary("tpot b1", [r["tpot"] for r in rows if r.get("batch1")]))
    for gpu in sorted({r["gpu"] for r in rows if "tpot" in r}):
        print(_summary(f"  {gpu}", [r["tpot"] for r in rows if "tpot" in r and r["gpu"] == gpu]))
    print(_summary("serve tok/s", [r["thr"] for r in rows if "thr" in r]))
    for src in sorted({r["source"] for r in rows if "thr" in r}):
        print(_summary(f"  {src[:40]}", [r["thr"] for r in rows if "thr" in r and r["source"] == src]))
    print(_summary("RL step", [r["rl"] for r in rows if "rl" in r]))
    for src in sorted({r["source"] for r in rows if "rl" in r}):
        print(_summary(f"  {src[:40]}", [r["rl"] for r in rows if "rl" in r and r["source"] == src]))
    # leave-one-source-out by framework family: nothing is fitted on these rows, so each family's error is its
    # held-out error
    for fw in sorted({r["framework"] for r in rows if "rl" in r}):
        print(_summary(f"  family {fw}", [r["rl"] for r in rows if "rl" in r and r["framework"] == fw]))
    print(_summary("preference step", [r["pref"] for r in rows if "pref" in r]))
    for src in sorted({r["source"] for r in rows if "pref" in r}):
        print(_summary(f"  {src[:40]}", [r["pref"] for r in rows if "pref" in r and r["source"] == src]))
    for col in PHASES:
        print(_summary(f"  phase {col[:-7]}", [r["phase_pairs"][col] for r in rows if col in r.get("phase_pairs", {})]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
