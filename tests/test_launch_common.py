"""Launch plumbing shared by all engines: engine names, the plan context (nodes, batches, steps),
headers, shell/TOML/JSON helpers, write_launch's overwrite guard and the CLI's does-not-fit refusal.

Expected values are worked out by hand from the scenarios written here (see the comments)."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

import pytest
import yaml

from gpuplan.errors import InputError, UnsupportedError
from gpuplan.launch import launch_files, write_launch
from gpuplan.launch._common import (estimate_lines, gpu_info, json_text, make_plan, shell_command, strip_meta,
                                    toml_text, torchrun_argv)
from gpuplan.launch._train import grad_scaler, load_dtype, warmup_steps
from gpuplan.scenario import scenario_from_dict

if sys.version_info >= (3, 11):
    import tomllib
else:                                              # pragma: no cover
    tomllib = pytest.importorskip("tomli")

GIB = 2 ** 30


def train(count=8, gpn=None, parallel=None, **train_kw):
    hw = {"gpu": "h100-sxm", "count": count}
    if gpn:
        hw["gpus_per_node"] = gpn
    t = {"seq_len": 4096, "micro_batch": 2, "global_batch": 64}
    t.update(train_kw)
    return scenario_from_dict({"model": "llama-3.1-8b", "task": "train", "hardware": hw,
                               "parallel": parallel or {"zero": 3}, "train": t})


def serve(count=1, **infer_kw):
    return scenario_from_dict({"model": "llama-3.1-8b", "task": "infer",
                               "hardware": {"gpu": "h100-sxm", "count": count}, "infer": infer_kw})


# ---- engine names --------------------------------------------------------------------------------

@pytest.mark.parametrize("alias,engine", [("FSDP", "torchrun"), ("fsdp2", "torchrun"), ("accelerate", "hf"),
                                          ("Megatron-LM", "megatron"), (" sbatch ", "slurm")])
def test_training_aliases_give_the_same_files(alias, engine):
    s = train()
    assert launch_files(s, alias) == launch_files(s, engine)


@pytest.mark.parametrize("alias,engine", [("llamacpp", "llama.cpp"), ("llama-cpp", "llama.cpp"),
                                          ("TensorRT-LLM", "trtllm"), ("VLLM", "vllm")])
def test_serving_aliases_give_the_same_files(alias, engine):
    s = serve(weights="bf16")
    assert launch_files(s, alias) == launch_files(s, engine)


@pytest.mark.parametrize("typo,match", [("deepsped", "deepspeed"), ("megatorn", "megatron"), ("sglan", "sglang"),
                                        ("torchrn", "torchrun"), ("slrum", "slurm")])
def test_unknown_engine_names_close_matches(typo, match):
    with pytest.raises(InputError) as err:
        launch_files(train(), typo)
    assert match in err.value.matches
    assert f"'{typo}'" in err.value.message and "Fix:" in err.value.message


def test_inner_engine_only_for_slurm():
    with pytest.raises(InputError) as err:
        launch_files(train(), "hf", inner="torchrun")
    assert "slurm" in err.value.message
    with pytest.raises(InputError) as err:
        launch_files(train(), "slurm", inner="deepspeeed")
    assert "deepspeed" in err.value.matches


# ---- the plan context ------------------------------------------------------------------------------

@pytest.mark.parametrize("count,gpn,nodes,per_node", [(4, None, 1, 4), (8, None, 1, 8), (16, None, 2, 8),
                                                      (32, 8, 4, 8), (8, 4, 2, 4), (2, 4, 1, 2)])
def test_nodes_and_processes_per_node(count, gpn, nodes, per_node):
    plan = make_plan(train(count=count, gpn=gpn, global_batch=64), "torchrun", None)
    assert (plan.nodes, plan.procs_per_node, plan.multi_node) == (nodes, per_node, nodes > 1)


def test_partial_nodes_are_refused():
    with pytest.raises(InputError) as err:
        make_plan(train(count=12, gpn=8, global_batch=48), "torchrun", None)
    assert "hardware.count" in err.value.message and "whole nodes" in err.value.message


def test_batch_arithmetic_and_steps():
    # 8 GPUs, zero 3, dp 8; micro 2, global 64 -> accum 64 / (2*8) = 4
    # tokens 1e9 / (64 * 4096 = 262144 per step) = 3814.7 -> 3815 steps
    plan = make_plan(train(tokens=1e9), "hf", None)
    assert (plan.micro_batch, plan.global_batch, plan.grad_accum, plan.train_steps) == (2, 64, 4, 3815)
    assert warmup_steps(plan) == 3815 // 20 == 190
    # no global batch: one micro-batch per GPU per step -> 2 * 8 = 16, accum 1; no tokens -> no steps
    plan = make_plan(train(global_batch=None), "hf", None)
    assert (plan.global_batch, plan.grad_accum, plan.train_steps) == (16, 1, None)
    assert warmup_steps(plan) == 1000 // 20


def test_global_batch_not_divisible_is_an_input_error():
    with pytest.raises(InputError):                       # 60 is not a multiple of micro 2 x dp 8 = 16
        launch_files(train(global_batch=60), "deepspeed")


@pytest.mark.parametrize("tokens,interval", [(1e7, 100), (1e9, 190), (1e11, 2000)])
def test_grad_scaler_growth_interval_follows_run_length(tokens, interval):
    # steps = ceil(tokens / 262144): 39 -> 39//20=1 -> clamp 100; 3815 -> 190; 381470 -> clamp 2000
    g = grad_scaler(make_plan(train(tokens=tokens, precision="fp16"), "hf", None))
    assert g == {"init_scale": 4096, "growth_factor": 2, "backoff_factor": 0.5, "growth_interval": interval}


@pytest.mark.parametrize("method,precision,master,dtype", [
    ("full", "bf16", True, "float32"), ("full", "bf16", False, "bfloat16"), ("full", "fp32", False, "float32"),
    ("lora", "bf16", True, "bfloat16"), ("lora", "fp16", True, "float16"), ("lora", "fp32", True, "float32"),
    ("qlora", "fp16", True, "float16"), ("qlora", "bf16", True, "bfloat16")])
def test_load_dtype(method, precision, master, dtype):
    s = train(method=method, precision=precision, master_weights=master)
    assert load_dtype(make_plan(s, "hf", None)) == dtype


def test_plan_line_names_the_layout():
    line = make_plan(train(count=16, parallel={"tp": 2, "pp": 2, "zero": 1}), "megatron", None).plan_line
    assert "16x h100-sxm" in line and "2 nodes x 8" in line and "dp4 tp2 pp2" in line and "zero 1" in line


def test_gpu_info_facts():
    h100, a100, v100 = gpu_info("h100-sxm"), gpu_info("a100-sxm-80gb"), gpu_info("v100-sxm2-32gb")
    assert h100.has_fp8 and h100.has_bf16 and h100.vendor.upper() == "NVIDIA"
    assert a100.has_bf16 and not a100.has_fp8
    assert not v100.has_bf16
    assert gpu_info("no-such-gpu-9000") is None


# ---- headers -----------------------------------------------------------------------------------------

def test_estimate_lines_without_estimate():
    (line,) = estimate_lines(None)
    assert "not estimated" in line


def test_estimate_lines_values():
    est = {"memory": {"peak_bytes_per_gpu": 90 * GIB, "capacity_bytes_per_gpu": 80 * GIB, "fits": False,
                      "components": {"weights": 16 * GIB, "kv_cache": 0}},
           "performance": {"step_time_s": 0.5, "time_to_train_s": 7200.0, "mfu": 0.375},
           "cost": {"usd_per_hour": 98.5, "usd_total": None}}
    lines = estimate_lines(est)
    assert lines[0] == "predicted memory: 90.00 GiB peak per GPU of 80.00 GiB usable (DOES NOT FIT)"
    assert lines[1] == "  breakdown (GiB): weights 16.00"          # zero components are left out
    assert lines[2] == "predicted speed: step 0.500 s, MFU 37.5%, time to train 2.0 h"
    assert lines[3] == "predicted cost: $98.50/h"


def test_estimate_lines_carry_the_error_bars():
    # every surface shows its figures with their error bar: the launch header too
    bar = {"quantity": "speed", "category": "training tokens/s", "relative_typical": 0.042, "relative_p90": 0.12,
           "runs": 181, "sources": 9, "basis": "held-out"}
    est = {"memory": {"peak_bytes_per_gpu": 40 * GIB, "capacity_bytes_per_gpu": 80 * GIB, "fits": True,
                      "uncertainty": {"quantity": "memory", "category": "inference", "relative_typical": None,
                                      "relative_p90": None, "runs": 0, "sources": 0, "basis": "none"}},
           "performance": {"step_time_s": 0.5, "uncertainty": bar},
           "cost": {"usd_per_hour": 98.5, "uncertainty": {**bar, "quantity": "cost"}}}
    lines = estimate_lines(est)
    assert lines[0].endswith("(fits); no error bar: inference")
    assert lines[1] == "predicted speed: step 0.500 s; error bar ±4 % typical, ±12 % P90 (training tokens/s, 181 held-out runs, 9 sources)"
    assert lines[2].startswith("predicted cost: $98.50/h; error bar ±4 % typical")


@pytest.mark.parametrize("seconds,text", [(59.0, "59 s"), (5400.0, "1.5 h"), (3 * 86400.0, "3.0 days")])
def test_time_to_train_units(seconds, text):
    lines = estimate_lines({"memory": {}, "performance": {"time_to_train_s": seconds}})
    assert lines[-2] == f"predicted speed: time to train {text}"
    assert lines[-1] == "predicted cost: not estimated"
    assert lines[0].endswith("n/a usable")                # no fits key: no verdict either


def test_json_text_meta_first_and_strippable():
    plan = make_plan(train(), "deepspeed", None)
    data = json.loads(json_text(plan, {"a": 1, "b": [1, 2]}, notes=["n1"]))
    assert list(data)[0] == "_gpuplan"
    assert data["_gpuplan"]["engine"] == "deepspeed" and data["_gpuplan"]["notes"] == ["n1"]
    assert data["_gpuplan"]["predicted"] == "not estimated"
    assert strip_meta(data) == {"a": 1, "b": [1, 2]}


# ---- shell and TOML helpers -----------------------------------------------------------------------

def test_shell_command_one_flag_per_line_and_quoting():
    text = shell_command(["vllm", "serve", '"$MODEL"', "--port", '"${PORT:-8000}"', "--name", "a b",
                          "--enforce-eager", "--tp", "2"])
    lines = text.split(" \\\n  ")
    assert lines == ['vllm serve "$MODEL"', '--port "${PORT:-8000}"', "--name 'a b'", "--enforce-eager", "--tp 2"]
    assert shlex.split(text.replace("\\\n", "")) == ["vllm", "serve", "$MODEL", "--port", "${PORT:-8000}",
                                                      "--name", "a b", "--enforce-eager", "--tp", "2"]


def test_shell_command_python_module_stays_on_first_line():
    text = shell_command(["python", "-m", "pkg.mod", "--x", "1"])
    assert text.split(" \\\n  ") == ["python -m pkg.mod", "--x 1"]


def test_torchrun_argv_single_and_multi_node():
    one = torchrun_argv(make_plan(train(count=4), "torchrun", None), "t.py", ["--a"])
    assert one == ["torchrun", "--standalone", "--nproc-per-node", "4", "t.py", "--a"]
    multi = torchrun_argv(make_plan(train(count=16), "torchrun", None), "t.py", [])
    assert multi[:5] == ["torchrun", "--nnodes", "2", "--nproc-per-node", "8"]
    assert "--standalone" not in multi and multi[multi.index("--rdzv-backend") + 1] == "c10d"
    assert multi[-1] == "t.py"


def test_toml_text_round_trips():
    text = toml_text({"a": {"flag": True, "n": 3, "x": 0.5, "name": 'say "hi"', "skip": None, "l": [1, "b"]},
                      "b.c": {"off": False}})
    data = tomllib.loads(text)
    assert data == {"a": {"flag": True, "n": 3, "x": 0.5, "name": 'say "hi"', "l": [1, "b"]},
                    "b": {"c": {"off": False}}}


# ---- write_launch: the overwrite guard --------------------------------------------------------------

def test_write_launch_is_idempotent_and_sets_modes(tmp_path):
    s = train()
    first = write_launch(s, "hf", tmp_path / "o")
    again = write_launch(s, "hf", tmp_path / "o")           # same content: no complaint
    assert first == again
    names = {p.name for p in first}
    assert names == set(launch_files(s, "hf"))
    assert os.access(tmp_path / "o" / "launch.sh", os.X_OK) and os.access(tmp_path / "o" / "train_hf.py", os.X_OK)
    assert not os.access(tmp_path / "o" / "training_args.json", os.X_OK)


def test_write_launch_refuses_to_overwrite_changed_files(tmp_path):
    s = train()
    out = tmp_path / "o"
    write_launch(s, "deepspeed", out)
    (out / "ds_config.json").write_text("{}  # my edit\n")
    (out / "launch.sh").unlink()
    with pytest.raises(InputError) as err:
        write_launch(s, "deepspeed", out)
    assert "ds_config.json" in err.value.message and "1 file(s)" in err.value.message and "--force" in err.value.message
    assert (out / "ds_config.json").read_text() == "{}  # my edit\n"    # untouched
    assert not (out / "launch.sh").exists()                            # nothing at all was written
    write_launch(s, "deepspeed", out, force=True)
    assert (out / "ds_config.json").read_text() == launch_files(s, "deepspeed")["ds_config.json"]
    assert (out / "launch.sh").exists()


def test_write_launch_bad_out(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(InputError) as err:
        write_launch(serve(), "vllm", f)
    assert "not a folder" in err.value.message
    (tmp_path / "d" / "serve.sh").mkdir(parents=True)
    with pytest.raises(InputError) as err:
        write_launch(serve(), "vllm", tmp_path / "d")
    assert "is a folder where a launch file goes" in err.value.message


# ---- CLI: a plan that does not fit gets no files unless --force ---------------------------------------

def _cli_args(tmp_path, *extra):
    from gpuplan.launch import cli
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump({"model": "llama-3.1-8b", "task": "infer",
                                    "hardware": {"gpu": "h100-sxm", "count": 1}}))
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    return parser.parse_args(["launch", str(scen), "--engine", "vllm", *extra])


def test_cli_refuses_a_plan_that_does_not_fit(tmp_path, monkeypatch, capsys):
    from gpuplan.launch import cli
    est = {"memory": {"peak_bytes_per_gpu": 100 * GIB, "capacity_bytes_per_gpu": 80 * GIB, "fits": False}}
    monkeypatch.setattr(cli, "_estimate", lambda scenario: est)
    args = _cli_args(tmp_path, "--out", str(tmp_path / "o"))
    assert args.func(args) == 1
    assert not (tmp_path / "o").exists()
    assert "DOES NOT FIT" in capsys.readouterr().err
    args = _cli_args(tmp_path, "--out", str(tmp_path / "o"), "--force")
    assert args.func(args) == 0
    assert "(DOES NOT FIT)" in (tmp_path / "o" / "serve.sh").read_text()
    assert "--force" in capsys.readouterr().err


def test_cli_json_refusal_envelope(tmp_path, monkeypatch, capsys):
    from gpuplan.launch import cli
    est = {"memory": {"peak_bytes_per_gpu": 100 * GIB, "capacity_bytes_per_gpu": 80 * GIB, "fits": False}}
    monkeypatch.setattr(cli, "_estimate", lambda scenario: est)
    args = _cli_args(tmp_path, "--json")
    assert args.func(args) == 1
    result = json.loads(capsys.readouterr().out)["result"]
    assert result["fits"] is False and result["memory"] == est["memory"]


def test_cli_unsupported_engine_raises_before_writing(tmp_path, monkeypatch):
    from gpuplan.launch import cli
    monkeypatch.setattr(cli, "_estimate", lambda scenario: {"memory": {"fits": True}})
    args = _cli_args(tmp_path, "--out", str(tmp_path / "o"))
    args.engine = "megatron"                                   # a serving scenario cannot be trained
    with pytest.raises(UnsupportedError):
        args.func(args)
    assert not (tmp_path / "o").exists()


def test_cli_refusal_names_the_fix(tmp_path, capsys):
    """issue 17: a plan that does not fit exits 1 with the change that makes it fit (real estimate)."""
    from gpuplan.launch import cli
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump({"model": "llama-3.1-70b", "task": "infer", "hardware": {"gpu": "h100-sxm"}}))
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["launch", str(scen), "--engine", "vllm", "--out", str(tmp_path / "o")])
    assert args.func(args) == 1 and not (tmp_path / "o").exists()
    err = capsys.readouterr().err
    # 70B x 2 bytes = 141 GB of bf16 weights > one 80 GB H100; the what-if path names a change
    assert "DOES NOT FIT" in err and "Fix: it fits with " in err
