"""Which training framework runs a layout, and which ZeRO-style sharding and offload each one offers
with it (docs/recommend.md §1, "Frameworks"). The search tries every combination a framework really
supports, not one framework per layout.

What each framework composes, from its own code and documentation:

* HF Trainer / accelerate (the default `hf`): data parallel only (DDP, FSDP, DeepSpeed ZeRO 1-3);
  the search gives it no tensor, pipeline or context parallelism.
* Megatron-LM (`--use-distributed-optimizer`, megatron/core/optimizer/distrib_optimizer.py):
  TP, PP, CP and EP with the distributed optimizer, which shards the fp32 master weights and
  optimizer states over the data-parallel ranks (a ZeRO-1 layout); gradients and 16-bit weights
  stay replicated. `--optimizer-cpu-offload` moves the optimizer to the host.
* torchtitan (FSDP2 `fully_shard` composed with TP, PP and CP: torchtitan, arXiv:2410.06511 §2;
  torchtitan/models/llama3/infra/parallelize.py): parameters, gradients and optimizer states are
  sharded over the data-parallel ranks (ZeRO-3); its DDP path refuses more than one parallel
  dimension ("DDP has not supported > 1D parallelism"), so with model parallelism the data-parallel
  ranks shard (ZeRO-3), or there is one replica. `training.enable_cpu_offload` (FSDP2
  CPUOffloadPolicy) offloads parameters, gradients and optimizer states.
* DeepSpeed AutoTP training (`"tensor_parallel": {"autotp_size": N}`, DeepSpeed >= 0.16.4,
  https://www.deepspeed.ai/tutorials/autotp-training): tensor parallel combined with ZeRO stage 0,
  1 or 2 (the tutorial), and with ZeRO-3 in DeepSpeed 0.19 (0.19.8 runtime/engine.py
  `_configure_tensor_parallel_states`: "AutoTP + ZeRO stage 3 is supported for both inference and
  training"; runtime/zero/stage3.py gathers AutoTP shards). No pipeline or context parallelism
  through that path (HF Trainer + DeepSpeed). ZeRO-Offload moves the optimizer to the host;
  parameter offload with AutoTP is not offered (not verified in DeepSpeed's sources here).

Megatron-FSDP (`--use-megatron-fsdp`) is not searched: the generated Megatron launch file does not
write it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

OFFLOADS_ALL = ("none", "optimizer", "optimizer+params")


@dataclass(frozen=True)
class Option:
    """One framework with the sharding stages and offloads it offers for a layout."""
    framework: str | None            # None: the scenario's framework (the user's, or the default hf)
    zeros: tuple[int, ...]
    offloads: tuple[str, ...]


def _model_parallel(par: Mapping[str, int]) -> bool:
    return par.get("tp", 1) > 1 or par.get("pp", 1) > 1 or par.get("cp", 1) > 1


def rules(framework: str, par: Mapping[str, int], n_shard: int) -> Option | str:
    """What `framework` offers for the layout `par` (tp, pp, cp, ep) with `n_shard` data-parallel
    (x context-parallel) ranks to shard over, or the reason it cannot run the layout."""
    tp, pp, cp = par.get("tp", 1), par.get("pp", 1), par.get("cp", 1)
    single = n_shard == 1
    if framework == "megatron":
        return Option("megatron", (0,) if single else (1,), ("none", "optimizer"))
    if framework == "torchtitan":
        if not _model_parallel(par):
            return Option("torchtitan", (0,) if single else (0, 3), ("none", "optimizer+params"))
        return Option("torchtitan", (0,) if single else (3,), ("none", "optimizer+params"))
    if framework == "deepspeed":
        if pp > 1 or cp > 1:
            return f"DeepSpeed AutoTP has no pipeline or context parallelism (pp={pp}, cp={cp})"
        if tp > 1:
            return Option("deepspeed", (0,) if single else (1, 2, 3), ("none", "optimizer"))
        return Option("deepspeed", (0,) if single else (1, 2, 3), OFFLOADS_ALL)
    if framework == "hf":
        if _model_parallel(par):
            return "HF Trainer/accelerate trains data parallel only (no tp, pp or cp)"
        return Option("hf", (0,) if single else (1, 2, 3), OFFLOADS_ALL)
    # frameworks the search does not choose (torchtune, litgpt, ...): data parallel, any stage
    if _model_parallel(par):
        return f"{framework} is searched data parallel only"
    return Option(framework, (0,) if single else (1, 2, 3), OFFLOADS_ALL)


# optimizers each model-parallel framework's generated launch file can write (launch/megatron.py: Megatron's
# --optimizer adam|sgd; launch/torchrun.py: one torch.optim class, AdamW, SGD or Adafactor). Muon, GaLore,
# SOAP and the bitsandbytes optimizers run through HF Trainer (GaLore, paged) or the user's own loop.
FRAMEWORK_OPTIMIZERS = {"megatron": ("adamw", "sgd"), "torchtitan": ("adamw", "sgd", "adafactor")}


def optimizer_reason(framework: str | None, optimizer: str) -> str | None:
    """Why `framework` cannot run `optimizer` in a plan the search returns, or None when it can."""
    allowed = FRAMEWORK_OPTIMIZERS.get(framework or "")
    if allowed is None or optimizer in allowed:
        return None
    return f"{framework} launch files write only {', '.join(allowed)} (not {optimizer})"


# frameworks the search may pick for a model-parallel layout, in order of preference when two fit
# equally (Megatron-LM is the reference for TP/PP; FSDP2+TP when the distributed optimizer does not
# fit; DeepSpeed AutoTP last)
AUTO_MODEL_PARALLEL = ("megatron", "torchtitan", "deepspeed")


def model_reason(framework: str, par: Mapping[str, int], model) -> str | None:
    """Why `framework` cannot run this model with a model-parallel layout, from what its launch files
    can express (launch/torchtitan.py, launch/deepspeed.py): torchtitan builds only the
    architectures it registers by name and flavor; transformers refuses its MoE weight conversions
    under DeepSpeed tensor parallelism."""
    if model is None:
        return None
    if framework == "torchtitan":
        from ..launch.torchtitan import VERSION, flavor_for
        if flavor_for(model) is None:
            return (f"torchtitan {VERSION} builds only the architectures it registers; "
                    f"{getattr(model, 'name', 'this model')} is not one of them")
    if framework == "deepspeed" and par.get("tp", 1) > 1 and getattr(model, "num_experts", 0):
        return "DeepSpeed AutoTP through transformers does not convert mixture-of-experts weights"
    return None


def named_framework(base) -> str | None:
    """The framework a search input fixes: its own, "hf" when it names a fine-tuning tool (Unsloth, TRL, Axolotl
    and LLaMA-Factory train through HF transformers), else None (the search chooses)."""
    named = base.get("framework")
    if named is None and base.get("tool"):
        return "hf"
    return named


def options(named: str | None, par: Mapping[str, int], n_shard: int,
            model=None) -> tuple[list[Option], list[str]]:
    """The framework options for a layout: the user's framework only when one is named, else the
    default (HF) for data-parallel layouts and every framework that runs a model-parallel one (and,
    given the model, can be launched for it: `model_reason`).
    Returns (options, reasons for the frameworks that cannot run it)."""
    if named is not None:
        r = rules(named, par, n_shard)
        return ([r], []) if isinstance(r, Option) else ([], [r])
    if not _model_parallel(par):
        r = rules("hf", par, n_shard)
        assert isinstance(r, Option)
        return [Option(None, r.zeros, r.offloads)], []
    out, why = [], []
    for fw in AUTO_MODEL_PARALLEL:
        r = rules(fw, par, n_shard)
        if isinstance(r, Option) and (m := model_reason(fw, par, model)):
            r = m
        (out if isinstance(r, Option) else why).append(r)
    return out, why
