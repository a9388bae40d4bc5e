"""Issue 17: launch files for the model-parallel plans the search returns — torchtitan FSDP2 + TP (2-D)
and FSDP2 + TP + PP (3-D) job files for torchtitan v0.2.2, DeepSpeed AutoTP (with ZeRO-3, DeepSpeed
0.19) — and a clear refusal, with nothing written, for a layout the engine cannot run.

Expected values are hand arithmetic on the plans below; valid keys come from the engine facts table
(launch/data/engine_flags.csv, extracted from torchtitan's source), not from the code under test."""
from __future__ import annotations

import json
import tomllib

import pytest

from gpuplan.errors import UnsupportedError
from gpuplan.launch import launch_files, write_launch
from gpuplan.launch.facts import engine_flags
from gpuplan.scenario import scenario_from_dict


def _scn(model="llama-3.1-70b", framework="torchtitan", count=64, par=None, **train):
    tr = {"seq_len": 8192, "micro_batch": 1, "global_batch": 64, "tokens": 1e11, **train}
    return scenario_from_dict({"model": model, "task": "train", "framework": framework,
                               "hardware": {"gpu": "h100-sxm", "count": count, "gpus_per_node": 8},
                               "parallel": par or {"tp": 8, "zero": 3}, "train": tr}, "test")


def test_fsdp2_tp_2d_job_file():
    # 64 GPUs, tp 8 -> dp 8 FSDP shards; 64 sequences / (1 x 8) = 8 accumulation steps, local batch 1
    f = launch_files(_scn(), "torchrun")
    assert set(f) == {"torchtitan.toml", "launch.sh"}
    d = tomllib.loads(f["torchtitan.toml"])
    assert d["model"]["name"] == "llama3" and d["model"]["flavor"] == "70B"
    assert d["parallelism"]["tensor_parallel_degree"] == 8 and d["parallelism"]["data_parallel_shard_degree"] == 8
    assert d["parallelism"]["pipeline_parallel_degree"] == 1
    assert d["training"]["local_batch_size"] == 1 and d["training"]["global_batch_size"] == 64
    assert d["checkpoint"]["enable"] is True
    assert "-m torchtitan.train" in " ".join(f["launch.sh"].split()) and "--job.config_file torchtitan.toml" in f["launch.sh"]
    keys = engine_flags("torchtitan")
    assert all(f"{s}.{k}" in keys for s, kv in d.items() for k in kv)


def test_fsdp2_tp_pp_3d_job_file():
    # 64 GPUs, tp 8 x pp 4 -> dp 2; 64 / (1 x 2) = 32 micro-batches per step, all in one local batch
    # of 32 cut into micro-batches of 1 (torchtitan's PP), >= 4 stages
    d = tomllib.loads(launch_files(_scn(par={"tp": 8, "pp": 4, "zero": 3}), "torchrun")["torchtitan.toml"])
    p, t = d["parallelism"], d["training"]
    assert (p["tensor_parallel_degree"], p["pipeline_parallel_degree"], p["data_parallel_shard_degree"]) == (8, 4, 2)
    assert p["pipeline_parallel_microbatch_size"] == 1 and t["local_batch_size"] == 32
    assert t["global_batch_size"] // (t["local_batch_size"] * p["data_parallel_shard_degree"]) == 1
    assert t["local_batch_size"] // p["pipeline_parallel_microbatch_size"] >= p["pipeline_parallel_degree"]
    assert p["pipeline_parallel_schedule"] in engine_flags("torchtitan")["parallelism.pipeline_parallel_schedule"].choices \
        or engine_flags("torchtitan")["parallelism.pipeline_parallel_schedule"].kind == "str"


def _refused(scn, engine, tmp_path, *words):
    with pytest.raises(UnsupportedError) as e:
        write_launch(scn, engine, tmp_path / "out")
    assert not (tmp_path / "out").exists()                    # nothing written
    text = str(e.value)
    assert all(w in text for w in words), text


def test_torchtitan_refuses_what_it_cannot_run(tmp_path):
    # an architecture torchtitan v0.2.2 does not register (Mistral 7B: 32 layers, 14336 MLP, 32k vocabulary)
    _refused(_scn(model="mistral-7b", count=8, par={"tp": 8, "zero": 0}), "torchrun", tmp_path / "a",
             "torchtitan", "megatron")
    # 1F1B needs >= pp micro-batches: 64 GPUs, tp 8, pp 4, dp 2, global batch 4 -> 2 micro-batches < 4
    _refused(_scn(par={"tp": 8, "pp": 4, "zero": 3}, global_batch=4), "torchrun", tmp_path / "b", "1F1B", "2 < 4")
    # DDP with more than one parallel dimension
    _refused(_scn(par={"tp": 8, "zero": 0}), "torchrun", tmp_path / "c", "DDP")
    # LoRA
    _refused(_scn(model="llama-3.1-8b", count=8, par={"tp": 2, "zero": 3}, method="lora"), "torchrun",
             tmp_path / "d", "LoRA")


