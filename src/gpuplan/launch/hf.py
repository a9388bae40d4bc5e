"""HF Trainer / accelerate + PEFT: accelerate config, TrainingArguments, LoraConfig,
BitsAndBytesConfig (QLoRA), and a small train_hf.py that wires them together."""
from __future__ import annotations

from typing import Any

from ._common import (Plan, launch_script, check_train_precision, hash_header, json_text, require_training,
                      unsupported, yaml_text)
from ._train import bnb_config, hf_notes, hf_training_args, lora_config, load_dtype, require_data_parallel_only, run_json

TRAIN_HF_PY = '''
"""Train with HF Trainer from the gpuplan files next to this script.

  accelerate launch --config_file accelerate_config.yaml train_hf.py      (hf engine)
  torchrun ... train_hf.py                                                 (deepspeed engine)
  python train_hf.py --smoke        tiny random model on CPU for 2 steps: checks the wiring

Data: random tokens by default (measures memory and speed of the plan); --dataset NAME_OR_FILE
trains on the 'text' field of a HF dataset or a local .jsonl/.txt file, packed to seq_len.
"""
import argparse
import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load(name):
    path = HERE / name
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    data.pop("_gpuplan", None)          # header key, not a setting
    return data


class RandomTokens:
    def __init__(self, vocab, seq_len, n):
        self.vocab, self.seq_len, self.n = vocab, seq_len, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, self.vocab, (self.seq_len,), generator=g)
        return {"input_ids": ids, "labels": ids.clone()}


def text_dataset(name, tokenizer, seq_len):
    from datasets import load_dataset
    if os.path.exists(name):
        ds = load_dataset("json" if name.endswith("jsonl") else "text", data_files=name, split="train")
    else:
        ds = load_dataset(name, split="train")
    ds = ds.map(lambda b: tokenizer(b["text"]), batched=True, remove_columns=ds.column_names)

    def pack(batch):
        ids = sum(batch["input_ids"], [])
        n = len(ids) // seq_len * seq_len
        chunks = [ids[i:i + seq_len] for i in range(0, n, seq_len)]
        return {"input_ids": chunks, "labels": [c[:] for c in chunks]}
    return ds.map(pack, batched=True, remove_columns=ds.column_names)


def keep_compute_dtype(model, dtype):
    # peft's prepare_model_for_kbit_training casts every 16-bit parameter that is not a bitsandbytes
    # Params4bit (embeddings, output head, norms) to fp32 (peft 0.21.2, peft/utils/other.py). At a 128k vocabulary
    # that adds 2 bytes per embedding and head weight (+4.2 GB at 70B), and an fp32 norm weight makes the norm's
    # output fp32. The plan, like its memory estimate, keeps them in the load dtype: TRL's SFTTrainer casts the
    # embedding and head back the same way (peft_module_casting_to_bf16); the norms still compute in fp32 inside.
    import torch
    for param in model.parameters():
        if param.dtype == torch.float32 and param.__class__.__name__ != "Params4bit":
            param.data = param.data.to(dtype)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true", help="tiny random model, CPU, 2 steps")
    ap.add_argument("--dataset", default=None)
    ap.add_argument("--init", choices=["pretrained", "random"], default=None)
    a = ap.parse_args()

    import torch
    from transformers import (AutoConfig, AutoModelForCausalLM, BitsAndBytesConfig, HfArgumentParser,
                              Trainer, TrainingArguments)

    run = load("run.json")
    targs = load("training_args.json")
    init = a.init or run["init"]
    attn = run["attn_implementation"]
    if attn == "flash_attention_2":
        try:
            import flash_attn  # noqa: F401
        except ImportError:
            attn = "sdpa"
    seq_len = run["seq_len"]
    if a.smoke:
        init, attn, seq_len = "random", "sdpa", 32
        targs.update(max_steps=2, use_cpu=True, bf16=False, fp16=False, optim="adamw_torch",
                     dataloader_num_workers=0, save_strategy="no", logging_steps=1,
                     output_dir=str(HERE / "outputs-smoke"), gradient_accumulation_steps=1)
        targs.pop("deepspeed", None)
    (args,) = HfArgumentParser(TrainingArguments).parse_dict(targs)

    dtype = getattr(torch, "float32" if a.smoke else run["load_dtype"])
    kw = {"dtype": dtype, "attn_implementation": attn}
    quant = load("bnb_config.json") if run["method"] == "qlora" and not a.smoke else None
    if quant:
        kw["quantization_config"] = BitsAndBytesConfig(**quant)
    if init == "pretrained":
        model = AutoModelForCausalLM.from_pretrained(run["model"], **kw)
    else:
        cfg = load(run["model_config"])
        if a.smoke:
            cfg.update(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, vocab_size=256, bos_token_id=0, eos_token_id=0,
                           pad_token_id=None)
        config = AutoConfig.for_model(**cfg)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)
    vocab = model.config.vocab_size

    if run["method"] in ("lora", "qlora"):
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
        if quant:
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=bool(args.activation_checkpointing))
            keep_compute_dtype(model, dtype)
        model = get_peft_model(model, LoraConfig(**load("lora_config.json")))
        model.print_trainable_parameters()

    if a.dataset:
        from transformers import AutoTokenizer
        data = text_dataset(a.dataset, AutoTokenizer.from_pretrained(run["model"]), seq_len)
    else:
        data = RandomTokens(vocab, seq_len, args.max_steps * args.per_device_train_batch_size
                            * args.gradient_accumulation_steps * max(1, args.world_size))
    trainer = Trainer(model=model, args=args, train_dataset=data)
    if args.fp16 and not args.deepspeed and run.get("grad_scaler"):
        # Trainer exposes no loss-scale settings; accelerate uses this scaler for backward/step
        trainer.accelerator.scaler = torch.amp.GradScaler("cuda", **run["grad_scaler"])
    # resume from the newest checkpoint-N in output_dir (a restart, or the next job of a SLURM chain)
    from transformers.trainer_utils import get_last_checkpoint
    last = get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
    if last:
        print(f"resuming from {last}", flush=True)
    trainer.train(resume_from_checkpoint=last)
    if torch.cuda.is_available():
        peak = torch.cuda.max_memory_allocated()
        pred = run.get("predicted_peak_bytes_per_gpu")
        print(f"peak allocated {peak / 2**30:.2f} GiB" + (f" (gpuplan predicted {pred / 2**30:.2f} GiB)" if pred else ""))


if __name__ == "__main__":
    main()
'''


