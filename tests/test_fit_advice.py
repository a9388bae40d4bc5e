"""`gpuplan memory` answers "does it fit, and what do I change if not" (issue 4)."""
from gpuplan.cli import main
from gpuplan.estimate.fit import fewest_gpus, fit_limits
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict
from gpuplan.search.whatif import path_to_fit
from gpuplan.units import GiB


def _ft(gpu, **train):
    return scenario_from_dict({"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": gpu},
                               "train": {"seq_len": 4096, "micro_batch": 4, **train}})


def test_path_keeps_full_finetune_when_techniques_suffice():
    steps = path_to_fit(_ft("a100-sxm-80gb"))
    assert steps and steps[-1]["fits"]
    assert all(not s["technique"].startswith("method=") for s in steps)
    peaks = [s["peak_bytes_per_gpu"] for s in steps]
    assert peaks == sorted(peaks, reverse=True)         # every step frees memory


def test_path_switches_method_only_when_needed():
    steps = path_to_fit(_ft("rtx-4090"))
    assert steps[-1]["fits"]
    assert any(s["technique"] in ("method=lora", "method=qlora") for s in steps)  # 8B full FT cannot fit 24 GB


def test_fitting_scenario_needs_no_change():
    assert path_to_fit(_ft("h200-sxm", method="lora", recompute="full")) == []


def test_fit_limits_are_the_boundary():
    scn = scenario_from_dict({"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "h100-sxm"},
                              "train": {"method": "lora", "seq_len": 2048}})
    m = get_model("llama-3.1-8b")
    from gpuplan.estimate.memory import estimate_memory
    cap = 80 * GiB
    b = fit_limits(scn, m, cap)["max_micro_batch"]
    assert estimate_memory(scn.replace(train={"micro_batch": b}), m, cap).fits
    assert not estimate_memory(scn.replace(train={"micro_batch": b + 1}), m, cap).fits


def test_fewest_gpus_for_70b_bf16_serving_is_two_80gb_cards():
    scn = scenario_from_dict({"model": "llama-3.1-70b", "task": "infer", "hardware": {"gpu": "h100-sxm"}})
    assert fewest_gpus(scn, get_model("llama-3.1-70b"), int(79.6 * GiB)) == 2


def test_memory_command_prints_advice(capsys):
    rc = main(["memory", "--model", "llama-3.1-8b", "--gpu", "a100-sxm-80gb", "--task", "finetune",
               "--seq-len", "4096", "--micro-batch", "4"])
    out = capsys.readouterr().out
    assert rc == 1 and "does NOT fit" in out and "To make it fit" in out and "recompute=full" in out
