"""Hybrid sharding (parallel.shard_group): ZeRO-3/FSDP within a shard group, replicated across groups (FSDP2 HSDP,
FSDP1/accelerate HYBRID_SHARD, DeepSpeed MiCS). Expected values are hand arithmetic on stated facts:
llama-3.1-8b has 8,030,261,248 parameters in 32 layers; torchtitan keeps fp32 gradients and AdamW's two fp32
moments (8 bytes per parameter); ib-ndr-400 is 400 Gb/s = 50e9 B/s per GPU with 2.0 us latency
(hardware/data/networks.csv), used at the packaged network efficiency 0.8."""
from __future__ import annotations

import copy
import json

import pytest

from gpuplan.api import estimate
from gpuplan.errors import GpuplanError
from gpuplan.launch import launch_files
from gpuplan.scenario import scenario_from_dict

P = 8_030_261_248
LAYERS = 32
BASE = {"model": "llama-3.1-8b", "task": "train", "framework": "torchtitan",
        "hardware": {"gpu": "h100-sxm", "count": 16, "gpus_per_node": 8, "network": "ib-ndr-400"},
        "parallel": {"zero": 3}, "train": {"seq_len": 4096, "micro_batch": 1, "global_batch": 16}}


def scn(**parallel):
    d = copy.deepcopy(BASE)
    d["parallel"].update(parallel)
    return d


def comps(d):
    d["train"]["global_batch"] = 64    # 4 micro-batches: the gradients are alive at the backward peak
    return estimate(d).memory.components


# ---- memory ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("group", [8, 16])
def test_model_states_divide_by_the_shard_group_not_dp(group):
    c = comps(scn(shard_group=group))
    assert c["optimizer_states"] == pytest.approx(P * 8 / group, rel=1e-3)   # fp32 m and v
    assert c["gradients"] == pytest.approx(P * 4 / group, rel=1e-3)          # fp32 reduce-scattered gradients


def test_shard_group_of_all_dp_is_plain_fsdp():
    assert comps(scn(shard_group=16)) == comps(scn())


def test_gathered_units_do_not_change_with_the_shard_group():
    # only the fp32 master shard differs (4 B/param over 8 vs 16 ranks): the gather buffers are the same
    w8, w16 = comps(scn(shard_group=8))["weights"], comps(scn())["weights"]
    assert w8 - w16 == pytest.approx(P * 4 / 8 - P * 4 / 16, rel=1e-3)


# ---- speed -------------------------------------------------------------------------------------------------

def _replica_ar_s(group: int, grad_bytes: float = 4.0) -> float:
    """Per-layer all-reduce of each rank's gradient shard over 2 replicas (one per node: one NIC per group)."""
    shard_bytes = P / LAYERS * grad_bytes / group
    return LAYERS * (2 * (2 - 1) / 2 * shard_bytes / (50e9 * 0.8) + 2 * (2 - 1) * 2.0e-6)


def test_replica_all_reduce_moves_the_gradient_shard_across_nodes():
    b = estimate(scn(shard_group=8)).performance.breakdown      # one micro-batch per step
    assert b["comm_replicas_s"] == pytest.approx(_replica_ar_s(8), rel=0.01)


def test_no_replica_traffic_without_hybrid_sharding():
    assert "comm_replicas_s" not in estimate(scn()).performance.breakdown


def test_fsdp2_all_reduces_every_micro_batch_and_mics_once_per_step():
    def per_step(fw, gb, key):
        d = scn(shard_group=8)
        d["framework"], d["train"]["global_batch"] = fw, gb
        return estimate(d).performance.breakdown[key]
    assert per_step("torchtitan", 64, "comm_replicas_s") == pytest.approx(4 * per_step("torchtitan", 16, "comm_replicas_s"))
    assert per_step("deepspeed", 64, "comm_dp_replicas_s") == pytest.approx(per_step("deepspeed", 16, "comm_dp_replicas_s"))