def hf_family_files(plan: Plan, *, deepspeed_file: str | None, extra_notes: list[str]) -> dict[str, str]:
    """Files shared by the hf and deepspeed engines (TrainingArguments, run.json, PEFT configs, script)."""
    t = plan.s.train
    notes = hf_notes(plan) + extra_notes
    files: dict[str, str] = {}
    files["training_args.json"] = json_text(plan, hf_training_args(plan, deepspeed_file=deepspeed_file), notes)
    files["run.json"] = json_text(plan, run_json(plan))
    files["model_config.json"] = json_text(plan, dict(plan.spec.config))
    if t.method in ("lora", "qlora"):
        files["lora_config.json"] = json_text(plan, lora_config(plan))
    if t.method == "qlora":
        sharded = plan.s.parallel.zero >= 2 and plan.count > 1
        files["bnb_config.json"] = json_text(plan, bnb_config(plan, load_dtype(plan) if sharded else None))
    files["train_hf.py"] = hash_header(plan, shebang="#!/usr/bin/env python") + TRAIN_HF_PY.lstrip("\n")
    return files


def check_hf_family(plan: Plan) -> None:
    require_training(plan)
    check_train_precision(plan)
    t = plan.s.train
    if t.precision == "fp8":
        raise unsupported(plan, "train.precision 'fp8'", "HF Trainer has no tested fp8 training path here.",
                          ("megatron",), "use bf16, or")
    if t.precision == "fp16" and t.method == "full" and not t.master_weights:
        raise unsupported(plan, "fp16 full training without master weights",
                          "loss-scaled fp16 needs fp32 master weights (GradScaler cannot unscale fp16 gradients).",
                          ("megatron",), "set train.master_weights: true or precision: bf16; or")


