"""Megatron's MoE parallel folding (parallel.etp): the routed experts' own grid EP x ETP x expert-DP over each
pipeline stage's TP x CP x DP ranks.

The acceptance rule is derived by hand from megatron/core/parallel_state.py initialize_model_parallel at
core_v0.19.0 (Megatron-LM 5be96267): it raises RuntimeError unless world_size % (etp * ep * pp) == 0, with
world_size = tp * cp * dp * pp (the attention grid) and etp defaulting to tp there; gpuplan's default etp is 1
under expert parallelism and the launch file writes it. Memory expectations are hand arithmetic on
Qwen3-30B-A3B's config (hidden 2048, 48 layers, 128 experts of intermediate 768, 32 query and 4 KV heads of
128, vocabulary 151936, untied embeddings)."""
from __future__ import annotations

import itertools
import re

import pytest

from gpuplan import api
from gpuplan.errors import InputError
from gpuplan.launch import launch_files
from gpuplan.scenario import scenario_from_dict


def _scn(par, count=256, framework="megatron", model="qwen3-235b-a22b", task="train", **train):
    d = {"model": model, "task": task, "framework": framework,
         "hardware": {"gpu": "h100-sxm", "count": count, "gpus_per_node": 8}, "parallel": par}
    if task != "infer":
        d["train"] = {"seq_len": 4096, "micro_batch": 1, "global_batch": 2048, "tokens": 1e10, **train}
    return scenario_from_dict(d, "test")


def _megatron_accepts(tp, pp, cp, dp, ep, etp):
    """parallel_state.initialize_model_parallel's checks, by hand: the attention grid fills the world, the
    expert grid (etp x ep x pp, expert-DP the rest) must divide it."""
    world = tp * cp * dp * pp
    return world % (etp * ep * pp) == 0


def test_published_fold_is_accepted():
    # Megatron-Bridge Qwen3-235B H100: 256 GPUs, TP2 PP8 EP32 ETP1 -> DP16; EP32 > DP x CP = 16, folded over TP
    s = _scn({"tp": 2, "pp": 8, "ep": 32, "etp": 1})
    assert s.dp == 16 and s.parallel.expert_tp == 1 and s.parallel.expert_dp == 1
    # the default expert TP under EP is 1: the same layout without etp
    s = _scn({"tp": 2, "pp": 8, "ep": 32})
    assert s.parallel.expert_tp == 1 and s.parallel.expert_dp == 1
    # NeMo RL Qwen3-235B: TP2 CP2 PP8 EP16 on 128 GPUs -> DP4, expert-DP 2*2*4/16 = 1
    s = _scn({"tp": 2, "cp": 2, "pp": 8, "ep": 16}, count=128)
    assert s.dp == 4 and s.parallel.expert_dp == 1


@pytest.mark.parametrize("tp,cp,pp,ep,etp", [
    (tp, cp, pp, ep, etp) for tp, cp, pp, ep, etp in itertools.product((1, 2, 4), (1, 2), (1, 2), (1, 2, 4, 8, 16, 32),
                                                                       (1, 2, 4))])
def test_accepts_exactly_what_megatron_accepts(tp, cp, pp, ep, etp):
    count = 32
    dp = count // (tp * cp * pp)
    par = {"tp": tp, "cp": cp, "pp": pp, "ep": ep, "etp": etp}
    if _megatron_accepts(tp, pp, cp, dp, ep, etp):
        s = _scn(par, count=count, global_batch=dp * 8)
        assert s.parallel.expert_dp == tp * cp * dp // (ep * etp)
    else:
        with pytest.raises(InputError) as err:
            _scn(par, count=count, global_batch=dp * 8)
        msg = str(err.value)
        assert "parallel.ep x etp" in msg and "tp x cp x dp" in msg


def test_error_names_fields_and_fix():
    with pytest.raises(InputError) as err:
        _scn({"tp": 2, "pp": 8, "ep": 32, "etp": 2})        # 32 x 2 = 64 does not divide 2 x 1 x 16 = 32
    msg = str(err.value)
    assert "parallel.ep x etp = 32 x 2 = 64" in msg and "2 x 1 x 16 = 32" in msg
    assert "use an ep that divides 16 (1, 2, 4, 8, 16)" in msg


def test_etp_is_megatron_training_only():
    with pytest.raises(InputError, match="framework is torchtitan"):
        _scn({"tp": 2, "pp": 8, "ep": 16, "etp": 1}, framework="torchtitan")
    with pytest.raises(InputError, match="serving engines"):
        _scn({"tp": 8, "ep": 8, "etp": 1}, count=8, task="infer")
    # stacks without an expert grid keep the old rule: experts over data(-and-context)-parallel ranks only
    with pytest.raises(InputError, match="must divide dp\\*cp"):
        _scn({"tp": 2, "pp": 8, "ep": 32}, framework="torchtitan")


# ---- memory: Qwen3-30B-A3B, hand arithmetic ---------------------------------------------------------------
H, L, E, I_MOE, V = 2048, 48, 128, 768, 151936
EXPERTS = L * E * 3 * H * I_MOE                                       # gate, up, down per expert
ATTN = L * (H * 32 * 128 * 2 + H * 4 * 128 * 2)                        # q, o and k, v
REPLICATED = L * (2 * 128 + 2 * H + H * E) + H                         # q/k norms, 2 layer norms, router; final norm
VOCAB = 2 * V * H                                                      # embedding + untied lm_head


