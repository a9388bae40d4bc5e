"""The engines' own parsers over every generated file in tests/snapshots/launch (issue 17).

Where an engine installs on CPU its real configuration code reads each snapshot file: transformers'
HfArgumentParser(TrainingArguments) and BitsAndBytesConfig, peft's LoraConfig, accelerate's
load_config_from_file, DeepSpeed's DeepSpeedConfig, transformers' AutoConfig for model_config.json,
Python's compile() for the scripts and `bash -n` for the shell files. A test is skipped (not
passed) when its package is absent. vLLM, SGLang, TensorRT-LLM, llama.cpp and Megatron-LM do not
install here (GPU builds); their command lines are checked against the engine-facts table in
tests/test_launch_facts.py, and scripts/check_launch_with_engines.sh runs their real parsers where
they are installed."""
from __future__ import annotations

import re

import json
import shutil
import subprocess

import pytest
import yaml
from launch_snapshots import snapshot_files

FILES = snapshot_files()


def of(name):
    chosen = [(s, t) for s, n, t in FILES if n == name]
    return pytest.mark.parametrize("snap,text", chosen, ids=[s for s, _ in chosen])


def body(text):
    return {k: v for k, v in json.loads(text).items() if k != "_gpuplan"}


def sibling(snap, name):
    return next(t for s, n, t in FILES if s == snap and n == name)


@of("training_args.json")
def test_training_arguments(snap, text, tmp_path):
    transformers = pytest.importorskip("transformers")
    args = body(text)
    args.pop("deepspeed", None)         # DeepSpeed's config is read by DeepSpeedConfig below
    args["output_dir"] = str(tmp_path / args["output_dir"])
    # use_cpu: bf16/fp16 validation refuses a machine without a GPU; nothing else is changed
    (ta,) = transformers.HfArgumentParser(transformers.TrainingArguments).parse_dict({**args, "use_cpu": True})
    assert ta.per_device_train_batch_size == args["per_device_train_batch_size"]
    assert ta.activation_checkpointing == args.get("activation_checkpointing", False)


@of("lora_config.json")
def test_lora_config(snap, text):
    peft = pytest.importorskip("peft")
    cfg = peft.LoraConfig(**body(text))
    assert cfg.r == body(text)["r"]


@of("bnb_config.json")
def test_bitsandbytes_config(snap, text):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BitsAndBytesConfig(**body(text))
    assert cfg.load_in_4bit and cfg.bnb_4bit_quant_type == "nf4"


@of("accelerate_config.yaml")
def test_accelerate_config(snap, text, tmp_path):
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import load_config_from_file
    path = tmp_path / "accelerate_config.yaml"
    path.write_text(text)
    cfg = load_config_from_file(str(path))
    assert cfg.num_processes == yaml.safe_load(text)["num_processes"]


@of("ds_config.json")
def test_deepspeed_config(snap, text, monkeypatch):
    pytest.importorskip("deepspeed")
    import deepspeed.runtime.config as dsc
    cfg = body(text)
    if "tensor_parallel" in cfg:
        # AutoTP: no train_batch_size (DeepSpeed would check it against the whole world, tp included,
        # when HF passes no mpu); the header states micro x accumulation x dp = the global batch
        m = re.search(r"global batch (\d+) x (\d+) x dp (\d+) = (\d+)", text)
        assert m and int(m[1]) * int(m[2]) * int(m[3]) == int(m[4])
        assert (int(m[1]), int(m[2])) == (cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"])
        dp = int(m[3])
    else:
        dp = cfg["train_batch_size"] // (cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"])

    class DataParallelOnly:                 # DeepSpeed reads the data-parallel world size from an mpu
        def get_data_parallel_world_size(self):
            return dp
    monkeypatch.setattr(dsc.dist, "get_rank", lambda *a, **k: 0)
    ds = dsc.DeepSpeedConfig(cfg, mpu=DataParallelOnly())
    assert ds.train_batch_size == cfg.get("train_batch_size", ds.train_micro_batch_size_per_gpu
                                          * ds.gradient_accumulation_steps * dp)
    assert ds.zero_optimization_stage == cfg["zero_optimization"]["stage"]
    if "tensor_parallel" in cfg:
        assert ds.tensor_parallel_config.autotp_size == cfg["tensor_parallel"]["autotp_size"] > 1


@of("model_config.json")
def test_model_config(snap, text):
    transformers = pytest.importorskip("transformers")
    cfg = body(text)
    config = transformers.AutoConfig.for_model(**cfg)
    assert config.num_hidden_layers == cfg["num_hidden_layers"]


@pytest.mark.parametrize("snap,name,text", [f for f in FILES if f[1].endswith(".py")],
                         ids=[f"{f[0]}/{f[1]}" for f in FILES if f[1].endswith(".py")])
def test_python_scripts_compile(snap, name, text):
    compile(text, name, "exec")


@pytest.mark.parametrize("snap,name,text", [f for f in FILES if f[1].endswith((".sh", ".sbatch"))],
                         ids=[f"{f[0]}/{f[1]}" for f in FILES if f[1].endswith((".sh", ".sbatch"))])
def test_shell_files_parse(snap, name, text, tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    path = tmp_path / name
    path.write_text(text)
    r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
