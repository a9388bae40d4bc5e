"""`gpuplan memory --model X --task train` with no GPU named (issue 19): the per-GPU memory of the usual layouts
and which catalog GPUs hold each."""
from __future__ import annotations

import json

from gpuplan.cli import main
from gpuplan.pipeline import evaluate
from gpuplan.scenario import scenario_from_dict
from gpuplan.units import GiB


def _run(argv, capsys):
    rc = main(["memory", *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)["result"]


def _layout(rows, count):
    return next(r for r in rows if r["count"] == count)


def test_70b_bf16_serving_needs_two_80gb_cards(capsys):
    # by hand: 70.6e9 parameters x 2 bytes = 131.5 GiB of weights: more than any 80 GB card holds, and
    # half of it (65.7 GiB) per GPU at tensor parallel 2 leaves room on an 80 GB H100
    rc, out = _run(["--model", "llama-3.1-70b", "--task", "infer"], capsys)
    assert rc == 0 and out["gpu"] is None
    one, two = _layout(out["layouts"], 1), _layout(out["layouts"], 2)
    assert one["peak_bytes_per_gpu_min"] > 131 * GiB
    assert "h100-sxm" not in {f["gpu"] for f in one["fits_on"]}
    assert "h100-sxm" in {f["gpu"] for f in two["fits_on"]}
    assert "tensor parallel" in two["layout"]


def test_each_layout_agrees_with_a_direct_estimate_on_one_gpu(capsys):
    rc, out = _run(["--model", "llama-3.1-8b", "--task", "train"], capsys)
    assert [r["count"] for r in out["layouts"]] == [1, 2, 4, 8]
    for row in out["layouts"]:
        parallel = {k: v for k, v in row["parallel"].items() if v is not None}
        est = evaluate(scenario_from_dict({"model": "llama-3.1-8b", "task": "train",
                                           "hardware": {"gpu": "h100-sxm", "count": row["count"]},
                                           "parallel": parallel}))
        assert row["peak_bytes_per_gpu_min"] <= est.memory.peak_bytes_per_gpu <= row["peak_bytes_per_gpu_max"]
        assert ("h100-sxm" in {f["gpu"] for f in row["fits_on"]}) == est.memory.fits
        if row["count"] > 1:
            assert row["parallel"]["zero"] == 3
    # sharding weights, gradients and optimizer states: more GPUs, less per GPU
    peaks = [r["peak_bytes_per_gpu_max"] for r in out["layouts"]]
    assert peaks == sorted(peaks, reverse=True)


def test_fits_on_is_smallest_memory_first(capsys):
    _, out = _run(["--model", "llama-3.1-8b", "--task", "finetune", "--method", "qlora"], capsys)
    for row in out["layouts"]:
        sizes = [f["usable_bytes"] for f in row["fits_on"]]
        assert sizes == sorted(sizes)


def test_text_answer_and_file_without_hardware(capsys):
    rc = main(["memory", "examples/recommend-finetune-8b.yaml"])
    out = capsys.readouterr().out
    assert rc == 0 and "no GPU named" in out and "ZeRO-3 / FSDP" in out and "fits on" in out


def test_a_layout_the_model_cannot_take_says_why(capsys):
    # qwen2.5-7b has 28 attention heads: tensor parallel 8 cannot split them (28 / 8 is not whole)
    rc, out = _run(["--model", "qwen2.5-7b", "--task", "infer"], capsys)
    eight = _layout(out["layouts"], 8)
    assert eight["fits_on"] == [] and eight["peak_bytes_per_gpu_min"] is None
    assert "28" in eight["not_possible"]
    assert _layout(out["layouts"], 4)["not_possible"] is None          # 28 / 4 = 7 heads per GPU
    main(["memory", "--model", "qwen2.5-7b", "--task", "infer"])
    assert "not possible:" in capsys.readouterr().out
