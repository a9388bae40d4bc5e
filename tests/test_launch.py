"""Launch configs (issue 7): engines' own parsers where they install on CPU, schema tests for the
rest, snapshots of fixed plans, and the errors for combinations an engine cannot run.

Snapshots: tests/snapshots/launch/<case>__<engine>.txt; regenerate with
GPUPLAN_UPDATE_SNAPSHOTS=1. Smoke runs of the generated training scripts on CPU (torchrun + gloo
FSDP2, HF Trainer) take ~30 s and run with GPUPLAN_LAUNCH_SMOKE=1.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuplan import __version__
from gpuplan.errors import InputError, UnsupportedError
from gpuplan.launch import ENGINES, launch_files, write_launch
from gpuplan.scenario import scenario_from_dict

SNAP = Path(__file__).parent / "snapshots" / "launch"
UPDATE = os.environ.get("GPUPLAN_UPDATE_SNAPSHOTS") == "1"

ESTIMATE = {  # a fixed DESIGN §3.2 dict, so headers are deterministic
    "memory": {"peak_bytes_per_gpu": 61_000_000_000, "capacity_bytes_per_gpu": 85_520_809_984, "fits": True,
               "components": {"weights": 16_060_000_000, "gradients": 4_015_000_000, "optimizer_states": 8_030_000_000,
                              "activations": 30_000_000_000, "logits": 2_000_000_000, "kv_cache": 0,
                              "temporary": 0, "runtime_overhead": 895_000_000}},
    "performance": {"step_time_s": 4.2, "tokens_per_s_per_gpu": 7800.0, "mfu": 0.41, "time_to_train_s": 360000.0,
                    "ttft_s": None, "tpot_s": None, "output_tokens_per_s": None},
    "cost": {"usd_per_hour": 23.92, "usd_total": 2392.0, "usd_per_million_tokens": 0.85},
}
SERVE_ESTIMATE = {
    "memory": {"peak_bytes_per_gpu": 76_000_000_000, "capacity_bytes_per_gpu": 85_520_809_984, "fits": True,
               "components": {"weights": 8_500_000_000, "gradients": 0, "optimizer_states": 0, "activations": 2_000_000_000,
                              "logits": 0, "kv_cache": 64_000_000_000, "temporary": 500_000_000,
                              "runtime_overhead": 1_000_000_000}},
    "performance": {"step_time_s": None, "tokens_per_s_per_gpu": None, "mfu": None, "time_to_train_s": None,
                    "ttft_s": 0.081, "tpot_s": 0.0123, "output_tokens_per_s": 4100.0},
    "cost": {"usd_per_hour": 2.99, "usd_total": None, "usd_per_million_tokens": 0.2},
}

CASES = {
    # training, one node: 8B full pre-training, ZeRO-3, selective recompute
    "train8b": ({"model": "llama-3.1-8b", "task": "train", "hardware": {"gpu": "h100-sxm", "count": 8},
                 "parallel": {"zero": 3}, "train": {"seq_len": 8192, "micro_batch": 1, "global_batch": 512,
                                                    "recompute": "selective", "tokens": 1e11}}, ESTIMATE),
    # fine-tuning, consumer GPUs: QLoRA fp16 on 2x RTX 4090 with ZeRO-2 / FSDP shard-grad-op
    "qlora4090": ({"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "rtx-4090", "count": 2},
                   "parallel": {"zero": 2}, "train": {"method": "qlora", "precision": "fp16", "seq_len": 2048,
                                                      "micro_batch": 2, "global_batch": 32, "recompute": "full",
                                                      "optimizer": "adamw-8bit", "tokens": 2e7}}, None),
    # training, multi-node: 70B on 4 nodes with TP/PP/VPP/SP for Megatron
    "train70b4n": ({"model": "llama-3.1-70b", "task": "train", "framework": "megatron",
                    "hardware": {"gpu": "h100-sxm", "count": 32, "gpus_per_node": 8},
                    "parallel": {"tp": 4, "pp": 2, "vpp": 2, "zero": 1},
                    "train": {"seq_len": 4096, "micro_batch": 1, "global_batch": 1024, "recompute": "full",
                              "tokens": 1e12}}, ESTIMATE),
    # serving, one GPU: fp8 weights and KV
    "serve8b": ({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
                 "infer": {"weights": "fp8", "kv_cache": "fp8", "prompt_len": 2048, "output_len": 512,
                           "concurrency": 64}}, SERVE_ESTIMATE),
    # serving, tensor parallel, AWQ, no CUDA graphs
    "serve70b_awq": ({"model": "llama-3.1-70b", "task": "infer", "hardware": {"gpu": "a100-sxm-80gb", "count": 4},
                      "parallel": {"tp": 4}, "infer": {"weights": "awq-int4", "kv_cache": "bf16", "concurrency": 32,
                                                       "cuda_graphs": False, "max_model_len": 8192}}, None),
    # serving, multi-node: 405B over 2 nodes (tp8 x pp2)
    "serve405b2n": ({"model": "llama-3.1-405b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 16},
                     "parallel": {"tp": 8, "pp": 2}, "infer": {"weights": "bf16", "kv_cache": "fp8", "concurrency": 16}},
                    None),
    # issue 17: in-flight NF4 on vLLM (out-of-tree bitsandbytes plugin)
    "serve8b_nf4": ({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "l40s", "count": 1},
                     "infer": {"weights": "nf4", "kv_cache": "bf16", "concurrency": 8}}, None),
    # issue 17: MoE with attention data parallel + expert parallel (one SGLang engine of 8 ranks)
    "serve_moe_dpep": ({"model": "qwen3-30b-a3b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 8},
                        "parallel": {"tp": 1, "dp": 8, "ep": 8}, "infer": {"concurrency": 256}}, None),
    # issue 17: Qwen3 (q/k norms, its own norm epsilon) and Qwen2.5 (q/k/v biases) on Megatron
    "train_qwen3": ({"model": "Qwen/Qwen3-8B", "task": "train", "hardware": {"gpu": "h100-sxm", "count": 8},
                     "parallel": {"tp": 2, "zero": 1}, "train": {"seq_len": 4096, "micro_batch": 1,
                                                                 "global_batch": 64, "tokens": 1e10}}, None),
    "train_qwen25": ({"model": "Qwen/Qwen2.5-7B", "task": "train", "hardware": {"gpu": "h100-sxm", "count": 8},
                      "parallel": {"tp": 2, "zero": 1}, "train": {"seq_len": 4096, "micro_batch": 1,
                                                                  "global_batch": 64, "tokens": 1e10}}, None),
    # issue 17: the model-parallel plans the search returns on torchtitan (FSDP2 + TP, FSDP2 + TP + PP)
    # and DeepSpeed (AutoTP with ZeRO-3)
    "train70b_titan2d": ({"model": "llama-3.1-70b", "task": "train", "framework": "torchtitan",
                          "hardware": {"gpu": "h100-sxm", "count": 64, "gpus_per_node": 8},
                          "parallel": {"tp": 8, "zero": 3}, "train": {"seq_len": 8192, "micro_batch": 1,
                                                                      "global_batch": 64, "recompute": "selective",
                                                                      "tokens": 1e11}}, None),
    "train70b_titan3d": ({"model": "llama-3.1-70b", "task": "train", "framework": "torchtitan",
                          "hardware": {"gpu": "h100-sxm", "count": 64, "gpus_per_node": 8},
                          "parallel": {"tp": 8, "pp": 4, "zero": 3}, "train": {"seq_len": 8192, "micro_batch": 1,
                                                                               "global_batch": 64, "tokens": 1e11}},
                         None),
    "train8b_autotp": ({"model": "llama-3.1-8b", "task": "train", "framework": "deepspeed",
                        "hardware": {"gpu": "h100-sxm", "count": 16, "gpus_per_node": 8},
                        "parallel": {"tp": 4, "zero": 3}, "train": {"seq_len": 4096, "micro_batch": 2,
                                                                    "global_batch": 64, "recompute": "selective",
                                                                    "tokens": 1e10}}, None),
    "train70b_mgoffload": ({"model": "llama-3.1-70b", "task": "train", "framework": "megatron",
                            "hardware": {"gpu": "h100-sxm", "count": 32, "gpus_per_node": 8},
                            "parallel": {"tp": 4, "pp": 4, "zero": 1, "offload": "optimizer"},
                            "train": {"seq_len": 4096, "micro_batch": 1, "global_batch": 64, "tokens": 1e11}}, None),
    # hybrid sharding (parallel.shard_group): ZeRO-3/FSDP within a node, replicated across 2 nodes (HSDP / MiCS),
    # and torchtitan's HSDP beside TP (FSDP over 4, replicate 2, TP 2)
    "train8b_hsdp": ({"model": "llama-3.1-8b", "task": "train", "hardware": {"gpu": "h100-sxm", "count": 16,
                                                                           "gpus_per_node": 8},
                      "parallel": {"zero": 3, "shard_group": 8}, "train": {"seq_len": 4096, "micro_batch": 2,
                                                                          "global_batch": 64, "tokens": 1e10}}, None),
    "train8b_titan_hsdp": ({"model": "llama-3.1-8b", "task": "train", "framework": "torchtitan",
                            "hardware": {"gpu": "h100-sxm", "count": 16, "gpus_per_node": 8},
                            "parallel": {"tp": 2, "zero": 3, "shard_group": 4},
                            "train": {"seq_len": 8192, "micro_batch": 1, "global_batch": 64, "tokens": 1e10}}, None),
    # llama.cpp: GGUF on a consumer card, q8_0 KV cache
    "gguf4090": ({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "rtx-4090", "count": 1},
                  "infer": {"weights": "gguf-q4_k_m", "kv_cache": "q8_0", "engine": "llama.cpp", "prompt_len": 4096,
                            "output_len": 512, "concurrency": 4}}, None),
}

SNAPSHOTS = [("train8b", "torchrun"), ("train8b", "hf"), ("train8b", "deepspeed"), ("train8b", "megatron"),
             ("qlora4090", "hf"), ("qlora4090", "deepspeed"), ("train70b4n", "megatron"), ("train70b4n", "slurm"),
             ("train70b4n", "torchrun_dp"), ("serve8b", "vllm"), ("serve8b", "sglang"), ("serve8b", "trtllm"),
             ("serve70b_awq", "vllm"), ("serve70b_awq", "sglang"), ("serve70b_awq", "trtllm"),
             ("serve405b2n", "vllm"), ("serve405b2n", "sglang"), ("serve405b2n", "trtllm"),
             ("gguf4090", "llama.cpp"), ("serve8b", "llama.cpp_f16"), ("serve8b_nf4", "vllm"),
             ("serve_moe_dpep", "sglang"), ("train_qwen3", "megatron"), ("train_qwen25", "megatron"),
             ("train70b_titan2d", "torchrun"), ("train70b_titan3d", "torchrun"), ("train8b_autotp", "deepspeed"),
             ("train70b_mgoffload", "megatron"), ("train8b_hsdp", "torchrun"), ("train8b_hsdp", "hf"),
             ("train8b_titan_hsdp", "torchrun")]


def scen(case, **updates):
    data, est = CASES[case]
    s = scenario_from_dict(json.loads(json.dumps(data)))
    return (s.replace(**updates) if updates else s), est


def files_for(case, engine):
    s, est = scen(case)
    if engine == "torchrun_dp":      # the 70B plan re-laid out as pure FSDP over 32 GPUs
        s = s.replace(parallel={"tp": 1, "pp": 1, "vpp": 1, "zero": 3, "dp": 32}, hardware={"count": 32})
        engine = "torchrun"
    if engine == "llama.cpp_f16":
        s = s.replace(infer={"weights": "bf16", "kv_cache": "bf16"})
        engine = "llama.cpp"
    return launch_files(s, engine, estimate=est)


def all_generated():
    for case, engine in SNAPSHOTS:
        yield case, engine, files_for(case, engine)


# ---- snapshots, headers, determinism --------------------------------------------------------

@pytest.mark.parametrize("case,engine", SNAPSHOTS, ids=[f"{c}-{e}" for c, e in SNAPSHOTS])
def test_snapshot(case, engine):
    files = files_for(case, engine)
    text = "".join(f"==> {name} <==\n{body}\n" for name, body in sorted(files.items()))
    path = SNAP / f"{case}__{engine}.txt"
    if UPDATE or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if not UPDATE:
            pytest.skip(f"snapshot {path.name} created")
    assert text == path.read_text(encoding="utf-8"), f"{path.name} changed; rerun with GPUPLAN_UPDATE_SNAPSHOTS=1 if intended"


def test_deterministic():
    for case, engine in SNAPSHOTS[:6]:
        assert files_for(case, engine) == files_for(case, engine)


def test_every_file_starts_with_header():
    for case, engine, files in all_generated():
        est = CASES[case][1]
        for name, text in files.items():
            if name.endswith(".json"):
                data = json.loads(text)
                assert next(iter(data)) == "_gpuplan", (case, engine, name)
                meta = data["_gpuplan"]
                assert meta["generated_by"] == f"gpuplan {__version__}"
                assert meta["predicted"] == ("not estimated" if est is None else {k: est[k] for k in est})
                continue
            lines = text.splitlines()
            if lines[0].startswith("#!"):
                lines = lines[1:]
            head = "\n".join(lines[:7])       # generated-by, plan, written-for, memory (+ breakdown), speed, cost
            assert lines[0].startswith(f"# generated by gpuplan {__version__}"), (case, engine, name)
            if est is None:
                assert "not estimated" in head
            else:
                assert "predicted memory:" in head and "predicted speed:" in head and "predicted cost:" in head


def test_header_numbers():
    text = files_for("train8b", "megatron")["train_megatron.sh"]
    assert "# predicted memory: 56.81 GiB peak per GPU of 79.65 GiB usable (fits)" in text
    assert "step 4.200 s, 7,800 tokens/s per GPU, MFU 41.0%, time to train 4.2 days" in text
    assert "$23.92/h, $2,392 total, $0.850 per million tokens" in text
    serve = files_for("serve8b", "vllm")["serve.sh"]
    assert "TTFT 81.0 ms, TPOT 12.30 ms, 4,100 output tokens/s" in serve


# ---- engines' own parsers (installed on this CPU machine) ------------------------------------

def _body(text):
    data = json.loads(text)
    data.pop("_gpuplan")
    return data


@pytest.mark.parametrize("case,engine", [("train8b", "hf"), ("train8b", "deepspeed"), ("qlora4090", "hf"),
                                          ("qlora4090", "deepspeed")])
def test_training_arguments_parse(case, engine):
    transformers = pytest.importorskip("transformers")
    args = _body(files_for(case, engine)["training_args.json"])
    args.pop("deepspeed", None)       # needs a distributed set-up to construct; ds_config is tested below
    # the only change: use_cpu, because bf16/fp16 validation refuses a machine without a GPU
    (ta,) = transformers.HfArgumentParser(transformers.TrainingArguments).parse_dict({**args, "use_cpu": True})
    assert ta.per_device_train_batch_size == args["per_device_train_batch_size"]
    assert ta.gradient_accumulation_steps == args["gradient_accumulation_steps"]
    assert ta.bf16 == args["bf16"] and ta.fp16 == args["fp16"]
    assert str(ta.optim.value) == args["optim"]


def test_optimizer_and_precision_mapping():
    qa = _body(files_for("qlora4090", "hf")["training_args.json"])
    assert qa["optim"] == "adamw_bnb_8bit" and qa["fp16"] is True and qa["bf16"] is False
    assert qa["activation_checkpointing"] is True and "gradient_checkpointing" not in qa   # deprecated in 5.x
    assert qa["gradient_accumulation_steps"] == 32 // (2 * 2)
    run = _body(files_for("qlora4090", "hf")["run.json"])
    assert run["grad_scaler"]["init_scale"] == 4096 and 100 <= run["grad_scaler"]["growth_interval"] <= 2000


def test_peft_lora_and_bnb_configs():
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    files = files_for("qlora4090", "hf")
    lc = peft.LoraConfig(**_body(files["lora_config.json"]))
    assert lc.r == 16 and lc.lora_alpha == 32 and lc.target_modules == "all-linear"
    bnb = transformers.BitsAndBytesConfig(**_body(files["bnb_config.json"]))
    assert bnb.load_in_4bit and bnb.bnb_4bit_quant_type == "nf4" and bnb.bnb_4bit_use_double_quant
    assert str(bnb.bnb_4bit_compute_dtype) == "torch.float16"
    assert str(bnb.bnb_4bit_quant_storage) == "torch.float16"    # FSDP shards a 16-bit storage dtype


@pytest.mark.parametrize("case", ["train8b", "qlora4090"])
def test_accelerate_config_loads(case, tmp_path):
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import load_config_from_file
    path = tmp_path / "accelerate_config.yaml"
    path.write_text(files_for(case, "hf")["accelerate_config.yaml"])
    cfg = load_config_from_file(str(path))
    assert cfg.num_processes == CASES[case][0]["hardware"]["count"]
    assert str(cfg.distributed_type).endswith("FSDP")
    assert cfg.fsdp_config["fsdp_version"] == 2
    assert cfg.fsdp_config["fsdp_reshard_after_forward"] == (CASES[case][0]["parallel"]["zero"] == 3)


def test_accelerate_config_single_and_ddp(tmp_path):
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import load_config_from_file
    s, _ = scen("train8b")
    for update, kind in (({"hardware": {"count": 1}, "parallel": {"zero": 0}}, "NO"),
                         ({"parallel": {"zero": 0}}, "MULTI_GPU")):
        p = tmp_path / f"{kind}.yaml"
        p.write_text(launch_files(s.replace(**update), "hf")["accelerate_config.yaml"])
        assert str(load_config_from_file(str(p)).distributed_type).endswith(kind)


@pytest.mark.parametrize("case,update", [("train8b", {}), ("qlora4090", {}),
                                         ("train8b", {"parallel": {"zero": 3, "offload": "optimizer+params"}}),
                                         ("train8b", {"parallel": {"zero": 2, "offload": "optimizer"}})])
def test_deepspeed_config_model(case, update, monkeypatch):
    pytest.importorskip("deepspeed")
    import deepspeed.runtime.config as dsc
    s, est = scen(case, **update)
    cfg = _body(launch_files(s, "deepspeed", estimate=est)["ds_config.json"])

    class DataParallelOnly:                 # DeepSpeed reads the dp world size from an mpu
        def get_data_parallel_world_size(self):
            return s.dp
    monkeypatch.setattr(dsc.dist, "get_rank", lambda *a, **k: 0)
    ds = dsc.DeepSpeedConfig(cfg, mpu=DataParallelOnly())
    assert ds.zero_optimization_stage == s.parallel.zero
    assert ds.train_batch_size == s.train.global_batch
    assert ds.gradient_clipping == 1.0
    off = ds.zero_config.offload_optimizer
    assert (off is not None and str(off.device).endswith("cpu")) == (s.parallel.offload != "none")
    if s.train.precision == "fp16":
        assert ds.float16_config.enabled and 2 ** ds.float16_config.initial_scale_power == 4096
    else:
        assert ds.bfloat16_config.enabled


def test_deepspeed_matches_training_arguments():
    files = files_for("train8b", "deepspeed")
    ds, ta = _body(files["ds_config.json"]), _body(files["training_args.json"])
    assert ta["deepspeed"] == "ds_config.json"
    assert ds["train_micro_batch_size_per_gpu"] == ta["per_device_train_batch_size"]
    assert ds["gradient_accumulation_steps"] == ta["gradient_accumulation_steps"]
    assert ds["train_batch_size"] == 8 * ta["per_device_train_batch_size"] * ta["gradient_accumulation_steps"]
    assert ds["optimizer"]["params"]["lr"] == ta["learning_rate"]
    assert ds["optimizer"]["params"]["betas"] == [ta["adam_beta1"], ta["adam_beta2"]]
    assert ds["gradient_clipping"] == ta["max_grad_norm"]


def test_torchrun_toml_and_scripts_parse():
    tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")
    files = files_for("train8b", "torchrun")
    cfg = tomllib.loads(files["train_fsdp2.toml"])
    assert cfg["parallelism"]["data_parallel_shard_degree"] == 8
    assert cfg["parallelism"]["fsdp_reshard_after_forward"] == "always"
    assert cfg["activation_checkpoint"]["mode"] == "selective"
    assert cfg["training"]["global_batch_size"] == 512 and cfg["training"]["seq_len"] == 8192
    for case, engine, fs in all_generated():
        for name, text in fs.items():
            if name.endswith(".py"):
                compile(text, name, "exec")
            if name.endswith(".toml"):
                tomllib.loads(text)
            if name.endswith(".yaml"):
                assert isinstance(yaml.safe_load(text), dict)


def test_shell_syntax():
    for case, engine, fs in all_generated():
        for name, text in fs.items():
            if name.endswith((".sh", ".sbatch")):
                r = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
                assert r.returncode == 0, (case, engine, name, r.stderr)


# ---- schema tests for engines too large to install here ---------------------------------------
# Flag schemas come from launch/data/engine_flags.csv, written by scripts/engine_facts_*.py from each
# engine's own source at a pinned version (see docs/launch.md), not from lists kept here.
# LLM API fields we write into extra_llm_api_options.yaml (tensorrt_llm/llmapi/llm_args.py)
TRTLLM_YAML_KEYS = {"dtype", "kv_cache_config", "cuda_graph_config"}
TRTLLM_KV_KEYS = {"free_gpu_memory_fraction", "dtype", "enable_block_reuse"}
_KIND = {"int": int, "float": float, "str": str, "list": str, "dict": str}


def _parser(engine):
    """An argparse parser with the engine's options from the table (deprecated options left out, so
    that a generated file using one fails; a plugin-only value is accepted, checked separately)."""
    from gpuplan.launch.facts import all_flags
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False, conflict_handler="resolve")
    flags = [f for f in all_flags() if f.engine == engine]
    plugin = {}
    for f in flags:
        if f.kind == "plugin":
            name, value = f.flag.split("=", 1)
            plugin.setdefault(name, []).append(value)
    for f in flags:
        if f.kind in ("plugin", "deprecated"):
            continue
        names = [f.flag, *f.aliases]
        if f.kind == "bool":
            p.add_argument(*names, action="store_true")
        elif f.kind == "choice":
            p.add_argument(*names, choices=[*f.choices, *plugin.get(f.flag, [])])
        else:
            p.add_argument(*names, type=_KIND.get(f.kind, str))
    return p


def _command(text, program, contains=""):
    """The argv of the line starting with `program`, with shell defaults substituted."""
    joined = re.sub(r" *\\\n *", " ", text)
    for name, default in re.findall(r'^(\w+)="\$\{\1:-([^}]*)\}"$', text, re.M):
        joined = joined.replace(f'"${name}"', default)
    line = next(ln for ln in joined.splitlines() if ln.strip().startswith(program) and contains in ln)
    line = re.sub(r"\$\{(\w+):-([^}]*)\}", r"\2", line)
    line = re.sub(r"\$\{(\w+):\?[^}]*\}", lambda m: "0" if m.group(1).endswith("RANK") else "10.0.0.1", line)
    line = line.replace('"${DATA_ARGS[@]}"', "--mock-data").replace('"$@"', "")
    return shlex.split(line)


def _parse(engine, argv, positional=0):
    ns, unknown = _parser(engine).parse_known_args(argv[positional:])
    assert not unknown, f"flags unknown to the engine: {unknown}"
    return ns


def test_vllm_schema():
    for case in ("serve8b", "serve70b_awq", "serve405b2n"):
        argv = _command(files_for(case, "vllm")["serve.sh"], "vllm serve")
        ns = _parse("vllm", argv, positional=3)
        assert ns.tensor_parallel_size * ns.pipeline_parallel_size * (ns.data_parallel_size or 1) == \
            CASES[case][0]["hardware"]["count"]
    ns = _parse("vllm", _command(files_for("serve8b", "vllm")["serve.sh"], "vllm serve"), 3)
    assert (ns.quantization, ns.kv_cache_dtype, ns.max_num_seqs, ns.max_model_len) == ("fp8", "fp8", 64, 2560)
    ns = _parse("vllm", _command(files_for("serve70b_awq", "vllm")["serve.sh"], "vllm serve"), 3)
    assert ns.quantization == "awq_marlin" and ns.enforce_eager and ns.kv_cache_dtype == "auto" and ns.max_model_len == 8192
    ns = _parse("vllm", _command(files_for("serve405b2n", "vllm")["serve.sh"], "vllm serve"), 3)
    assert ns.distributed_executor_backend == "ray"


def test_sglang_schema():
    for case in ("serve8b", "serve70b_awq", "serve405b2n"):
        ns = _parse("sglang", _command(files_for(case, "sglang")["serve.sh"], "python -m sglang"), 3)
        assert "/" in ns.model_path          # the HF id behind the registry name
    ns = _parse("sglang", _command(files_for("serve8b", "sglang")["serve.sh"], "python -m sglang"), 3)
    assert (ns.kv_cache_dtype, ns.quantization, ns.max_running_requests, ns.context_length) == ("fp8_e4m3", "fp8", 64, 2560)
    ns = _parse("sglang", _command(files_for("serve405b2n", "sglang")["serve.sh"], "python -m sglang"), 3)
    assert (ns.tp_size, ns.pp_size, ns.nnodes) == (8, 2, 2)
    ns = _parse("sglang", _command(files_for("serve70b_awq", "sglang")["serve.sh"], "python -m sglang"), 3)
    assert ns.cuda_graph_backend_decode == ns.cuda_graph_backend_prefill == "disabled"


def test_trtllm_schema():
    for case in ("serve8b", "serve70b_awq", "serve405b2n"):
        fs = files_for(case, "trtllm")
        ns = _parse("trtllm", _command(fs["serve.sh"], "trtllm-serve"), positional=2)
        assert ns.extra_llm_api_options == "extra_llm_api_options.yaml"
        bench = _command(fs["bench.sh"], "trtllm-bench", contains=" throughput ")
        _parse("trtllm-bench", bench, positional=4)
        opts = yaml.safe_load(fs["extra_llm_api_options.yaml"])
        assert set(opts) <= TRTLLM_YAML_KEYS and set(opts["kv_cache_config"]) <= TRTLLM_KV_KEYS
        assert 0 < opts["kv_cache_config"]["free_gpu_memory_fraction"] <= 0.95
    opts = yaml.safe_load(files_for("serve8b", "trtllm")["extra_llm_api_options.yaml"])
    assert opts["kv_cache_config"]["dtype"] == "fp8"
    # from the estimate: 64 GB of KV out of (capacity - everything else)
    assert opts["kv_cache_config"]["free_gpu_memory_fraction"] == round(64e9 / (85_520_809_984 - 12e9), 2)
    assert yaml.safe_load(files_for("serve70b_awq", "trtllm")["extra_llm_api_options.yaml"])["cuda_graph_config"] is None


def test_llamacpp_schema():
    ns = _parse("llama.cpp", _command(files_for("gguf4090", "llama.cpp")["serve.sh"], "llama-server"), 1)
    # options named by their long spelling in llama.cpp's common/arg.cpp (-fa = --flash-attn, -np = --parallel, ...)
    assert (ns.cache_type_k, ns.cache_type_v, ns.flash_attn, ns.parallel) == ("q8_0", "q8_0", "on", 4)
    assert ns.ctx_size == 4 * (4096 + 512)          # -c is the total over all slots
    # --gpu-layers takes a number, "auto" or "all": a string to the parser
    assert ns.gpu_layers == "999" and ns.model.endswith("Q4_K_M.gguf")
    ns = _parse("llama.cpp", _command(files_for("serve8b", "llama.cpp_f16")["serve.sh"], "llama-server"), 1)
    assert ns.cache_type_k == "f16" and ns.model.endswith("BF16.gguf")


def test_megatron_schema():
    argv = _command(files_for("train70b4n", "megatron")["train_megatron.sh"], "torchrun")
    script = next(i for i, a in enumerate(argv) if a.endswith("pretrain_gpt.py"))
    assert argv[:script] == ["torchrun", "--nnodes", "4", "--nproc-per-node", "8", "--rdzv-backend", "c10d",
                             "--rdzv-endpoint", "10.0.0.1:29500", "--rdzv-id", "gpuplan"]
    ns = _parse("megatron", argv, positional=script + 1)
    assert (ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size) == (4, 2)
    assert ns.num_layers_per_virtual_pipeline_stage == 80 // (2 * 2)
    assert ns.sequence_parallel and ns.use_distributed_optimizer and ns.bf16
    assert (ns.recompute_granularity, ns.recompute_method, ns.recompute_num_layers) == ("full", "uniform", 1)
    assert (ns.micro_batch_size, ns.global_batch_size, ns.seq_length) == (1, 1024, 4096)
    assert ns.group_query_attention and ns.num_query_groups == 8 and ns.swiglu and ns.use_rope_scaling
    ns = _parse("megatron", _command(files_for("train8b", "megatron")["train_megatron.sh"], "torchrun"),
                positional=5)
    assert ns.recompute_granularity == "selective" and ns.tensor_model_parallel_size == 1


def test_megatron_grad_reduce_dtype_flag():
    """train.grad_reduce_dtype bf16 -> --grad-reduce-in-bf16 (Megatron-LM arguments.py: with --bf16 the fp32
    accumulation is on unless this flag is given); auto writes neither flag."""
    s, est = scen("train8b")
    for dtype, want in (("bf16", True), ("auto", False)):
        text = launch_files(s.replace(framework="megatron", train={"grad_reduce_dtype": dtype}), "megatron", estimate=est)["train_megatron.sh"]
        ns = _parse("megatron", _command(text, "torchrun"), positional=5)
        assert bool(ns.grad_reduce_in_bf16) is want
        assert not ns.accumulate_allreduce_grads_in_fp32


def test_megatron_activation_fusion_flag():
    """train.activation_fusion false -> --no-bias-swiglu-fusion (Megatron-LM arguments.py: the SwiGLU fusion is on
    unless this flag is given, and sets TransformerConfig.bias_activation_fusion); true writes nothing."""
    s, est = scen("train8b")
    for fused in (True, False):
        text = launch_files(s.replace(framework="megatron", train={"activation_fusion": fused}), "megatron",
                            estimate=est)["train_megatron.sh"]
        ns = _parse("megatron", _command(text, "torchrun"), positional=5)
        assert bool(ns.no_bias_swiglu_fusion) is (not fused)


def test_megatron_master_weight_remainders_flag():
    """train.master_weight_remainders -> --use-precision-aware-optimizer (Megatron's TE FusedAdam path, whose
    store_param_remainders is on by default); off writes nothing."""
    s, est = scen("train8b")
    for on in (True, False):
        scn = s.replace(framework="megatron", parallel={"zero": 1}, train={"master_weight_remainders": on})
        text = launch_files(scn, "megatron", estimate=est)["train_megatron.sh"]
        ns = _parse("megatron", _command(text, "torchrun"), positional=5)
        assert bool(ns.use_precision_aware_optimizer) is on and ns.use_distributed_optimizer


def test_slurm_sbatch():
    fs = files_for("train70b4n", "slurm")
    sb = fs["slurm.sbatch"]
    assert "train_megatron.sh" in fs          # framework megatron -> wraps the megatron engine
    for line in ("#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8"):
        assert line in sb
    assert "#SBATCH --time=1-00:00:00" in sb   # 100 h x 1.2 + 1 h = 121 h > the 24 h limit: 6 chained jobs
    assert 'CHUNKS="${CHUNKS:-6}"' in fs["submit.sh"]
    assert 'MASTER_ADDR="$(scontrol show hostnames' in sb and "bash train_megatron.sh" in sb
    s, _ = scen("train70b4n")
    wrapped = launch_files(s.replace(parallel={"tp": 1, "pp": 1, "vpp": 1, "zero": 3, "dp": 32}), "slurm", inner="torchrun")
    assert "train_fsdp2.py" in wrapped and "--rdzv-backend c10d" in wrapped["launch.sh"]


# ---- unsupported combinations and input errors ----------------------------------------------

@pytest.mark.parametrize("case,engine,updates,needle", [
    ("train8b", "llama.cpp", {}, "torchrun, hf, deepspeed, megatron"),
    ("train8b", "vllm", {}, "train"),
    ("serve8b", "megatron", {}, "megatron"),
    ("serve8b", "torchrun", {}, "vllm"),
    ("serve8b", "trtllm", {"hardware": {"gpu": "mi300x"}}, "vllm, sglang"),
    # tp with DDP (zero 0): torchtitan refuses more than one parallel dimension under DDP
    ("train8b", "torchrun", {"parallel": {"tp": 2, "dp": 4, "zero": 0}}, "megatron"),
    ("train8b", "hf", {"parallel": {"pp": 2, "dp": 4}}, "megatron"),
    ("train8b", "torchrun", {"train": {"method": "qlora"}}, "hf, deepspeed"),
    ("train8b", "megatron", {"train": {"method": "lora"}}, "hf"),
    ("serve8b", "llama.cpp", {}, "vllm"),                           # fp8 weights are not GGUF
    ("gguf4090", "vllm", {}, "llama.cpp"),
    ("serve8b", "vllm", {"infer": {"kv_cache": "q8_0"}}, "llama.cpp"),
    ("train8b", "hf", {"train": {"precision": "fp8"}}, "megatron"),
    ("train8b", "deepspeed", {"parallel": {"zero": 2, "offload": "optimizer+params"}}, "zero: 3"),
    ("train8b", "hf", {"hardware": {"gpu": "v100-sxm2-32gb"}}, "fp16"),
])
def test_unsupported(case, engine, updates, needle):
    s, _ = scen(case)
    if updates:
        s = s.replace(**updates)
    with pytest.raises(UnsupportedError) as err:
        launch_files(s, engine)
    assert needle in err.value.message


def test_input_errors():
    s, _ = scen("train8b")
    with pytest.raises(InputError) as err:
        launch_files(s, "vlm")
    assert "vllm" in err.value.message
    with pytest.raises(InputError) as err:
        launch_files(s.replace(train={"global_batch": 100}), "hf")
    assert "multiple of 8" in err.value.message
    assert set(ENGINES) == {"torchrun", "hf", "deepspeed", "megatron", "trl", "verl", "openrlhf", "llama-factory", "axolotl", "unsloth", "mlx-lm", "vllm", "sglang", "trtllm",
                            "llama.cpp", "slurm"}


# ---- API and CLI ------------------------------------------------------------------------------

def test_write_launch(tmp_path):
    s, est = scen("serve8b")
    paths = write_launch(s, "trtllm", tmp_path / "out", estimate=est)
    assert sorted(p.name for p in paths) == ["bench.sh", "extra_llm_api_options.yaml", "serve.sh"]
    assert os.access(tmp_path / "out" / "serve.sh", os.X_OK)


def test_cli(tmp_path, capsys):
    from gpuplan.launch import cli
    scen_file = tmp_path / "s.yaml"
    scen_file.write_text(yaml.safe_dump(CASES["serve8b"][0]))
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["launch", str(scen_file), "--engine", "vllm", "--json", "--no-estimate"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)["result"]
    assert out["engine"] == "vllm" and out["notes"] == []
    assert list(out["files"]) == ["serve.sh"] and "not estimated" in out["files"]["serve.sh"]
    args = parser.parse_args(["launch", str(scen_file), "--engine", "sglang", "--out", str(tmp_path / "o")])
    assert args.func(args) == 0
    assert (tmp_path / "o" / "serve.sh").exists()


# ---- smoke runs of the generated training scripts (CPU) ----------------------------------------

smoke = pytest.mark.skipif(os.environ.get("GPUPLAN_LAUNCH_SMOKE") != "1", reason="set GPUPLAN_LAUNCH_SMOKE=1 (~30 s)")


@smoke
def test_fsdp2_script_runs_hsdp_on_cpu(tmp_path):
    # hybrid sharding: FSDP over 2 ranks, 2 replicas, on the script's 2-D mesh
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    s, _ = scen("train8b")
    write_launch(s.replace(hardware={"count": 4}, parallel={"dp": 4, "shard_group": 2}, train={"global_batch": 4}),
                 "torchrun", tmp_path)
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
                        "train_fsdp2.py", "--smoke"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "step 2/2 loss" in r.stdout


@smoke
def test_fsdp2_script_runs_on_cpu(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    s, _ = scen("train8b")
    write_launch(s.replace(hardware={"count": 2}, train={"global_batch": 2}), "torchrun", tmp_path)
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        "train_fsdp2.py", "--smoke"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "step 2/2 loss" in r.stdout


@smoke
def test_hf_script_runs_on_cpu(tmp_path):
    pytest.importorskip("peft")
    s, _ = scen("qlora4090")
    write_launch(s.replace(train={"method": "lora"}), "hf", tmp_path)
    r = subprocess.run([sys.executable, "train_hf.py", "--smoke"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "train_loss" in r.stdout + r.stderr


def test_vllm_engine_budget_knobs_reach_the_command():
    """The estimate's start-up profile uses infer.max_num_seqs / max_num_batched_tokens; the launched
    server must run with the same values."""
    from gpuplan.launch import launch_files
    from gpuplan.scenario import scenario_from_dict
    scn = scenario_from_dict({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm"},
                              "infer": {"concurrency": 8, "max_num_seqs": 64, "max_num_batched_tokens": 4096}})
    cmd = launch_files(scn, "vllm")["serve.sh"]
    ns = _parse("vllm", _command(cmd, "vllm serve"), 3)
    assert getattr(ns, "max_num_seqs") == 64 and getattr(ns, "max_num_batched_tokens") == 4096


@smoke
def test_fsdp2_script_resumes_from_its_checkpoint(tmp_path):
    """issue 17: a restart continues from the newest step-N checkpoint instead of step 1."""
    pytest.importorskip("torch")
    s, _ = scen("train8b")
    write_launch(s.replace(hardware={"count": 2}, train={"global_batch": 2}), "torchrun", tmp_path)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "train_fsdp2.py",
           "--smoke"]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "outputs" / "checkpoint" / "step-2" / ".metadata").exists()
    r = subprocess.run(cmd + ["--steps", "3"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resumed from" in r.stdout and "step-2" in r.stdout
    assert "step 3/3 loss" in r.stdout and "step 1/3" not in r.stdout


def test_megatron_moe_permute_fusion_and_router_dtype_flags():
    """train.moe_permute_fusion (default true) -> --moe-permute-fusion on the all-to-all dispatcher (Megatron-LM
    arguments.py: off unless given); train.moe_router_dtype fp64 -> --moe-router-dtype fp64; "model" writes none."""
    s, est = scen("train8b")
    base = s.replace(model="qwen3-30b-a3b", framework="megatron", parallel={"tp": 1, "pp": 1, "vpp": 1, "ep": 8})
    for fused, dtype in ((True, "model"), (False, "fp64")):
        scn = base.replace(train={"moe_permute_fusion": fused, "moe_router_dtype": dtype})
        text = launch_files(scn, "megatron", estimate=est)["train_megatron.sh"]
        ns = _parse("megatron", _command(text, "torchrun"), positional=5)
        assert bool(ns.moe_permute_fusion) is fused
        assert ns.moe_router_dtype == (None if dtype == "model" else dtype)
