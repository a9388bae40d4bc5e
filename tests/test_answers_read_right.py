"""Answers that read right (issue 19): units and labels that say what a number is."""
from __future__ import annotations

import pytest

from gpuplan.pipeline import evaluate
from gpuplan.report import performance_report
from gpuplan.scenario import scenario_from_dict


def _train(**parallel):
    return scenario_from_dict({"model": "llama-3.1-8b", "task": "train",
                               "hardware": {"gpu": "h100-sxm", "count": parallel.pop("count", 2)},
                               "parallel": parallel,
                               "train": {"seq_len": 2048, "micro_batch": 1, "global_batch": 8}})


def test_train_breakdown_is_per_step_throughout():
    # tp=2 on 2 GPUs: dp=1, no pipeline, no ZeRO: the only communication is TP's all-reduces, none of it
    # overlapped, so the exposed communication per step IS the TP time per step (8 micro-batches of it)
    est = evaluate(_train(tp=2))
    b = est.performance.breakdown
    assert est.performance.details["microbatches"] == 8
    assert b["comm_tp_s"] == pytest.approx(b["exposed_comm"], rel=1e-9)
    # and the parts of the step add up to the step
    parts = b["compute"] + b["exposed_comm"] + b["bubble"] + b["offload"] + b["optimizer"]
    assert parts == pytest.approx(est.performance.step_time_s, rel=1e-9)


def test_train_breakdown_header_says_per_step():
    text = performance_report(evaluate(_train(tp=2)).performance)
    assert "seconds per optimizer step" in text


# ---- memory: "to make it fit" lists alternatives, each with its own result ------------------------------

def _memory_json(argv, capsys):
    import json

    from gpuplan.cli import main
    rc = main(["memory", *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)["result"]


def test_70b_qlora_on_4090s_finds_four_gpus_with_zero3(capsys):
    rc, out = _memory_json(["examples/qlora-70b-single-gpu.yaml", "--gpu", "rtx-4090"], capsys)
    assert rc == 1 and not out["memory"]["fits"]
    more = [a for a in out["to_fit"] if "ZeRO-3" in a["change"]]
    assert more and more[0]["gpus"] == 4 and more[0]["fits"]
    # its own result, checked independently: the same scenario on 4 GPUs with ZeRO-3 fits, on 2 it does not
    from gpuplan.scenario import load_scenario
    scn = load_scenario("examples/qlora-70b-single-gpu.yaml")
    four = evaluate(scn.replace(hardware={"gpu": "rtx-4090", "count": 4}, parallel={"zero": 3, "dp": None}))
    two = evaluate(scn.replace(hardware={"gpu": "rtx-4090", "count": 2}, parallel={"zero": 3, "dp": None}))
    assert four.memory.fits and not two.memory.fits
    assert more[0]["peak_bytes_per_gpu"] == four.memory.peak_bytes_per_gpu


def test_each_alternative_is_evaluated_on_its_own(capsys):
    # 8B full fine-tune, seq 4096 x 4 on one A100: each alternative applied alone to the scenario as given
    argv = ["--model", "llama-3.1-8b", "--gpu", "a100-sxm-80gb", "--task", "finetune", "--seq-len", "4096",
            "--micro-batch", "4"]
    rc, out = _memory_json(argv, capsys)
    assert rc == 1 and out["to_fit"]
    base = scenario_from_dict({"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "a100-sxm-80gb"},
                               "train": {"seq_len": 4096, "micro_batch": 4}})
    for alt in out["to_fit"]:
        assert alt["fits"] and alt["peak_bytes_per_gpu"] <= alt["capacity_bytes_per_gpu"]
    combined = [a for a in out["to_fit"] if " + " in a["change"]]
    for alt in combined:                    # "a + b" is both changes applied to the scenario as given
        update: dict = {}
        for part in alt["change"].split(" + "):
            key, value = part.split("=")
            section = "train" if key in ("recompute", "master_weights", "optimizer", "method") else "parallel"
            value = {"false": False, "true": True}.get(value, value)
            update.setdefault(section, {})[key] = value
        assert evaluate(base.replace(**update)).memory.peak_bytes_per_gpu == alt["peak_bytes_per_gpu"]


def test_memory_text_says_alternatives_not_steps(capsys):
    from gpuplan.cli import main
    main(["memory", "examples/qlora-70b-single-gpu.yaml", "--gpu", "rtx-4090"])
    out = capsys.readouterr().out
    assert "any one of these" in out and "4 x rtx-4090 with ZeRO-3" in out
    assert "do not fit it as configured" not in out and "not yet" not in out
