"""NeMo RL's DTensor tensor-parallel plan for Llama (estimate/dtensor_tp.py, docs/speed.md §2.20). Expected values are
the collectives torch's own DTensor runs for that plan (nemo_rl/models/dtensor/parallelize.py L144-179 @b1c86a8),
counted by scripts/time_dtensor_tp.py on a fake process group of 8 CPU ranks, and the collective identity an
all-reduce = a reduce-scatter + an all-gather of the same buffer (so Megatron's 4 all-reduces a layer are 8 of them)."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.api import estimate
from gpuplan.estimate import dtensor_tp, speed
from gpuplan.hardware.gpus import get_gpu
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
BASE = {"model": "llama-3.1-70b", "task": "finetune", "framework": "torchtitan",
        "hardware": {"gpu": "h100-sxm", "count": 64, "gpus_per_node": 8},
        "parallel": {"tp": 8, "zero": 3},
        "train": {"seq_len": 4096, "micro_batch": 1, "global_batch": 64, "recompute": "none", "hf_modules": True}}


def scn(model: str = "llama-3.1-70b", hf_modules: bool = True, **parallel) -> dict:
    d = copy.deepcopy(BASE)
    d["model"] = model
    d["train"]["hf_modules"] = hf_modules
    d["parallel"].update(parallel)
    return d


def _counts(plan: str) -> dict:
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "time_dtensor_tp.py"), "--count-only",
                          "--layers", "1,2", "--plan", plan], capture_output=True, text=True, timeout=600, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr[-2000:]
    rows = [json.loads(line[len("COUNTS "):]) for line in run.stdout.splitlines() if line.startswith("COUNTS ")]
    return {r["kind"]: r["collectives"] for r in rows}


def test_collective_counts_are_torchs():
    """torch's DTensor, running NeMo RL's Llama plan: 5 all-gathers + 2 reduce-scatters a layer forward, 9 + 6 in the
    backward; torchtitan's plan (PrepareModuleInput around attention and MLP) on the same model: 2 + 2 each way, i.e.
    Megatron's 4 all-reduces a layer that gpuplan prices for every other TP run."""
    pytest.importorskip("transformers")
    import torch.distributed as dist
    if not dist.is_available():
        pytest.skip("torch.distributed is needed")
    nemo = _counts("nemo-rl")
    assert nemo["no-grad forward"] == {"forward:all_gather": 5.0, "forward:reduce_scatter": 2.0}
    assert nemo["forward+backward"] == {"forward:all_gather": 5.0, "forward:reduce_scatter": 2.0,
                                        "backward:all_gather": 9.0, "backward:reduce_scatter": 6.0}
    assert dtensor_tp.collectives_per_layer(True) == (5.0, 2.0)
    assert dtensor_tp.collectives_per_layer(False) == (14.0, 8.0)
    titan = _counts("torchtitan")
    assert titan["forward+backward"] == {"forward:all_gather": 2.0, "forward:reduce_scatter": 2.0,
                                         "backward:all_gather": 2.0, "backward:reduce_scatter": 2.0}
    assert sum(titan["forward+backward"].values()) == 2 * speed.TP_ALL_REDUCES_PER_LAYER


def test_training_tp_traffic_is_eleven_all_reduces_a_layer():
    """14 all-gathers + 8 reduce-scatters of the same [tokens, h] buffer = 11 all-reduces against Megatron's 4."""
    plan = estimate(scn()).performance.breakdown["comm_tp_s"]
    megatron = estimate(scn(hf_modules=False)).performance.breakdown["comm_tp_s"]
    assert plan / megatron == pytest.approx((14 + 8) / 2 / 4, rel=1e-9)


def test_log_prob_pass_takes_the_forwards_count():
    """A no-grad forward runs the forward's 5 + 2, not a FLOP share of the training micro-batch's 14 + 8: per micro-batch
    7/22 of the training TP traffic (TP overlap is 0, so exposed = run)."""
    d = scn()
    s = scenario_from_dict(d)
    model, gpu = get_model(d["model"]), get_gpu("h100-sxm")
    lp = speed.forward_only_time(s, model, gpu)
    tr = estimate(d).performance
    per_mb_train = tr.breakdown["comm_tp_s"] / lp["microbatches"]
    assert lp["comm"] / lp["microbatches"] == pytest.approx(per_mb_train * 7 / 22, rel=1e-9)


@pytest.mark.parametrize("case", [dict(model="qwen2.5-72b"), dict(hf_modules=False), dict(sp=False)])
def test_other_plans_keep_megatrons_count(case):
    """Qwen2/3 have their own NeMo RL plan (not counted), torchtitan's own model runs its plan, and without sequence
    parallelism the norms are not DTensors: all keep the 4 all-reduces a layer."""
    d = scn(**case)
    s = scenario_from_dict(d)
    model, gpu = get_model(d["model"]), get_gpu("h100-sxm")
    c = speed._train_setup(s, model, gpu, speed._packaged_efficiency(), speed._network(s, gpu), [])
    assert not speed._dtensor_llama_plan(c)
    assert speed._dtensor_llama_plan(speed._train_setup(scenario_from_dict(scn()), get_model("llama-3.1-70b"), gpu,
                                                        speed._packaged_efficiency(),
                                                        speed._network(scenario_from_dict(scn()), gpu), []))
