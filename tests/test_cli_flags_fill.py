"""Flags fill a section the scenario file lacks (issue 19): a recommend-style file with no `hardware:` plus
--gpu is a complete scenario; the file's own wrong values are still refused, and a file that lacks the GPU
with no --gpu says so (not pydantic's "'hardware' is required")."""
from __future__ import annotations

import json

from gpuplan.cli import main


def _write(tmp_path, text: str):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return str(path)


def test_gpu_flag_fills_the_missing_hardware_section(capsys):
    rc = main(["estimate", "examples/recommend-finetune-8b.yaml", "--gpu", "h100-sxm", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out
    scenario = out["result"]["scenario"]
    assert scenario["hardware"]["gpu"] == "h100-sxm" and scenario["hardware"]["count"] == 1
    # the file's own fields are kept
    assert scenario["train"]["method"] == "lora" and scenario["train"]["global_batch"] == 64


def test_flags_fill_a_missing_model_and_train_section(tmp_path, capsys):
    path = _write(tmp_path, "task: finetune\nhardware: {gpu: l4}\n")
    rc = main(["memory", path, "--model", "qwen2.5-0.5b", "--method", "lora", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc in (0, 1) and "result" in out
    assert out["result"]["memory"]["peak_bytes_per_gpu"] > 0


def test_no_gpu_anywhere_names_the_fix(tmp_path, capsys):
    rc = main(["estimate", "examples/recommend-finetune-8b.yaml"])
    err = capsys.readouterr().err
    assert rc == 2 and "names no GPU" in err and "--gpu" in err and "'hardware' is required" not in err


def test_no_gpu_names_the_file_and_the_search_that_picks_one(capsys):
    # a recommend file (hardware left open) given to `estimate`: the message names the file and offers
    # `gpuplan recommend`, which is what such a file is for
    rc = main(["estimate", "examples/recommend-finetune-8b.yaml"])
    err = capsys.readouterr().err
    assert rc == 2 and "recommend-finetune-8b.yaml" in err and "gpuplan recommend" in err


def test_a_wrong_value_in_the_file_is_refused_even_when_a_flag_overrides_it(tmp_path, capsys):
    path = _write(tmp_path, "model: qwen2.5-0.5b\nhardware: {gpu: l4, count: many}\n")
    rc = main(["estimate", path, "--count", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and "count" in err and "s.yaml" in err


def test_serve_from_flags_alone_is_an_inference_question(tmp_path, capsys):
    # `gpuplan serve --model M --gpu G` with no file and no --task: the command names the task
    rc = main(["serve", "--model", "qwen2.5-0.5b", "--gpu", "l4", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out
    assert out["result"]["performance"]["tpot_s"] > 0
    # a task the user did state still wins, and the mismatch is refused as before
    rc = main(["serve", "--model", "qwen2.5-0.5b", "--gpu", "l4", "--task", "finetune"])
    assert rc == 2 and "needs task: infer" in capsys.readouterr().err
    # a file with a training task is not silently turned into serving
    path = _write(tmp_path, "model: qwen2.5-0.5b\ntask: finetune\nhardware: {gpu: l4}\n")
    rc = main(["serve", path])
    assert rc == 2 and "needs task: infer" in capsys.readouterr().err
