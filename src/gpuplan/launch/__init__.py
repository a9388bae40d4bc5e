"""Plan -> runnable launch configuration, one module per engine.

    files = launch_files(scenario, "vllm", estimate=est_json)   # {file name: text}
    paths = write_launch(scenario, "hf", "out/")

Every file starts with a header holding the plan's predicted memory, speed and cost and the
gpuplan version (`#` comments; JSON files carry a top-level "_gpuplan" key instead, see _common).
Combinations an engine cannot run raise UnsupportedError naming the engines that can.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import InputError, UnsupportedError, close_matches
from ..scenario import Scenario
from ._common import SERVE_ENGINES, TRAIN_ENGINES, make_plan, require_objective

ENGINES: tuple[str, ...] = ("torchrun", "hf", "deepspeed", "megatron", "trl", "verl", "openrlhf", "llama-factory", "axolotl", "unsloth", "mlx-lm", "vllm", "sglang", "trtllm", "llama.cpp",
                            "slurm")
_ALIASES = {"torchtitan": "torchrun", "llamacpp": "llama.cpp", "llama-cpp": "llama.cpp", "llamafactory": "llama-factory", "llama_factory": "llama-factory", "tensorrt-llm": "trtllm", "fsdp": "torchrun",
            "fsdp2": "torchrun", "accelerate": "hf", "transformers": "hf", "megatron-lm": "megatron",
            "megatron-core": "megatron", "sbatch": "slurm", "mlx": "mlx-lm", "mlx_lm": "mlx-lm",
            "mlxlm": "mlx-lm"}

# engines whose generated files express parallel.shard_group (hybrid sharding); slurm wraps one of them
HYBRID_SHARD_ENGINES = ("torchrun", "hf", "slurm")

__all__ = ["ENGINES", "SERVE_ENGINES", "TRAIN_ENGINES", "engine_name", "launch_files", "write_launch"]


# engines whose files write packed rows with per-document attention (train.document_len): Axolotl's
# sample_packing, LLaMA-Factory's neat_packing
_PACKING_ENGINES = ("axolotl", "llama-factory")


def engine_name(engine: str) -> str:
    """The launch engine's canonical name ('SLURM' -> 'slurm', an alias -> its engine); InputError with close
    matches for a name that is none."""
    key = str(engine).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in ENGINES:
        raise InputError(f"launch engine '{engine}'", "is not a launch engine.", f"use one of {', '.join(ENGINES)}.",
                         close_matches(engine, ENGINES))
    return key


def _generate(scenario: Scenario, engine: str, estimate: dict | None, inner: str | None = None,
              time_limit_h: float | None = None) -> dict[str, str]:
    plan = make_plan(scenario, engine, estimate)
    if scenario.parallel.replicas > 1 and engine not in HYBRID_SHARD_ENGINES:
        p = scenario.parallel
        why = (f"(FSDP/ZeRO-3 over {p.shard_group} ranks, {p.replicas} replicas) is written only by the engines "
               "that have a hybrid shard: torchrun/torchtitan (data_parallel_replicate_degree) and hf (accelerate "
               "parallelism_config).")
        if engine == "deepspeed":
            from .deepspeed import DEEPSPEED_VERSION
            # deepspeed/runtime/config.py (0.19.8) _REMOVED_ZERO_CONFIG_KEYS rejects mics_shard_size
            why += (f" DeepSpeed {DEEPSPEED_VERSION} removed MiCS: its config rejects zero_optimization.mics_shard_size "
                    "(deepspeedai/DeepSpeed#8489), and ZeRO++ hpZ (zero_hpz_partition_size) shards only a secondary "
                    "copy of the weights, not the gradients and optimizer states.")
        raise UnsupportedError(f"launch engine '{engine}': parallel.shard_group = {p.shard_group}", why,
                               "pass --engine torchrun or hf (or slurm around one of them), or remove shard_group.")
    if plan.spec.is_encoder_decoder:
        # every generated script loads AutoModelForCausalLM / serves a decoder-only engine
        raise UnsupportedError(f"launch engine '{engine}': model '{plan.spec.name}'",
                               "is an encoder-decoder (T5): the generated training scripts build "
                               "AutoModelForCausalLM and the serving engines (vLLM, SGLang, TensorRT-LLM, "
                               "llama.cpp) are not set up for it here.",
                               "use `gpuplan estimate/memory/train/serve` for the numbers and transformers' "
                               "Seq2SeqTrainer / generate() for the run.")
    t = plan.s.train if plan.s.is_training else None
    if t is not None and engine in ("torchrun", "hf", "deepspeed", "megatron", "slurm"):
        require_objective(plan)      # their files train the supervised loss; the other engines check in their module
    if t is not None and t.document_len is not None and engine not in _PACKING_ENGINES + ("trl", "slurm"):
        # the scripts written for these engines train on rows whose attention spans the whole row
        raise UnsupportedError(f"launch engine '{engine}': train.document_len = {t.document_len}",
                               "the files written for this engine do not pack documents that attend only to "
                               "themselves.", "remove train.document_len, or use one of: "
                               + ", ".join(_PACKING_ENGINES) + " (SFT).")
    if t is not None and t.pack_tokens is not None:
        # padding a pack to seq_len with its boundaries covering the padding is open-instruct's OLMo-core DPO
        # (doc_lens over the padded row); the packing engines written here neither pad packs nor attend the padding
        raise UnsupportedError(f"launch engine '{engine}': train.pack_tokens = {t.pack_tokens}",
                               "no engine gpuplan writes pads a pack to seq_len and attends the padding as a "
                               "segment; the field describes a run (open-instruct's packed OLMo-core DPO) for its "
                               "estimate.", "remove train.pack_tokens to launch rows the documents fill.")
    if t is not None and t.pair_concat == "sequence":
        # TRL's DPO/ORPO/CPO trainers (the preference files written here) concatenate the pair on the batch axis;
        # the sequence-axis join is open-instruct's OLMo-core DPO, not an engine gpuplan writes
        raise UnsupportedError(f"launch engine '{engine}': train.pair_concat = sequence",
                               "no engine gpuplan writes joins the chosen and rejected sequences into one row "
                               "(TRL concatenates them on the batch axis); the field describes a run "
                               "(open-instruct's OLMo-core DPO with packing) for its estimate.",
                               "remove train.pair_concat to launch TRL's layout.")
    if engine == "torchrun":
        from . import torchrun as mod
    elif engine == "hf":
        from . import hf as mod
    elif engine == "deepspeed":
        from . import deepspeed as mod
    elif engine == "megatron":
        from . import megatron as mod
    elif engine == "trl":
        from . import trl as mod
    elif engine == "verl":
        from . import verl as mod
    elif engine == "openrlhf":
        from . import openrlhf as mod
    elif engine == "llama-factory":
        from . import llamafactory as mod
    elif engine == "axolotl":
        from . import axolotl as mod
    elif engine == "unsloth":
        from . import unsloth as mod
    elif engine == "mlx-lm":
        from . import mlxlm as mod
    elif engine == "vllm":
        from . import vllm as mod
    elif engine == "sglang":
        from . import sglang as mod
    elif engine == "trtllm":
        from . import trtllm as mod
    elif engine == "llama.cpp":
        from . import llamacpp as mod
    else:
        from . import slurm
        return slurm.files(plan, inner, time_limit_h)
    return mod.files(plan)


def launch_files(scenario: Scenario, engine: str, *, estimate: dict | None = None,
                 inner: str | None = None, time_limit_h: float | None = None) -> dict[str, str]:
    """File name -> text of the launch configuration for `engine`.

    estimate: the DESIGN §3.2 JSON dict of `gpuplan estimate` for this scenario (None: headers say
    "not estimated"). inner: for engine 'slurm', the training engine it wraps (default from
    scenario.framework: hf->hf, deepspeed->deepspeed, megatron->megatron, torchtitan->torchrun).
    time_limit_h: for 'slurm', the partition's time limit per job (default 24 h); longer runs are
    split into chained jobs that resume from the latest checkpoint."""
    name = engine_name(engine)
    if inner is not None and name != "slurm":
        raise InputError("inner engine", f"only applies to engine 'slurm', not '{name}'.", "drop it.")
    if time_limit_h is not None and name != "slurm":
        raise InputError("time limit", f"only applies to engine 'slurm', not '{name}'.", "drop it.")
    return _generate(scenario, name, estimate, engine_name(inner) if inner else None, time_limit_h)


def write_launch(scenario: Scenario, engine: str, out_dir: str | Path, estimate: dict | None = None,
                 inner: str | None = None, *, force: bool = False, time_limit_h: float | None = None) -> list[Path]:
    """Write the files of `launch_files` into out_dir (created); scripts are made executable.
    An existing file whose content differs is never overwritten unless `force`: nothing is written
    and the error lists those files."""
    files = launch_files(scenario, engine, estimate=estimate, inner=inner, time_limit_h=time_limit_h)
    out = Path(out_dir)
    _check_out_dir(out, files, force)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in sorted(files.items()):
        path = out / name
        path.write_text(text, encoding="utf-8")
        if name.endswith((".sh", ".py", ".sbatch")):
            path.chmod(0o755)
        paths.append(path)
    return paths


def _check_out_dir(out: Path, files: dict[str, str], force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}", "is a file, not a folder.", "name a folder (it is created if missing).")
    changed = []
    for name, text in sorted(files.items()):
        path = out / name
        if path.is_dir():
            raise InputError(f"--out {out}", f"'{path}' is a folder where a launch file goes.",
                             "remove it or choose another folder.")
        if path.exists() and not force and path.read_text(encoding="utf-8", errors="replace") != text:
            changed.append(str(path))
    if changed:
        raise InputError(f"--out {out}", f"would overwrite {len(changed)} file(s) whose content differs: "
                         + ", ".join(changed) + ".", "pass --force to overwrite them, or choose another folder.")
