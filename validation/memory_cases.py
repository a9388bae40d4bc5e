"""Validation cases for the memory engine: one per scoreable row of validation/public/memory.csv.

Each case turns a published measurement into a gpuplan scenario with the settings the source
actually used, looked up in the source's own recipe/config files at the commit the row cites.
Where a source did not report a setting, the case says what we assumed (`assumptions`). Settings
that gpuplan's scenario schema cannot express are listed in `unmodelled`: they are the first place
to look when a row is off.

What each source measured (decides what the estimate is compared with):

* torchtune logs `torch.cuda.memory_stats()["active_bytes.all.peak"]`, `max_memory_allocated` and
  `max_memory_reserved` (torchtune/utils/memory.py `get_memory_stats`); the README tables quote the
  active/allocated peak. Compared with peak - runtime_overhead ("allocated"). Before mid-2024 the
  helper divided by 1e9 (GB), later by 1024**3 (GiB): the row's unit follows the commit.
* litgpt prints `torch.cuda.max_memory_allocated() / 1e9` ("Memory used: ... GB"; finetune/lora.py
  @8641822 and litgpt/finetune/lora.py @00af8b0): "allocated", GB.
* OOM rows are "must not fit" checks: the whole estimate (with runtime overhead) must exceed the
  GPU's usable (NVML) memory.
* The ZeRO paper's Figure 1 values are the model-state formula (2+2+K)Psi with K=12; they are
  checked against the engine's weights+gradients+optimizer_states within 1 %.

Citations name repository + path + commit; every path was read at that commit.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CSV_PATH = HERE / "public" / "memory.csv"

TT = "pytorch/torchtune"
LG = "Lightning-AI/litgpt"

# ---- model configs not in the registry (real HF config.json fields) ------------------------------
STABLELM_ALPHA_3B = {  # stabilityai/stablelm-base-alpha-3b config.json (also litgpt lit_gpt/config.py)
    "model_type": "gpt_neox", "hidden_size": 4096, "intermediate_size": 16384, "num_attention_heads": 32,
    "num_hidden_layers": 16, "vocab_size": 50688, "max_position_embeddings": 4096, "rotary_pct": 0.25,
    "use_parallel_residual": True, "tie_word_embeddings": False, "hidden_act": "gelu", "layer_norm_eps": 1e-5,
}
TINYLLAMA_1B = {  # TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T config.json
    "model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_attention_heads": 32,
    "num_key_value_heads": 4, "num_hidden_layers": 22, "vocab_size": 32000, "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu",
}
# GPT-2-style decoders sized to the ZeRO paper's 7.5B model and the 6.2B largest-trainable model
GPT_7_5B = {"model_type": "gpt2", "n_embd": 4096, "n_layer": 37, "n_head": 32, "vocab_size": 50257,
            "n_positions": 1024}
GPT_6_2B = {"model_type": "gpt2", "n_embd": 4096, "n_layer": 30, "n_head": 32, "vocab_size": 50257,
            "n_positions": 1024}

ALL_LLAMA = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
QV = ["q_proj", "v_proj"]
QVO_MLP = ["q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
QKVO_MLP = ALL_LLAMA


@dataclass
class Case:
    id: str
    source: str                      # short source group: torchtune | litgpt-resource | litgpt-confighub | zero
    scenario: dict[str, Any] | None  # None when skipped
    gpu: str | None
    compare: str = "allocated"       # allocated (peak - runtime_overhead) | total (whole peak) | model_states
    measured_bytes: float | None = None
    expect: str = "value"            # value | oom (must not fit) | fit (must fit) | formula
    cites: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    unmodelled: list[str] = field(default_factory=list)
    suspect: str | None = None       # measurement below an engine-independent floor: not scored
    # phases of the estimate the source's run cannot reach (each with the reason in `assumptions`):
    # the compared number is the largest of the other phases
    exclude_phases: tuple[str, ...] = ()
    skip: str | None = None
    row: dict[str, str] = field(default_factory=dict)


def load_rows() -> dict[str, dict[str, str]]:
    with CSV_PATH.open(newline="", encoding="utf-8") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def _bytes(row: dict[str, str]) -> float | None:
    v = row["value"].strip()
    if v.upper() == "OOM":
        return None
    return float(v) * {"GB": 1e9, "GiB": 2**30}[row["unit"].strip()]


def _scn(model, gpu_count, *, method="full", mb=1, seq=512, ga=1, recompute="none", optimizer="adamw",
         impl="foreach", rank=8, targets=None, zero=0, offload="none", dq=True, master=False,
         precision="bf16", framework="hf", **knobs) -> dict[str, Any]:
    """`knobs`: the trainer-specific Train fields (loss, loss_chunks, compile, optimizer_in_backward,
    paged_optimizer, activation_offload, full_state_dict, qlora_backend)."""
    train: dict[str, Any] = dict(method=method, precision=precision, master_weights=master, optimizer=optimizer,
                                 optimizer_impl=impl, seq_len=seq, micro_batch=mb,
                                 global_batch=mb * gpu_count * ga, recompute=recompute, attention="flash", **knobs)
    if method in ("lora", "qlora"):
        train.update(lora_rank=rank, lora_targets=targets or ALL_LLAMA)
        if method == "qlora":
            train["qlora_double_quant"] = dq
    return dict(model=model, task="finetune", hardware=dict(gpu="placeholder", count=gpu_count),
                parallel=dict(zero=zero, offload=offload), train=train, framework=framework)


# ---- torchtune ------------------------------------------------------------------------------------
def _tt_main_table(rows) -> list[Case]:
    """README "Memory and training speed" @bd2a0fc (added 1814feb): bs 2, packed to 2048, compile, no GA.
    Settings: recipe configs at 1814feb (the commit that added the table). torchtune's own model code
    (framework torchtune: GQA K/V expanded before SDPA), pure bf16 (dtype: bf16: LoRA adapters in bf16,
    16-bit optimizer states), `compile: True` per the README note (per-layer compile + compiled loss)."""
    c = "@1814feb"
    common_un = ["packed sequences: flex attention with a block-causal BlockMask (saves the same q/k/v/out/lse "
                 "as flash; the small BlockMask is not counted)"]
    out = []

    def add(rid, model, gpus, gpu, cfg, **kw):
        un = kw.pop("unmodelled", [])
        asm = kw.pop("assumptions", [])
        kw = {"framework": "torchtune", "compile": True, "loss": "chunked", "loss_chunks": 8, **kw}
        out.append(Case(rid, "torchtune", _scn(model, gpus, mb=2, seq=2048, **kw), gpu,
                        measured_bytes=_bytes(rows[rid]), cites=[f"{TT} recipes/configs/{cfg}.yaml {c}",
                                                                 f"{TT} README.md @bd2a0fc",
                                                                 f"{TT} torchtune/modules/attention.py {c} (K/V expand)",
                                                                 f"{TT} torchtune/modules/loss/ce_chunked_output_loss.py {c}"],
                        assumptions=["batch 2 x 2048 packed tokens, gradient accumulation 1, compile on (README note)",
                                     "compared with the active/allocated peak (torchtune get_memory_stats)"] + asm,
                        unmodelled=common_un + un, row=rows[rid]))

    # 8B_full_single_device: optimizer bitsandbytes.optim.PagedAdamW8bit, optimizer_in_bwd: True,
    # enable_activation_checkpointing: True, loss CEWithChunkedOutputLoss
    full = dict(optimizer="adamw-8bit", paged_optimizer=True, optimizer_in_backward=True, recompute="full")
    add("M012", "llama-3.1-8b", 1, "rtx-4090", "llama3_1/8B_full_single_device", **full)
    add("M013", "llama-3.1-8b", 1, "rtx-a6000", "llama3_1/8B_full_single_device", **full,
        assumptions=["same recipe as the 4090 row (README gives no per-GPU settings); the A6000 number is "
                     "18.5 GiB higher, so that run probably changed a setting the README does not name "
                     "(e.g. a non-paged optimizer or no activation checkpointing)"])
    # 8B_lora_single_device: torch.optim.AdamW(fused=True), lora_rank 8 on q,v,output_proj + MLP,
    # lora_dropout 0.0, enable_activation_checkpointing: True
    lora8 = dict(method="lora", rank=8, targets=QVO_MLP, impl="fused", recompute="full")
    add("M014", "llama-3.1-8b", 1, "rtx-4090", "llama3_1/8B_lora_single_device", **lora8)
    add("M015", "llama-3.1-8b", 1, "rtx-a6000", "llama3_1/8B_lora_single_device", **lora8,
        assumptions=["same recipe as the 4090 row; the A6000 number is 14 GiB higher, the size of all "
                     "no-checkpointing activations, so that run probably disabled activation checkpointing "
                     "(not assumed here: the case follows the recipe)"])
    add("M016", "llama-3.1-8b", 1, "rtx-4090", "llama3_1/8B_qlora_single_device",
        **{**lora8, "method": "qlora"}, dq=True, qlora_backend="torchao",
        unmodelled=["torchao NF4Tensor (block 64, int8 scales per 256 blocks) ~ double-quantized NF4"])
    # 70B_full: fused AdamW, fsdp_cpu_offload: True, custom_sharded_layers: [tok_embeddings, output]
    add("M017", "llama-3.1-70b", 8, "a100-sxm-80gb", "llama3_1/70B_full", zero=3, offload="optimizer+params",
        impl="fused", recompute="full",
        assumptions=["A100 80GB SXM (README says only 'A100')"],
        unmodelled=["custom_sharded_layers: ['tok_embeddings', 'output'] makes the embedding and the output "
                    "projection their own FSDP units, resharded after use; the engine keeps FSDP2's root module "
                    "(embedding + lm_head, 4.2 GB in bf16) unsharded from forward to backward"])
    add("M018", "llama-3.1-70b", 8, "a100-sxm-80gb", "llama3_1/70B_lora", method="lora", rank=16,
        targets=QVO_MLP, zero=3, impl="fused", recompute="full", assumptions=["A100 80GB SXM"])
    # 405B_qlora: loss torch.nn.CrossEntropyLoss (no chunking), batch_size 1 in the yaml
    add("M019", "llama-3.1-405b", 8, "a100-sxm-80gb", "llama3_1/405B_qlora", method="qlora", rank=16,
        targets=QVO_MLP, zero=3, impl="fused", recompute="full", dq=True, qlora_backend="torchao", loss="full",
        assumptions=["A100 80GB SXM", "batch 2 per the README note (the config's batch_size is 1)",
                     "plain CrossEntropyLoss per the config (no chunking) over the model's .float() logits"])
    return out


def _tt_flags_table(rows) -> list[Case]:
    """README "Optimization flags" @bd2a0fc: Llama 3.2 3B, full_finetune_single_device, bs 2, max seq 4096,
    bf16, A100; techniques cumulative top-down; LoRA/QLoRA rows without optimizer_in_bwd/8-bit AdamW.
    Each row sets exactly the techniques applied so far (compile: per-layer compile + compiled loss,
    recipes/full_finetune_single_device.py @1814feb; chunked CE: CEWithChunkedOutputLoss, 8 chunks;
    activation checkpointing; optimizer_in_bwd; enable_activation_offloading; PagedAdamW8bit)."""
    c = "@1814feb"
    out = []
    base_cite = [f"{TT} README.md @bd2a0fc (Optimization flags)", f"{TT} recipes/configs/llama3_2/3B_full_single_device.yaml {c}",
                 f"{TT} recipes/full_finetune_single_device.py {c}"]
    asm0 = ["A100 80GB (60 GiB measured rules out 40GB)", "compared with peak memory active (table header)",
            "baseline optimizer torch.optim.AdamW(fused=True) as in torchtune's other AdamW configs at 1814feb",
            "baseline loss torch.nn.CrossEntropyLoss over the model's .float() logits (the row before chunked CE)"]
    packed = "packed sequences: flex attention with a block-causal BlockMask (same saved tensors as flash)"
    s1 = dict(seq=1024)
    s2 = dict()
    s3 = dict(s2, compile=True)
    s4 = dict(s3, loss="chunked", loss_chunks=8)
    s5 = dict(s4, recompute="full")
    s6 = dict(s5, optimizer_in_backward=True)
    s7 = dict(s6, activation_offload=True)
    # "+ 8-bit AdamW" links the tutorial section naming torchao AdamW8bit and bnb PagedAdamW8bit
    # (docs/source/tutorials/memory_optimizations.rst L171 @1814feb); the measured -4.2 GiB (not the
    # -12 GiB of states leaving the allocator) means the states stayed in PyTorch's allocator: the
    # non-paged torchao AdamW8bit is assumed
    s8 = dict(s7, optimizer="adamw-8bit")
    steps = [
        ("M020", s1, ["baseline is unpacked Alpaca: the peak batch is padded to the longest sample; "
                      "assumed 2 x 1024 tokens (Llama-3 tokenizer)"], []),
        ("M021", s2, [], [packed]),
        ("M022", s3, [], [packed]),
        ("M023", s4, [], [packed]),
        ("M024", s5, [], [packed]),
        ("M025", s6, [], [packed]),
        ("M026", s7, [], [packed, "activation offloading: torchtune OffloadActivations streams saved tensors to "
                                  "pinned host memory; the engine keeps about two layers on the GPU"]),
        ("M027", s8, ["8-bit AdamW = torchao AdamW8bit (non-paged), see the comment on s8"], [packed]),
    ]
    for rid, kw, asm, un in steps:
        args = dict(mb=2, seq=4096, impl="fused", framework="torchtune")
        args.update(kw)
        out.append(Case(rid, "torchtune", _scn("llama-3.2-3b", 1, **args), "a100-sxm-80gb",
                        measured_bytes=_bytes(rows[rid]), cites=base_cite, assumptions=asm0 + asm,
                        unmodelled=un, row=rows[rid]))
    for rid, method, cfg in (("M028", "lora", "3B_lora_single_device"), ("M029", "qlora", "3B_qlora_single_device")):
        extra = dict(qlora_backend="torchao") if method == "qlora" else {}
        out.append(Case(rid, "torchtune", _scn("llama-3.2-3b", 1, method=method, mb=2, seq=4096, rank=64,
                                               targets=QVO_MLP, impl="fused", recompute="full", dq=True,
                                               framework="torchtune", compile=True, loss="chunked", loss_chunks=8,
                                               activation_offload=True, **extra),
                        "a100-sxm-80gb", measured_bytes=_bytes(rows[rid]),
                        cites=[f"{TT} README.md @bd2a0fc (Optimization flags)",
                               f"{TT} recipes/configs/llama3_2/{cfg}.yaml {c}"],
                        assumptions=asm0[:2] + ["LoRA rank 64 on q,v,output_proj + MLP (recipe)",
                                                "every technique of the table except optimizer_in_bwd and 8-bit "
                                                "AdamW (README): packed, compile, chunked CE, checkpointing, "
                                                "activation offloading"],
                        unmodelled=[packed], row=rows[rid]))
    return out


def _tt_2024_07(rows) -> list[Case]:
    """README table @58255001 (2024-07-23): Llama2, 'Batch Size = 4, Seq Length = 2048' (70B: 4096), GB (1e9)."""
    c = "@58255001"
    out = []

    def add(rid, model, gpus, gpu, cfg, seq=2048, asm=(), un=(), **kw):
        cites = [f"{TT} README.md {c}"] + ([f"{TT} recipes/configs/llama2/{cfg}.yaml {c}"] if cfg else [])
        kw = {"framework": "torchtune", **kw}
        out.append(Case(rid, "torchtune", _scn(model, gpus, mb=4, seq=min(seq, 1304), **kw), gpu,
                        measured_bytes=_bytes(rows[rid]), cites=cites,
                        assumptions=[f"batch 4; the README's 'Seq Length = {seq}' is the max_seq_len cap: the recipes "
                                     "use unpacked Alpaca padded to the longest sample in the batch, at most 1304 "
                                     "Llama-2 tokens (litgpt tutorials/resource-tables.md @e567dbe)",
                                     "gradient accumulation 1 (for LoRA, accumulation only keeps adapter grads)",
                                     "GB = 1e9 (torchtune get_memory_stats divided by 1e9 at this commit)"] + list(asm),
                        unmodelled=list(un), row=rows[rid]))

    add("M030", "llama-2-7b-hf", 1, "rtx-4090", "7B_qlora_single_device", method="qlora", rank=8,
        targets=QKVO_MLP, recompute="full", qlora_backend="torchao", compile=True,
        lora_dropout=0.05, asm=["compile on (README '**= Uses torch compile')",
                                "lora_dropout 0.05 (LoRA builder default at this commit)"])
    add("M031", "llama-2-7b-hf", 1, "rtx-4090", "7B_lora_single_device", method="lora", rank=8, targets=QV,
        recompute="full", lora_dropout=0.05, asm=["lora_dropout 0.05 (LoRA builder default at this commit)"])
    add("M032", "llama-2-7b-hf", 2, "rtx-4090", "7B_lora", method="lora", rank=8, targets=QV, zero=3,
        recompute="full", lora_dropout=0.05,
        asm=["lora_dropout 0.05 (LoRA builder default at this commit)", "7B_lora.yaml sets enable_activation_checkpointing: False, but 4 x 1304 tokens of Llama-2-7B "
             "activations without checkpointing need > 30 GB under any accounting (Korthikanti's lower bound "
             "34*h bytes/token/layer alone is 18 GB), more than the 24 GB card: the published run must have "
             "checkpointed; assumed on"])
    # 7B_full_low_memory: bitsandbytes.optim.PagedAdamW (32-bit states, paged), optimizer_in_bwd: True
    add("M033", "llama-2-7b-hf", 1, "rtx-4090", "7B_full_low_memory", recompute="full", paged_optimizer=True,
        optimizer_in_backward=True)
    add("M034", "llama-2-7b-hf", 4, "rtx-4090", "7B_full", zero=3, recompute="full",
        asm=["torch.optim.AdamW default (foreach) over bf16 FSDP-sharded params"])
    add("M035", "llama-2-70b-hf", 8, "a100-sxm-80gb", "70B_lora", seq=4096, method="lora", rank=16,
        targets=["q_proj", "v_proj", "k_proj"], zero=3, recompute="full",
        asm=["A100 80GB SXM"])
    add("M036", "llama-2-70b-hf", 8, "a100-sxm-80gb", None, seq=4096, zero=3, recompute="full",
        asm=["A100 80GB SXM", "no llama2/70B_full config exists at this commit: assumed FSDP full shard + "
             "activation checkpointing like 7B_full", "README '*= Uses PagedAdamW from bitsandbytes' (paged "
             "states); optimizer_in_bwd not stated: off (it needs a single device at this commit)"],
        paged_optimizer=True)
    return out


def _tt_2024_04(rows) -> list[Case]:
    """README table @fef3ed10 (2024-04-16): default recipe configs, averaged over runs, GB (1e9)."""
    c = "@fef3ed10"
    out = []
    asm0 = ["unpacked Alpaca, batch_size 2: peak batch assumed padded to the longest sample, 1304 tokens with the "
            "Llama-2 tokenizer (litgpt tutorials/resource-tables.md @e567dbe lists 1304)",
            "GB = 1e9 (torchtune get_memory_stats at this commit)"]

    def add(rid, gpus, cfg, ga, asm=(), un=(), **kw):
        kw = {"framework": "torchtune", **kw}
        out.append(Case(rid, "torchtune", _scn("llama-2-7b-hf", gpus, mb=2, seq=1304, ga=ga, **kw), "rtx-4090",
                        measured_bytes=_bytes(rows[rid]),
                        cites=[f"{TT} README.md {c}", f"{TT} recipes/configs/llama2/{cfg}.yaml {c}"],
                        assumptions=asm0 + list(asm), unmodelled=list(un), row=rows[rid]))

    add("M037", 1, "7B_qlora_single_device", 16, method="qlora", rank=8, targets=QKVO_MLP, recompute="full",
        qlora_backend="torchao", lora_dropout=0.05, asm=["lora_dropout 0.05 (LoRA builder default)"])
    add("M038", 2, "7B_lora", 32, method="lora", rank=8, targets=QV, zero=3, recompute="none",
        lora_dropout=0.05, asm=["enable_activation_checkpointing: False in 7B_lora.yaml",
                                "lora_dropout 0.05 (LoRA builder default)"])
    add("M039", 1, "7B_lora_single_device", 64, method="lora", rank=8, targets=QV, recompute="full",
        lora_dropout=0.05, asm=["lora_dropout 0.05 (LoRA builder default)"])
    add("M040", 1, "7B_full_low_memory", 1, recompute="full", paged_optimizer=True, optimizer_in_backward=True)
    add("M041", 4, "7B_full", 1, zero=3, recompute="full")
    return out


# ---- litgpt resource tables (Oct 2023) ------------------------------------------------------------
LONGEST = {"stablelm": 1034, "llama2": 1304, "falcon": 1079, "phi": 1044}


def _lg_resource(rows) -> list[Case]:
    """tutorials/resource-tables.md @e567dbe, litgpt @8641822: finetune/lora.py module constants:
    lora_r=8, alpha=16, query+value only, batch_size=128 (GA=128/micro), AdamW (torch default foreach),
    bnb PagedAdamW when quantized, first iteration uses the longest sample, lm_head_chunk_size=128 +
    chunked CE, FSDP (2+ devices) with activation checkpointing per Block."""
    cites = [f"{LG} tutorials/resource-tables.md @e567dbe", f"{LG} finetune/lora.py @8641822",
             f"{LG} lit_gpt/lora.py @8641822"]
    models = {"StableLM Alpha 3B": (STABLELM_ALPHA_3B, "stablelm"), "Llama 2 7B": ("llama-2-7b-hf", "llama2"),
              "Llama 2 13B": ("llama-2-13b-hf", "llama2"), "Falcon 40B": ("falcon-40b", "falcon"),
              "phi-1.5": (None, "phi")}
    out = []
    for n in range(62, 107):
        rid = f"M{n:03d}"
        r = rows[rid]
        method = r["method"]
        model, tok = models[r["model"]]
        common = dict(row=r, cites=cites, measured_bytes=_bytes(r), source="litgpt-resource")
        if model is None:
            out.append(Case(rid, scenario=None, gpu=None, skip="phi-1.5 (HF model_type 'phi') is not a supported "
                            "model family (models/spec.py SUPPORTED_MODEL_TYPES)", **common))
            continue
        if method.startswith("adapter"):
            out.append(Case(rid, scenario=None, gpu=None, skip="LLaMA-Adapter / adapter_v2 fine-tuning is not a "
                            "train.method in the scenario schema (full|lora|qlora)", **common))
            continue
        gpus = int(r["gpus"])
        mb = int(r["micro_batch"])
        quant = "nf4" in method
        kw = dict(method="qlora" if quant else "lora", mb=mb, seq=LONGEST[tok], ga=max(1, 128 // (mb * gpus)),
                  rank=8, targets=QV, dq=method.endswith("-dq)"),
                  recompute="full" if gpus > 1 else "none", zero=3 if gpus > 1 else 0,
                  # litgpt model code; `model(input_ids, lm_head_chunk_size=128)` + chunked_cross_entropy
                  # (bf16 logits in 128-token chunks); bnb.optim.PagedAdamW when quantized (lora.py L141)
                  framework="litgpt", loss="chunked", loss_chunks=-(-LONGEST[tok] // 128),
                  paged_optimizer=quant, full_state_dict=gpus > 1, lora_dropout=0.05)
        un = ["lit_gpt RMSNorm at this commit computes in bf16 (no fp32 upcast): saves the 16-bit input only; the "
              "litgpt profile follows the 2024 fp32-upcast norm (over by 2 bytes x hidden per norm, Llama rows)"]
        excl: tuple[str, ...] = ()
        if quant:
            # the engine's `next_forward` phase (bitsandbytes 0.41 MatMul4Bit keeps `ctx.tensors = (A, B)`;
            # the loop's `logits`/`loss` keep the previous graph alive through the next forward) assumes two
            # consecutive micro-batches of seq_len tokens. Here only iteration 0 is the longest sample:
            # get_batch(..., longest_seq_ix if iter_num == 0 else None) (finetune/lora.py @8641822 L210),
            # iteration 1 is a random Alpaca sample, and before iteration 0 only inference_mode validation ran
            excl = ("next_forward",)
            un.append("iteration 1 holds iteration 0's retained 4-bit-linear inputs (1 longest sample) next to a "
                      "random sample's activations: not compared (next_forward excluded)")
        asm = [f"peak at iteration 0 with the longest Alpaca sample ({LONGEST[tok]} tokens, resource-tables.md)",
               "lora_dropout 0.05 (finetune/lora.py L48)",
               "compared with torch.cuda.max_memory_allocated()/1e9"]
        if gpus > 1:
            asm.append("FSDPStrategy(auto_wrap_policy={Block}, activation_checkpointing_policy={Block}) = ZeRO-3 + "
                       "full recompute")
            asm.append("FSDPStrategy(state_dict_type='full') and load_checkpoint -> fabric.load_raw (lit_gpt/utils.py "
                       "@8641822): the full-state-dict load/save phase holds an unsharded bf16 model next to the "
                       "shard (full_state_dict); the exact call that materialises it was not traced")
        if quant:
            asm.append("compared at iteration 0 (longest sample, no previous graph): the engine's next_forward "
                       "phase (two consecutive longest batches) is excluded; finetune/lora.py @8641822 L210")
        out.append(Case(rid, scenario=_scn(model, gpus, **kw), gpu="a100-sxm-40gb",
                        expect="oom" if _bytes(r) is None else "value", assumptions=asm, unmodelled=un,
                        exclude_phases=excl, **common))
    return out


# ---- litgpt config hub (2024) ---------------------------------------------------------------------
# config file -> (model, lora targets, lora_r, yaml devices, lora_head)
_HUB: dict[str, tuple[Any, list[str] | None, int, int, bool]] = {
    "falcon-7b/lora.yaml": ("falcon-7b-instruct", QV, 32, 1, False),
    "falcon-7b/qlora.yaml": ("falcon-7b-instruct", QV, 32, 1, False),
    "gemma-2b/full.yaml": (None, None, 0, 4, False),
    "gemma-2b/lora.yaml": (None, None, 8, 1, True),
    "gemma-2b/qlora.yaml": (None, None, 16, 1, True),
    "gemma-7b/lora.yaml": (None, None, 16, 1, True),
    "gemma-7b/qlora.yaml": (None, None, 16, 1, True),
    "gemma2-2b/lora.yaml": ("gemma-2-2b", ALL_LLAMA, 8, 1, True),
    "gemma2b/qlora.yaml": ("gemma-2-2b", ALL_LLAMA, 16, 1, True),       # README's spelling of gemma2-2b/qlora.yaml
    "gemma2-9b/lora.yaml": ("gemma-2-9b", ALL_LLAMA, 16, 1, True),
    "gemma2-9b/qlora.yaml": ("gemma-2-9b", ALL_LLAMA, 16, 1, True),
    "llama-2-7b/full.yaml": ("llama-2-7b-hf", None, 0, 4, False),
    "llama-2-7b/lora.yaml": ("llama-2-7b-hf", QV, 32, 1, False),
    "llama-2-7b/qlora.yaml": ("llama-2-7b-hf", QV, 32, 1, False),
    "llama-3-8b/full.yaml": ("llama-3-8b", None, 0, 4, False),
    "llama-3-8b/lora.yaml": ("llama-3-8b", QV, 32, 1, False),
    "llama-3-8b/qlora.yaml": ("llama-3-8b", QV, 32, 1, False),
    "llama-3.1-8b/full.yaml": ("llama-3.1-8b", None, 0, 1, False),
    "llama-3.1-8b/lora.yaml": ("llama-3.1-8b", QV, 32, 1, False),
    "llama-3.1-8b/qlora.yaml": ("llama-3.1-8b", QV, 32, 1, False),
    "llama-3.2-1b/full.yaml": ("llama-3.2-1b", None, 0, 1, False),
    "llama-3.2-1b/lora.yaml": ("llama-3.2-1b", QV, 32, 1, False),
    "llama-3.2-1b/qlora.yaml": ("llama-3.2-1b", QV, 32, 1, False),
    "llama-3.2-3b/full.yaml": ("llama-3.2-3b", None, 0, 1, False),
    "llama-3.2-3b/lora.yaml": ("llama-3.2-3b", QV, 32, 1, False),
    "llama-3.2-3b/qlora.yaml": ("llama-3.2-3b", QV, 32, 1, False),
    "mistral-7b-v0.2/lora.yaml": ("mistral-7b-v0.1", QV, 32, 1, False),
    "mistral-7b-v0.2/qlora.yaml": ("mistral-7b-v0.1", QV, 32, 1, False),
    "mistral-7b/lora.yaml": ("mistral-7b-v0.1", QV, 32, 1, False),
    "mistral-7b/qlora.yaml": ("mistral-7b-v0.1", QV, 32, 1, False),
    "phi-2/full.yaml": (None, None, 0, 2, False),
    "phi-2/lora.yaml": (None, None, 8, 1, True),
    "phi-2/qlora.yaml": (None, None, 8, 1, True),
    "phi-3/full.yaml": ("phi-3-mini-4k-instruct", None, 0, 1, False),
    "phi-3/lora.yaml": ("phi-3-mini-4k-instruct", ALL_LLAMA, 8, 1, True),
    "phi-3/qlora.yaml": ("phi-3-mini-4k-instruct", ALL_LLAMA, 8, 1, True),
    "stablelm-base-alpha-3b/full.yaml": (STABLELM_ALPHA_3B, None, 0, 2, False),
    "stablelm-base-alpha-3b/lora.yaml": (STABLELM_ALPHA_3B, QV, 32, 1, False),
    "stablelm-base-alpha-3b/qlora.yaml": (STABLELM_ALPHA_3B, QV, 32, 1, False),
    "tiny-llama/full.yaml": (TINYLLAMA_1B, None, 0, 1, False),
    "tiny-llama/lora.yaml": (TINYLLAMA_1B, ALL_LLAMA, 32, 1, True),
    "tiny-llama/qlora.yaml": (TINYLLAMA_1B, ALL_LLAMA, 32, 1, True),
}
_HUB_SKIP = {"gemma-2b": "Gemma 1 (HF model_type 'gemma') is not a supported model family",
             "gemma-7b": "Gemma 1 (HF model_type 'gemma') is not a supported model family",
             "phi-2": "phi-2 (HF model_type 'phi') is not a supported model family"}


def _hub_path(cfg: str) -> str:
    """The yaml's real path at 00af8b0 (the README spells a few of them differently)."""
    cfg = {"gemma2b/qlora.yaml": "gemma2-2b/qlora.yaml"}.get(cfg, cfg)
    fam, name = cfg.split("/")
    fam = {"llama-3.2-1b": "llama-3.2-1B", "llama-3.2-3b": "llama-3.2-3B"}.get(fam, fam)
    return f"config_hub/finetune/{fam}/{name}"