def test_shard_group_within_a_node_shrinks_the_fsdp_collectives():
    # the per-layer all-gathers / reduce-scatters run over NVLink inside the node instead of across it
    full = estimate(scn()).performance.breakdown["comm_fsdp_s"]
    hybrid = estimate(scn(shard_group=8)).performance.breakdown["comm_fsdp_s"]
    assert hybrid < full


# ---- validation --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("update, needles", [
    ({"parallel": {"zero": 3, "shard_group": 3}}, ("must divide", "dp = 16", "1, 2, 4, 8, 16")),
    ({"parallel": {"zero": 2, "shard_group": 8}}, ("zero is 2", "set zero: 3")),
    ({"parallel": {"zero": 3, "shard_group": 1}}, ("shards nothing", "zero: 0")),
    ({"framework": "megatron", "parallel": {"zero": 3, "shard_group": 8}}, ("Megatron",)),
    ({"framework": "deepspeed", "parallel": {"zero": 3, "shard_group": 8, "offload": "optimizer"}}, ("MiCS", "offload")),
    ({"task": "infer", "train": None, "parallel": {"shard_group": 8}}, ("task infer",)),
])
def test_bad_shard_groups_are_refused_with_the_fix(update, needles):
    d = copy.deepcopy(BASE)
    d.update({k: v for k, v in update.items() if k != "parallel"})
    d["parallel"] = update["parallel"]
    if d.get("train") is None:
        d.pop("train")
    with pytest.raises(GpuplanError) as exc:
        scenario_from_dict(d)
    text = str(exc.value)
    assert "shard_group" in text and all(n in text for n in needles), text


# ---- launch ------------------------------------------------------------------------------------------------

def _launch(engine, **kw):
    d = scn(**kw)
    d["framework"] = {"hf": "hf", "deepspeed": "deepspeed", "trl": "hf"}.get(engine, "torchtitan")
    d["train"]["global_batch"] = 64
    return launch_files(scenario_from_dict(d), engine)