def test_deepspeed_autotp_with_zero3():
    # 16 GPUs, tp 4 -> dp 4; micro-batch 2: 64 / (2 x 4) = 8 accumulation steps
    f = launch_files(_scn(model="llama-3.1-8b", framework="deepspeed", count=16, par={"tp": 4, "zero": 3},
                          seq_len=4096, micro_batch=2), "deepspeed")
    cfg = {k: v for k, v in json.loads(f["ds_config.json"]).items() if k != "_gpuplan"}
    assert cfg["tensor_parallel"] == {"autotp_size": 4}
    assert cfg["zero_optimization"]["stage"] == 3
    assert cfg["train_micro_batch_size_per_gpu"] == 2 and cfg["gradient_accumulation_steps"] == 8
    assert "train_batch_size" not in cfg                     # DeepSpeed would check it against dp x tp ranks
    assert "0.19.8" in f["ds_config.json"]


def test_deepspeed_autotp_refusals(tmp_path):
    # pipeline parallelism is not AutoTP's
    _refused(_scn(model="llama-3.1-8b", framework="deepspeed", count=16, par={"tp": 4, "pp": 2, "zero": 1},
                  seq_len=4096), "deepspeed", tmp_path / "a", "pp=2")
    # MoE under DeepSpeed TP (transformers refuses the weight conversions)
    _refused(_scn(model="qwen3-30b-a3b", framework="deepspeed", count=16, par={"tp": 4, "zero": 3},
                  seq_len=4096), "deepspeed", tmp_path / "b", "mixture-of-experts")


def test_plans_the_search_returns_launch_or_are_refused_cleanly(tmp_path):
    # every model-parallel plan recommend returns for these jobs either gets files from its framework's
    # engine or a clear refusal that writes nothing
    from gpuplan.search import recommend
    engine = {"torchtitan": "torchrun", "deepspeed": "deepspeed", "megatron": "megatron", "hf": "hf"}
    rec = recommend({"model": "llama-3.1-70b", "task": "train", "hardware": {"gpu": "h100-sxm"},
                     "train": {"seq_len": 8192, "tokens": 1e11}}, top=20, progress=False, max_gpus=512)
    frameworks = set()
    for i, plan in enumerate(list(rec.plans) + list(rec.pareto)):
        scn = plan.scenario
        fw = scn.framework
        frameworks.add(fw)
        out = tmp_path / f"p{i}"
        try:
            paths = write_launch(scn, engine.get(fw, "hf"), out)
            assert paths and all(p.exists() for p in paths)
        except UnsupportedError as e:
            assert not out.exists() and str(e)
            # the search offers torchtitan and DeepSpeed AutoTP only where their launch files can be
            # written (search/frameworks.model_reason)
            assert fw not in ("torchtitan", "deepspeed"), (plan.summary, str(e))
    assert frameworks & {"torchtitan", "megatron"}


def test_search_offers_torchtitan_only_for_architectures_it_registers():
    from gpuplan.models import get_model
    from gpuplan.search import frameworks as F
    par = {"tp": 4, "pp": 1, "cp": 1, "ep": 1}
    titan = lambda name: "torchtitan" in {o.framework for o in F.options(None, par, 8, get_model(name))[0]}
    assert titan("llama-3.1-70b") and titan("qwen3-8b")
    assert not titan("mistral-7b") and not titan("qwen2.5-7b")
    opts, why = F.options(None, par, 8, get_model("qwen3-30b-a3b"))
    assert "deepspeed" not in {o.framework for o in opts} and any("mixture-of-experts" in w for w in why)


def test_megatron_optimizer_offload_flags_from_the_table():
    # the search offers Megatron's --optimizer-cpu-offload; core_v0.19.0 validate_args requires
    # --use-precision-aware-optimizer with it, and that flag the distributed optimizer
    flags = engine_flags("megatron")
    scn = _scn(framework="megatron", count=32, par={"tp": 4, "pp": 4, "zero": 1, "offload": "optimizer"},
               seq_len=4096)
    sh = launch_files(scn, "megatron")["train_megatron.sh"]
    for flag in ("--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--use-distributed-optimizer"):
        assert flag in flags and flag in sh