def _lg_hub(rows) -> list[Case]:
    """config_hub/finetune/README.md @00af8b0: A10G 24GB, Alpaca2k, max_seq_length 512, yaml defaults.
    litgpt/finetune/{lora,full}.py @00af8b0: bf16-true, torch AdamW (foreach) or bnb PagedAdamW when
    quantized, FSDP + activation checkpointing when devices > 1, max_memory_allocated()/1e9."""
    out = []
    for n in range(107, 160):
        rid = f"M{n:03d}"
        r = rows[rid]
        cfg = r["locator"].split("row ")[-1].strip()
        model, targets, rank, devices, head = _HUB[cfg]
        path = _hub_path(cfg)
        cites = [f"{LG} config_hub/finetune/README.md @00af8b0", f"{LG} {path} @00af8b0",
                 f"{LG} litgpt/finetune/{'full' if cfg.endswith('full.yaml') else 'lora'}.py @00af8b0"]
        common = dict(row=r, cites=cites, measured_bytes=_bytes(r), source="litgpt-confighub")
        fam = cfg.split("/")[0]
        if model is None:
            out.append(Case(rid, scenario=None, gpu=None, skip=_HUB_SKIP[fam] + " (models/spec.py "
                            "SUPPORTED_MODEL_TYPES)", **common))
            continue
        kind = cfg.split("/")[-1].removesuffix(".yaml")
        mb = int(r["micro_batch"])
        method = {"full": "full", "lora": "lora", "qlora": "qlora"}[kind]
        # global batch from the yaml decides gradient accumulation
        asm = ["every micro-batch padded to max_seq_length 512 at least once (Alpaca2k has samples longer "
               "than 512 tokens; litgpt truncates to 512)", "compared with torch.cuda.max_memory_allocated()/1e9"]
        if int(r["gpus"]) != devices:
            asm.append(f"the README's machine had {r['gpus']} GPUs but the yaml sets devices: {devices}; identical "
                       "peak numbers on 1 and 4 GPUs confirm the yaml's device count was used")
        un = []
        if method != "full":
            asm.append("lora_dropout 0.05 (yaml)")
            if head:
                un.append("lora_head: true (LoRA on lm_head) is not an engine LoRA target")
        if method == "qlora":
            asm.append("bitsandbytes==0.42.0 (litgpt pyproject @00af8b0; litgpt warns on any other version): "
                       "MatMul4Bit keeps `ctx.tensors = (A, B)`, so the previous micro-batch's 4-bit-linear inputs "
                       "are alive during the next forward (engine phase next_forward); two consecutive batches "
                       "padded to 512 assumed")
        gb = {"full": {"gemma-2b": 16, "llama-2-7b": 64, "llama-3-8b": 64, "llama-3.1-8b": 64, "llama-3.2-1b": 64,
                       "llama-3.2-3b": 64, "phi-3": 8, "stablelm-base-alpha-3b": 8, "tiny-llama": 32}}.get(method, {})
        global_batch = gb.get(fam, 8 if fam not in ("gemma-2b", "gemma-7b", "gemma2-2b", "gemma2b", "gemma2-9b") else 6)
        ga = max(1, global_batch // (mb * devices))
        # litgpt/finetune/lora.py @00af8b0: model(input_ids, lm_head_chunk_size=128) + chunked_cross_entropy
        # (4 chunks of 128 tokens at 512); full.py: full bf16 logits, chunked_cross_entropy over 128-row
        # chunks; bnb PagedAdamW when quantized (instantiate_bnb_optimizer, litgpt/utils.py)
        chunks = 512 // 128 if method != "full" else mb * 512 // 128
        kw = dict(method=method, mb=mb, seq=512, ga=ga, recompute="full" if devices > 1 else "none",
                  zero=3 if devices > 1 else 0, dq=False, framework="litgpt", loss="chunked", loss_chunks=chunks,
                  paged_optimizer=method == "qlora", full_state_dict=devices > 1)
        if method != "full":
            kw.update(rank=rank, targets=targets, lora_dropout=0.05)
        if devices > 1:
            asm.append("FSDPStrategy(auto_wrap_policy={Block}, activation_checkpointing_policy={Block}) = ZeRO-3 + "
                       "full recompute")
            asm.append("FSDPStrategy(state_dict_type='full') + load_checkpoint -> fabric.load_raw: full-state-dict "
                       "phase with an unsharded bf16 model next to the shard (full_state_dict)")
        suspect = None
        if method == "full" and r["value"] != "OOM":
            suspect = _full_floor_check(model, devices, _bytes(r))
        out.append(Case(rid, scenario=_scn(model, devices, **kw), gpu="a10g",
                        expect="oom" if _bytes(r) is None else "value", assumptions=asm, unmodelled=un,
                        suspect=suspect, **common))
    return out


def _full_floor_check(model, devices: int, measured: float) -> str | None:
    """Engine-independent floor for pure-bf16 AdamW full fine-tuning: 2 (weights) + 2 (grads) + 4 (two
    bf16 Adam moments) bytes per parameter, sharded over `devices`. A measurement below it cannot be a
    run of the stated config."""
    from gpuplan.models import get_model
    n = get_model(model).params_total
    floor = 8 * n / devices
    if measured < floor:
        return (f"measured {measured / 1e9:.2f} GB is below the model-state floor {floor / 1e9:.2f} GB "
                f"(8 bytes x {n / 1e9:.2f}B params / {devices} GPU) of the stated config (bf16 AdamW): the "
                "published number cannot come from that config")
    return None


# ---- ZeRO paper -----------------------------------------------------------------------------------
def _zero(rows) -> list[Case]:
    out = []
    for rid, stage in (("M001", 0), ("M002", 1), ("M003", 2), ("M004", 3)):
        s = _scn(GPT_7_5B, 64, mb=1, seq=128, zero=stage, master=True, precision="fp16", impl="fused",
                 framework="deepspeed")
        s["overhead_bytes"] = 0
        out.append(Case(rid, "zero", s, "v100-sxm2-32gb", compare="model_states", expect="formula",
                        measured_bytes=float(rows[rid]["value"]) * 1e9, row=rows[rid],
                        cites=["Rajbhandari et al. 2020 (arXiv:1910.02054) Figure 1 / Table 1"],
                        assumptions=["formula (2+2+K)Psi with K=12 evaluated with Psi = the config's own parameter "
                                     "count (paper value printed in the table for reference); engine side = its "
                                     "optimizer-step phase (weights + gradients + optimizer states, fused step, no "
                                     "overhead); must agree within 1 %"]))
    s = _scn(GPT_6_2B, 64, mb=1, seq=1024, zero=1, master=True, precision="fp16", impl="fused",
             framework="deepspeed", recompute="full")
    out.append(Case("M005", "zero", s, "v100-sxm2-32gb", compare="total", expect="fit", row=rows["M005"],
                    cites=["Rajbhandari et al. 2020 (arXiv:1910.02054) Table 2"],
                    assumptions=["6.2B GPT-2-style model, ZeRO-1 (Pos) over 64 V100 32GB, fp16 + fp32 master Adam, "
                                 "micro-batch 1 x 1024 tokens with activation checkpointing (the paper trains with "
                                 "checkpointing; batch not reported): must fit"]))
    return out


ZERO_FORMULA = {0: lambda p: 16 * p, 1: lambda p: 4 * p + 12 * p / 64, 2: lambda p: 2 * p + 14 * p / 64,
                3: lambda p: 16 * p / 64}
ZERO_STAGE = {"M001": 0, "M002": 1, "M003": 2, "M004": 3}


def zero_formula_bytes(case: Case) -> float:
    """The ZeRO paper's model-state formula for the case's own parameter count (Psi)."""
    from gpuplan.models import get_model
    return ZERO_FORMULA[ZERO_STAGE[case.id]](get_model(case.scenario["model"]).params_total)


def build_cases() -> list[Case]:
    rows = load_rows()
    cases = (_zero(rows) + _tt_main_table(rows) + _tt_flags_table(rows) + _tt_2024_07(rows) + _tt_2024_04(rows)
             + _lg_resource(rows) + _lg_hub(rows))
    covered = {c.id for c in cases}
    scoreable = {rid for rid, r in rows.items() if r["kind"].startswith("measured")}
    missing = scoreable - covered
    assert not missing, f"scoreable rows without a case: {sorted(missing)}"
    return cases


def scenario_for(case: Case, gpu_id: str) -> dict[str, Any]:
    s = dict(case.scenario or {})
    s["hardware"] = dict(s["hardware"], gpu=gpu_id)
    return s