@pytest.mark.parametrize("tp,ep,etp", [(2, 8, 1), (2, 4, 1), (2, 2, 2), (4, 8, 1)])
def test_folded_memory_per_gpu(tp, ep, etp):
    count = 8
    dp = count // tp
    est = api.estimate({"model": "qwen3-30b-a3b", "framework": "megatron",
                        "hardware": {"gpu": "h100-sxm", "count": count, "gpus_per_node": 8},
                        "parallel": {"tp": tp, "ep": ep, "etp": etp, "zero": 1},
                        "train": {"seq_len": 4096, "micro_batch": 1, "global_batch": 64}})
    experts = EXPERTS / (ep * etp)
    dense = (ATTN + VOCAB) / tp + REPLICATED
    edp = tp * dp // (ep * etp)
    c = est.memory.components
    # bf16 weights; fp32 main gradients (not sharded by the distributed optimizer); fp32 master + Adam m, v
    # sharded over dp for the dense part and over the expert-data-parallel group for the experts
    assert c["weights"] == pytest.approx(2 * (experts + dense), rel=1e-9)
    assert c["gradients"] == pytest.approx(4 * (experts + dense), rel=1e-9)
    assert c["optimizer_states"] == pytest.approx(12 * dense / dp + 12 * experts / edp, rel=1e-9)


# ---- speed: the all-to-all group spans etp x ep consecutive ranks -------------------------------------------
def test_a2a_leaves_the_node_when_ep_times_etp_exceeds_it():
    def ep_comm(etp):
        est = api.estimate({"model": "qwen3-30b-a3b", "framework": "megatron",
                            "hardware": {"gpu": "h100-sxm", "count": 16, "gpus_per_node": 8},
                            "parallel": {"tp": 2, "ep": 8, "etp": etp, "zero": 1},
                            "train": {"seq_len": 4096, "micro_batch": 1, "global_batch": 64}})
        return est.performance.breakdown["comm_ep_s"], est.performance.breakdown.get("comm_etp_s", 0.0)
    intra, no_etp = ep_comm(1)     # EP ranks 0..7: one node (order tp-ep-dp-pp on the expert grid)
    inter, etp_comm = ep_comm(2)   # EP ranks 2 apart: 16 GPUs, two nodes, same payload
    assert no_etp == 0.0 and etp_comm > 0.0
    assert inter > 2 * intra


# ---- launch -----------------------------------------------------------------------------------------------
def _flags(scn):
    """--flag value pairs of the torchrun command (one per line, as the script writes them)."""
    text = launch_files(scn, "megatron")["train_megatron.sh"]
    return dict(m.groups() for m in re.finditer(r"^\s+(--[\w-]+) +([^\s\\]+)", text, re.M))


def test_launch_writes_the_expert_grid():
    f = _flags(_scn({"tp": 2, "pp": 2, "ep": 32}, count=64))          # dp 16: ep 32 folds over tp x dp
    assert f["--tensor-model-parallel-size"] == "2" and f["--expert-model-parallel-size"] == "32"
    assert f["--expert-tensor-parallel-size"] == "1"     # explicit: Megatron would default it to tp = 2
    f = _flags(_scn({"tp": 4, "pp": 1, "ep": 4, "etp": 2}, count=8, global_batch=64))
    assert f["--expert-model-parallel-size"] == "4" and f["--expert-tensor-parallel-size"] == "2"


def test_model_rules():
    with pytest.raises(InputError, match="is dense"):
        api.estimate({"model": "llama-3.1-8b", "framework": "megatron", "hardware": {"gpu": "h100-sxm", "count": 8},
                      "parallel": {"tp": 2, "etp": 1}, "train": {"seq_len": 4096, "global_batch": 8}})
    # moe_layer.py: MoE + TP without sequence parallel raises in training
    with pytest.raises(InputError, match="sequence parallel"):
        api.estimate({"model": "qwen3-30b-a3b", "framework": "megatron", "hardware": {"gpu": "h100-sxm", "count": 8},
                      "parallel": {"tp": 2, "ep": 8, "sp": False}, "train": {"seq_len": 4096, "global_batch": 8}})


def test_recommend_proposes_layouts_megatron_accepts():
    from gpuplan.search.recommend import recommend
    rec = recommend({"model": "qwen3-30b-a3b", "task": "train", "framework": "megatron",
                     "hardware": {"gpu": "h100-sxm", "count": 16, "gpus_per_node": 8},
                     "parallel": {"tp": [1, 2, 4], "ep": "auto", "pp": [1]},
                     "train": {"seq_len": 4096, "tokens": 1e9, "global_batch": 256}}, top=10, progress=False)
    assert rec.plans
    for plan in rec.plans:
        s, p = plan.scenario, plan.scenario.parallel
        assert _megatron_accepts(p.tp, p.pp, p.cp, s.dp, p.ep, p.expert_tp)
        if p.ep > 1:   # Megatron would default expert TP to tp: the file must say the plan's
            assert _flags(s)["--expert-tensor-parallel-size"] == str(p.expert_tp)
