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
