"""The one catalog of changes that trade time, quality or workload for memory.

`gpuplan whatif` (search/whatif.py) lists what each change saves and costs; the OOM explainer
(local/oom.py) ranks them by bytes freed; `gpuplan memory`'s "to make it fit" path takes the cheapest
ones in turn. All three read this list, so they name and apply a technique the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FP8_KV = ("fp8", "fp8_e4m3", "fp8_e5m2")


@dataclass(frozen=True)
class Technique:
    name: str                       # "field=value" as a user would write it
    changes: dict[str, Any]         # nested Scenario.replace() update
    note: str                       # what it does
    tradeoff: str                   # what it costs (time, quality, host memory)
    saves_memory: bool = True       # False: a change listed for completeness (e.g. a lower ZeRO stage)
    changes_workload: bool = False  # changes what is computed (shorter context, fewer requests, FP8 math)
    changes_method: bool = False    # switches the training method (full -> LoRA/QLoRA)


def techniques_for(scn: Any) -> list[Technique]:
    """Every single change that applies to the scenario (each differs from it)."""
    return _training(scn) if scn.is_training else _serving(scn)


def _training(scn: Any) -> list[Technique]:
    t, p = scn.train, scn.parallel
    out = _recompute(t) + _batching(t, scn.dp) + _optimizer(t) + _method(t) + _sharding(p, scn.dp, p.cp)
    if t.objective in ("dpo", "ipo", "kto") and t.method == "full" and t.reference in (None, "copy"):
        # full fine-tuning holds a frozen reference copy (TRL dpo_trainer.py L893-905 at v1.9.0, docs/posttrain.md)
        out.append(Technique("reference=precomputed", {"train": {"reference": "precomputed"}},
                             "reference log-probs computed once before training (TRL precompute_ref_log_probs): no "
                             "reference model held while training", "one extra forward pass over the data set "
                             "before training"))
    if t.rl is not None:
        out += _rl(t.rl)       # an RL step never reads train.seq_len: its lengths are the rollout's
    elif t.seq_len >= 256:
        out.append(Technique(f"seq_len={t.seq_len // 2}", {"train": {"seq_len": t.seq_len // 2}},
                             "half the tokens per sequence", "shorter context per sequence: changes what the model "
                             "learns", changes_workload=True))
    if t.attention == "eager":
        out.append(Technique("attention=flash", {"train": {"attention": "flash"}}, "fused attention kernel: no "
                             "score matrix kept", "no quality change"))
    # not under QLoRA: the 4-bit base computes in 16 bits (the scenario refuses fp8 with qlora)
    if t.precision in ("bf16", "fp16") and t.master_weights and t.method != "qlora":
        out.append(Technique("precision=fp8", {"train": {"precision": "fp8"}}, "FP8 matmuls (Transformer Engine)",
                             "needs FP8 tensor cores; numerics change", saves_memory=False, changes_workload=True))
    return out


def _rl(rl: Any) -> list[Technique]:
    """The RL step's own knobs (issue 20: whatif offered seq_len=N for GRPO, a field the step does not read)."""
    given = rl.model_dump(exclude_unset=True)

    def change(**kw: Any) -> dict[str, Any]:          # Scenario.replace merges one level: pass the whole rl block
        return {"train": {"rl": {**given, **kw}}}
    out = []
    if rl.placement == "colocated" and not rl.offload_train_states:
        out.append(Technique("rl.offload_train_states=true", change(offload_train_states=True),
                             "the trainer's weights and optimizer states go to host memory while the engine generates "
                             "(verl param/optimizer offload)", "host copies every step; needs host RAM"))
    if rl.placement == "colocated" and rl.gpu_memory_utilization > 0.2:
        g = round(rl.gpu_memory_utilization - 0.1, 2)
        out.append(Technique(f"rl.gpu_memory_utilization={g:g}", change(gpu_memory_utilization=g),
                             "a smaller rollout engine reservation beside the trainer's states",
                             "fewer sequences generated at once: slower rollout"))
    if rl.max_new_tokens >= 256:
        n = rl.max_new_tokens // 2
        kw: dict[str, Any] = {"max_new_tokens": n}
        if rl.mean_response_len is not None:
            kw["mean_response_len"] = min(rl.mean_response_len, n)
        out.append(Technique(f"rl.max_new_tokens={n}", change(**kw), "half the generated tokens per response",
                             "longer answers are cut: changes what the policy learns", changes_workload=True))
    return out


def _recompute(t: Any) -> list[Technique]:
    out = []
    if t.recompute == "none":
        out.append(Technique("recompute=selective", {"train": {"recompute": "selective"}},
                             "recompute the cheap, large activations in backward", "a few % more compute"))
    if t.recompute != "full":
        out.append(Technique("recompute=full", {"train": {"recompute": "full"}},
                             "keep only each layer's input; recompute the layer in backward",
                             "about +33 % compute per step (forward runs twice)"))
    return out


