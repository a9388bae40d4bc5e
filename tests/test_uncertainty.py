"""Error bars (estimate/uncertainty.py): every figure of every surface carries one, taken from the
packaged table that scripts/make_uncertainty.py builds from validation residuals."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gpuplan import api
from gpuplan.cli import main as cli_main
from gpuplan.estimate import uncertainty as U

ROOT = Path(__file__).resolve().parents[1]
TRAIN = {"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "a100-sxm-80gb", "count": 1},
         "train": {"method": "lora", "seq_len": 2048, "micro_batch": 1}}
MOE_TRAIN = {"model": "mixtral-8x7b", "task": "train", "hardware": {"gpu": "h100-sxm", "count": 8},
             "parallel": {"ep": 8, "zero": 3}, "train": {"seq_len": 4096, "micro_batch": 1}}
SERVE = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
         "infer": {"engine": "vllm", "concurrency": 8}}


def _rows():
    path = ROOT / "src" / "gpuplan" / "estimate" / "data" / "uncertainty.csv"
    return list(csv.DictReader(path.open(encoding="utf-8")))


def test_table_uses_held_out_residuals_when_there_are_enough():
    rows = _rows()
    assert rows, "packaged uncertainty table is empty"
    for r in rows:
        if r["basis"] == "held-out":
            # at least 3 held-out runs, or a category with no in-sample runs to fall back on (its few runs cited)
            assert int(r["held_out_runs"]) >= 3 or int(r["in_sample_runs"]) == 0
            assert r["relative_typical"] == r["held_out_typical"]
        else:
            assert int(r["held_out_runs"]) < 3 and r["relative_typical"] == r["in_sample_typical"]
        assert float(r["relative_p90"]) >= float(r["relative_typical"]) > 0


@pytest.mark.parametrize("scn,mem_cat,speed_cat", [
    (TRAIN, "fine-tuning, LoRA/QLoRA", "training tokens/s"),
    (SERVE, "inference", "serving, batched engines (vLLM, SGLang, TensorRT-LLM)"),
    # a mixture-of-experts run is scored against MoE runs only: dense residuals would understate its bar
    (MOE_TRAIN, "training, sharded (FSDP/ZeRO-3)", "training tokens/s, mixture-of-experts"),
])
def test_every_figure_of_an_estimate_has_its_bar(scn, mem_cat, speed_cat):
    est = api.estimate(scn)
    d = est.to_json()
    assert d["memory"]["uncertainty"]["category"].startswith(mem_cat)
    assert d["performance"]["uncertainty"]["category"] == speed_cat
    assert d["cost"]["uncertainty"]["category"] == speed_cat
    assert d["performance"]["uncertainty"]["relative_typical"] > 0


def test_category_without_runs_says_so():
    u = U.lookup("memory", "a kind nobody measured")
    assert u.typical is None and "no validated runs" in u.category
    assert u.text().startswith("no error bar")


def test_text_output_shows_the_bars(capsys, tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(TRAIN))
    assert cli_main(["estimate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "error bar (memory): ±" in out and "error bar (speed): ±" in out and "error bar (cost" in out


def test_post_training_figures_carry_their_own_bars():
    """An RL step is scored against published RL steps (mostly rollout time), not against SFT tokens/s; a DPO
    step against the scored preference.csv steps (scripts/make_uncertainty.py feeds them in), or, while the
    packaged table holds fewer than 3 of them, it says so instead of borrowing the SFT bar."""
    grpo = api.estimate(ROOT / "examples" / "grpo-7b-colocated.yaml").to_json()
    assert grpo["performance"]["uncertainty"]["category"] == "post-training RL step (rollout + training)"
    assert grpo["performance"]["uncertainty"]["relative_typical"] > 0.1
    dpo = api.estimate(ROOT / "examples" / "dpo-full-8b.yaml").to_json()["performance"]["uncertainty"]
    if dpo["relative_typical"] is None:
        assert "no validated runs" in dpo["category"]
    else:
        assert dpo["category"] == "post-training step (preference, distillation, reward model)"
        assert dpo["runs"] >= 3 and dpo["relative_typical"] > 0


def _scored(path: Path, keep=lambda r: True) -> list[dict]:
    return [r for r in csv.DictReader(path.open(encoding="utf-8"))
            if not r["notes"].startswith("unscored:") and keep(r)]


def test_post_training_memory_bars_come_from_measured_post_training_runs():
    """GRPO's memory bar is the scored rows of validation/gathered/posttrain-memory.csv (RL runs with their rollout
    engine) and cites how many; DPO's is the measured DPO steps (measured.csv HD*), no longer SFT's bar."""
    gathered = ROOT / "validation" / "gathered"
    rl_runs = _scored(gathered / "posttrain-memory.csv", lambda r: r["objective"] in ("grpo", "ppo", "rloo"))
    assert len(rl_runs) >= 2
    est = api.estimate(ROOT / "examples" / "grpo-7b-colocated.yaml")
    u = est.memory.uncertainty
    assert u.category == "post-training RL (rollout engine + training)"
    assert u.typical is not None and u.p90 >= u.typical > 0 and u.basis == "held-out"
    assert u.runs == len(rl_runs) and u.sources == len({r["source"] for r in rl_runs})
    assert f"{len(rl_runs)} held-out runs" in u.text()
    dpo_runs = _scored(gathered / "measured.csv", lambda r: r["objective"] not in ("", "sft"))
    d = api.estimate(ROOT / "examples" / "dpo-full-8b.yaml").memory.uncertainty
    assert d.category == "post-training (preference, distillation, reward model)"
    assert d.typical is not None and d.runs == len(dpo_runs) >= 3


def test_bar_text_counts_agree_in_number():
    from gpuplan.estimate.uncertainty import bar_text
    one = {"relative_typical": 0.04, "relative_p90": 0.05, "category": "c", "runs": 2, "sources": 1, "basis": "held-out"}
    assert bar_text(one) == "±4 % typical, ±5 % P90 (c, 2 held-out runs, 1 source)"
    assert bar_text({**one, "runs": 1, "sources": 3}).endswith("(c, 1 held-out run, 3 sources)")
    assert bar_text({"relative_typical": None, "category": ""}) == "no error bar: outside every validated category"