def accelerate_config(plan: Plan) -> tuple[dict[str, Any], list[str]]:
    p, t = plan.s.parallel, plan.s.train
    notes: list[str] = []
    cfg: dict[str, Any] = {"compute_environment": "LOCAL_MACHINE", "debug": False}
    if plan.count == 1 and p.offload == "none":
        cfg["distributed_type"] = "NO"
    elif p.zero >= 2 or p.offload != "none":      # offload needs FSDP, even on one GPU
        if p.offload == "optimizer":
            raise unsupported(plan, "offload 'optimizer' alone", "FSDP offloads parameters, gradients and optimizer "
                              "state together; it cannot offload only the optimizer.", ("deepspeed",),
                              "use offload: optimizer+params, or")
        if p.fsdp_version == 1:
            raise unsupported(plan, "parallel.fsdp_version 1", "gpuplan writes accelerate's FSDP2 config "
                              "(fsdp_version 2); FSDP1's flat-parameter config is not generated here.", ("deepspeed",),
                              "set parallel.fsdp_version: 2 (or remove it), or")
        cfg["distributed_type"] = "FSDP"
        cfg["fsdp_config"] = {
            "fsdp_version": 2,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_reshard_after_forward": p.zero == 3,
            "fsdp_offload_params": p.offload == "optimizer+params",
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_activation_checkpointing": False,
        }
        if p.replicas > 1:
            # HSDP through accelerate's ParallelismConfig (FSDP2 only): launch copies these keys to its
            # --parallelism_config_* arguments (accelerate/commands/launch.py, accelerate 1.16)
            cfg["parallelism_config"] = {"parallelism_config_dp_replicate_size": p.replicas,
                                         "parallelism_config_dp_shard_size": p.zero_shard_dp}
    else:
        cfg["distributed_type"] = "MULTI_GPU"
        if p.zero == 1:
            notes.append("zero 1 has no FSDP equivalent: plain DDP (replicated optimizer state); use --engine deepspeed for ZeRO-1")
    cfg.update({
        "downcast_bf16": "no",
        "machine_rank": 0,
        "main_training_function": "main",
        "mixed_precision": {"bf16": "bf16", "fp16": "fp16"}.get(t.precision, "no"),
        "num_machines": plan.nodes,
        "num_processes": plan.count,
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,
    })
    if plan.multi_node:
        cfg["main_process_ip"] = "127.0.0.1"   # overridden by launch.sh from $MASTER_ADDR
        cfg["main_process_port"] = 29500
    return cfg, notes


def files(plan: Plan) -> dict[str, str]:
    check_hf_family(plan)
    require_data_parallel_only(plan, ("megatron",))
    acc, notes = accelerate_config(plan)
    out = {"accelerate_config.yaml": hash_header(plan, notes) + yaml_text(acc)}
    out.update(hf_family_files(plan, deepspeed_file=None, extra_notes=notes))
    argv = ["accelerate", "launch", "--config_file", "accelerate_config.yaml"]
    if plan.multi_node:
        argv += ["--machine_rank", '"${NODE_RANK:?set NODE_RANK (0 on the head node)}"',
                 "--main_process_ip", '"${MASTER_ADDR:?set MASTER_ADDR to the head node}"',
                 "--main_process_port", '"${MASTER_PORT:-29500}"']
    argv += ["train_hf.py", '"$@"']
    out["launch.sh"] = launch_script(plan, argv, "NODE_RANK and MASTER_ADDR")
    return out