def _batching(t: Any, dp: int) -> list[Technique]:
    gb = t.global_batch or t.micro_batch * dp
    return [Technique(f"micro_batch={m} (+accumulation)", {"train": {"micro_batch": m, "global_batch": gb}},
                      "same global batch in more, smaller micro-batches",
                      f"{t.micro_batch // m}x more accumulation steps; lower GPU efficiency")
            for m in sorted({t.micro_batch // 2, 1}, reverse=True) if 1 <= m < t.micro_batch]


def _optimizer(t: Any) -> list[Technique]:
    out = []
    if t.optimizer == "adamw":
        out.append(Technique("optimizer=adamw-8bit", {"train": {"optimizer": "adamw-8bit"}},
                             "bitsandbytes 8-bit optimizer states", "usually the same quality"))
    if t.master_weights and t.precision in ("bf16", "fp16"):
        out.append(Technique("master_weights=false", {"train": {"master_weights": False, "precision": "bf16"}},
                             "16-bit weights, gradients and states (torchtune/litgpt bf16-true)",
                             "small updates can be lost in bf16"))
    return out


def _method(t: Any) -> list[Technique]:
    out = []
    if t.method == "full":
        out.append(Technique("method=lora", {"train": {"method": "lora", "lora_rank": 16}},
                             "train rank-16 adapters on a frozen 16-bit base",
                             "a different (usually slightly weaker) result", changes_method=True))
    if t.method != "qlora":
        out.append(Technique("method=qlora", {"train": {"method": "qlora", "lora_rank": 16}},
                             "rank-16 adapters on a frozen NF4 base", "slower steps, small quality cost",
                             changes_method=True))
    return out


_ZERO_NOTES = {0: "no sharding", 1: "shard optimizer states", 2: "shard gradients too",
               3: "shard parameters too (FSDP full shard)"}


def _sharding(p: Any, dp: int, cp: int) -> list[Technique]:
    out = []
    if dp * cp > 1:
        for z in (1, 2, 3):
            if z != p.zero:
                # hybrid sharding needs zero 3: a lower stage drops the shard group
                drop = {"shard_group": None} if z < 3 and p.shard_group is not None else {}
                out.append(Technique(f"zero={z}", {"parallel": {"zero": z, "dp": dp, **drop}}, _ZERO_NOTES[z],
                                     "more communication" if z > p.zero else "less communication, more memory",
                                     saves_memory=z > p.zero))
    if p.replicas > 1:
        out.append(Technique("shard_group=dp", {"parallel": {"shard_group": None, "dp": dp}},
                             "FSDP/ZeRO-3 over every data-parallel rank instead of hybrid sharding (no replicas)",
                             "the per-layer all-gathers and reduce-scatters span the whole data-parallel group"))
    if p.offload == "none":
        out.append(Technique("offload=optimizer", {"parallel": {"offload": "optimizer", "zero": max(p.zero, 1), "dp": dp}},
                             "optimizer states and master weights in CPU memory, step on the CPU",
                             "slower steps, needs host RAM"))
    if p.offload != "optimizer+params" and p.zero == 3:
        out.append(Technique("offload=optimizer+params", {"parallel": {"offload": "optimizer+params", "dp": dp}},
                             "ZeRO-Infinity style parameter offload", "much slower steps, needs host RAM"))
    return out


def _serving(scn: Any) -> list[Technique]:
    i = scn.infer
    out = []
    if i.kv_cache not in FP8_KV:
        out.append(Technique("kv_cache=fp8", {"infer": {"kv_cache": "fp8"}}, "halves the KV cache",
                             "small accuracy cost on some models"))
    for w, note in (("fp8", "8-bit weights"), ("awq-int4", "4-bit AWQ weights (g128)"),
                    ("gptq-int4", "4-bit GPTQ weights (g128)")):
        if i.weights != w:
            out.append(Technique(f"weights={w}", {"infer": {"weights": w}}, note,
                                 "needs an FP8-capable GPU for speed" if w == "fp8" else "some quality loss"))
    if i.concurrency > 1:
        out.append(Technique(f"concurrency={i.concurrency // 2}", {"infer": {"concurrency": i.concurrency // 2}},
                             "fewer requests in flight: less KV cache", "lower throughput", changes_workload=True))
    if i.prompt_len >= 256:
        out.append(Technique(f"prompt_len={i.prompt_len // 2}", {"infer": {"prompt_len": i.prompt_len // 2}},
                             "half the prompt tokens", "shorter context", changes_workload=True))
    return out