def test_torchtitan_job_file_writes_shard_and_replicate_degrees():
    import tomllib
    toml = tomllib.loads(_strip_header(_launch("torchrun", tp=2, shard_group=4)["torchtitan.toml"]))
    par = toml["parallelism"]
    assert (par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"], par["tensor_parallel_degree"]) \
        == (4, 2, 2)


def _strip_header(text):
    return "\n".join(line for line in text.splitlines() if not line.startswith("#"))


def test_fsdp2_script_builds_a_two_dimensional_mesh():
    files = _launch("torchrun", shard_group=8)
    import tomllib
    par = tomllib.loads(_strip_header(files["train_fsdp2.toml"]))["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (2, 8)
    assert '("dp_replicate", "dp_shard")' in files["train_fsdp2.py"]


def test_accelerate_config_carries_the_hsdp_sizes_accelerate_reads():
    import yaml
    cfg = yaml.safe_load(_launch("hf", shard_group=8)["accelerate_config.yaml"])
    assert cfg["distributed_type"] == "FSDP" and cfg["fsdp_config"]["fsdp_version"] == 2
    assert cfg["parallelism_config"] == {"parallelism_config_dp_replicate_size": 2,
                                         "parallelism_config_dp_shard_size": 8}
    pytest.importorskip("accelerate")
    from accelerate.commands.launch import launch_command_parser
    dests = {a.dest for a in launch_command_parser()._actions}
    assert set(cfg["parallelism_config"]) <= dests          # launch copies these keys onto its arguments
    from accelerate.parallelism_config import ParallelismConfig
    pc = ParallelismConfig(dp_replicate_size=2, dp_shard_size=8)
    assert pc.total_size == cfg["num_processes"] == 16


@pytest.mark.parametrize("engine, needle", [("deepspeed", "removed MiCS"), ("trl", "torchrun or hf")])
def test_engines_without_a_hybrid_shard_refuse_it(engine, needle):
    with pytest.raises(GpuplanError) as exc:
        _launch(engine, shard_group=8)
    assert "shard_group = 8" in str(exc.value) and needle in str(exc.value)


# ---- search, CLI, web ----------------------------------------------------------------------------------------

def test_recommend_offers_one_node_shard_groups_when_dp_spans_nodes():
    from gpuplan.search import recommend
    r = recommend({"model": "llama-3.1-8b", "task": "train", "framework": "torchtitan",
                   "hardware": {"gpu": "h100-sxm", "count": [16], "gpus_per_node": 8},
                   "parallel": {"zero": 3, "tp": 1}, "train": {"seq_len": 4096, "global_batch": 256, "tokens": 1e10}},
                  top=50)
    hybrid = [p for p in r.plans if p.scenario.parallel.replicas > 1]
    assert hybrid and all(p.scenario.parallel.shard_group == 8 for p in hybrid)


def test_recommend_refuses_a_fixed_shard_group():
    from gpuplan.search import recommend
    with pytest.raises(GpuplanError) as exc:
        recommend({"model": "llama-3.1-8b", "task": "train", "hardware": {"gpu": "h100-sxm", "count": 16},
                   "parallel": {"zero": 3, "shard_group": 8}})
    assert "chosen by the search" in str(exc.value)


def test_cli_flag_sets_the_shard_group(capsys):
    from gpuplan.cli import main
    rc = main(["estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--count", "16", "--gpus-per-node", "8",
               "--zero", "3", "--shard-group", "8", "--seq-len", "4096", "--global-batch", "16", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["result"]["scenario"]["parallel"]["shard_group"] == 8
    # AdamW's two fp32 moments over the 8-rank shard group, not over dp = 16
    assert out["result"]["memory"]["components"]["optimizer_states"] == pytest.approx(P * 8 / 8, rel=1e-3)


def test_preference_row_oi06_reads_its_shard_degree():
    import csv
    from conftest import ROOT
    import importlib.util
    spec = importlib.util.spec_from_file_location("vg", ROOT / "scripts" / "validate_gathered.py")
    vg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vg)
    with (ROOT / "validation" / "gathered" / "preference.csv").open(newline="", encoding="utf-8") as fh:
        row = {r["id"]: r for r in csv.DictReader(fh)}["OI06"]
    par = vg.preference_scenario(row)["parallel"]
    assert (par["tp"], par["dp"], par["shard_group"]) == (2, 8, 4)


# ---- measured with PyTorch: FSDP2 fully_shard on a 2-D fake mesh (gpuplan trace) ---------------------------------

def test_traced_hsdp_peak_grows_by_the_unsharded_states_as_the_estimate_says():
    """Qwen2.5-0.5B (494,032,768 parameters), torchtitan-style FSDP2 with fp32 master weights, one micro-batch:
    at the optimizer-step peak each rank holds its fp32 master shard and AdamW's two fp32 moments, 12 bytes per
    parameter over the shard group. Shard group 4 instead of all 16 ranks adds 12·P·(1/4 − 1/16) bytes, in the
    traced peak (real fully_shard over a (dp_replicate, dp_shard) mesh) and in the estimate alike."""
    pytest.importorskip("torch")
    from gpuplan.trace import trace
    q = {"model": "qwen2.5-0.5b", "task": "train", "framework": "torchtitan",
         "hardware": {"gpu": "h100-sxm", "count": 16, "gpus_per_node": 8},
         "parallel": {"zero": 3}, "train": {"seq_len": 512, "micro_batch": 1, "global_batch": 16, "attention": "sdpa"}}
    hybrid = copy.deepcopy(q)
    hybrid["parallel"]["shard_group"] = 4
    hand = 12 * 494_032_768 * (1 / 4 - 1 / 16)
    traced = trace(hybrid).peak_bytes - trace(q).peak_bytes
    assert traced == pytest.approx(hand, rel=0.01)
    states = ("weights", "gradients", "optimizer_states")
    est = (sum(estimate(hybrid).memory.components[k] for k in states)
           - sum(estimate(q).memory.components[k] for k in states))
    assert est == pytest.approx(traced, rel=0.01)
