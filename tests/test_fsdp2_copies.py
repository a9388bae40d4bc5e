"""FSDP2's copies around its collectives (speed._fsdp2_copy_time, parallel.fsdp_version). Expected values are the
counts read off torch's fully_shard (scripts/trace_fsdp2_copy_bytes.py; torch v2.7.0 _fsdp_collectives.py
`foreach_all_gather_copy_out` / `foreach_reduce`) and hand arithmetic on stated facts: llama-3.1-8b has
8,030,261,248 parameters; an H100 SXM moves 3.35e12 B/s of HBM, of which contiguous copies reach 0.8837
(elementwise_bandwidth.csv `vectorized`: a 1 GiB device-to-device copy on the H200)."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.api import estimate
from gpuplan.errors import GpuplanError
from gpuplan.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
P = 8_030_261_248
COPY_RATE = 3.35e12 * 0.8837
# per parameter a micro-batch: two gathers (forward, backward re-gather) x (read 2 + write 2) of bf16, and the bf16
# gradient read (2) and written as fp32 (4) into the reduce-scatter buffer
PER_PARAM = 2 * (2 + 2) + (2 + 4)
BASE = {"model": "llama-3.1-8b", "task": "train", "framework": "torchtitan",
        "hardware": {"gpu": "h100-sxm", "count": 8},
        "parallel": {"zero": 3}, "train": {"seq_len": 4096, "micro_batch": 1, "global_batch": 64, "recompute": "none"}}


def scn(framework: str = "torchtitan", **parallel) -> dict:
    d = copy.deepcopy(BASE)
    d["framework"] = framework
    d["parallel"].update(parallel)
    return d


def test_fsdp2_copy_bytes_are_the_traced_fully_shard_copies():
    """Two CPU ranks run torch's own fully_shard (bf16 parameters, fp32 reduce, NeMo RL's wrapping) and count the
    bytes of its copy-out and gradient copy-in: the constants the speed model prices are those counts."""
    pytest.importorskip("torch")
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is needed to run fully_shard on CPU ranks")
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "trace_fsdp2_copy_bytes.py"), "29547"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    from gpuplan.estimate import speed
    assert got["gathers"] == speed.FSDP2_GATHERS_PER_MICROBATCH == 2
    assert (got["copy_out_read"] + got["copy_out_write"]) / got["gathers"] == speed.FSDP2_COPY_OUT_BYTES == 4.0
    assert (got["copy_in_read"], got["copy_in_write"]) == (2.0, 4.0)
    assert got["copy_out_read"] + got["copy_out_write"] + got["copy_in_read"] + got["copy_in_write"] == PER_PARAM


def test_fsdp2_copies_by_hand():
    """Llama 3.1 8B on 8 H100 SXM, FSDP2 over all 8: 64 sequences of 4,096 = 8 micro-batches a rank, each copying
    14 bytes of every parameter (tp 1: the whole model) at the copy rate; the step grows by exactly that against
    FSDP1 (the gathers stay hidden under the compute either way)."""
    fsdp2 = estimate(scn()).performance
    fsdp1 = estimate(scn(fsdp_version=1)).performance
    m = fsdp2.details["microbatches"]
    assert m == 8
    want = m * P * PER_PARAM / COPY_RATE
    assert fsdp2.details["fsdp2_copy_s"] == pytest.approx(want, rel=1e-3)
    assert "fsdp2_copy_s" not in fsdp1.details
    assert fsdp2.breakdown["exposed_comm"] == fsdp1.breakdown["exposed_comm"] == 0.0
    assert fsdp2.step_time_s - fsdp1.step_time_s == pytest.approx(want, rel=1e-3)


def test_fsdp2_copies_split_over_tensor_parallel():
    """Under TP each rank's FSDP units hold its TP shard: an eighth of the parameters at tp 8 (16 GPUs, dp 2)."""
    d = scn(tp=8)
    d["hardware"] = {"gpu": "h100-sxm", "count": 16, "gpus_per_node": 8, "network": "ib-ndr-400"}
    perf = estimate(d).performance
    m = perf.details["microbatches"]
    assert perf.details["fsdp2_copy_s"] == pytest.approx(m * P / 8 * PER_PARAM / COPY_RATE, rel=1e-3)


def test_only_fsdp2_stacks_copy():
    """hf shards with FSDP2 as gpuplan's launch writes it (accelerate fsdp_version 2) unless fsdp_version 1 says
    FSDP1; no sharding (one GPU) has none."""
    assert estimate(scn("hf")).performance.details["fsdp2_copy_s"] > 0
    assert "fsdp2_copy_s" not in estimate(scn("hf", fsdp_version=1)).performance.details
    one = scn()
    one["hardware"]["count"] = 1
    one["train"]["global_batch"] = 8
    assert "fsdp2_copy_s" not in estimate(one).performance.details


@pytest.mark.parametrize("framework,par", [("megatron", {"zero": 1}), ("deepspeed", {"zero": 3}),
                                           ("torchtitan", {"zero": 2})])
def test_fsdp_version_is_refused_where_no_torch_fsdp_shards(framework, par):
    """Megatron and DeepSpeed shard with their own code; below zero 3 nothing is fully sharded."""
    d = scn(framework, **par, fsdp_version=2)
    with pytest.raises(GpuplanError) as err:
        scenario_from_dict(d, "t")
    assert "fsdp_version" in str(err.value)


def test_gathered_rows_carry_their_fsdp():
    """verl @44a65f9 (VL rows) wraps FullyShardedDataParallel (FSDP1); NeMo RL's DTensor worker (NB02, NB04) and
    verl's fsdp2 strategy fully_shard (FSDP2)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import csv
    import validate_gathered as vg
    rows = {r["id"]: r for r in csv.DictReader(open(ROOT / "validation" / "gathered" / "posttrain.csv",
                                                    encoding="utf-8"))}
    assert vg.posttrain_scenario(rows["VL01"])["parallel"]["fsdp_version"] == 1
    assert vg.posttrain_scenario(rows["NB02"])["parallel"]["fsdp_version"] == 2
    assert vg.posttrain_scenario(rows["NB04"])["parallel"]["fsdp_version"] == 2
    assert "fsdp_version" not in vg.posttrain_scenario(rows["NB01"])["parallel"]       # Megatron


# ---- transformers' modules under the FSDP2 profile (train.hf_modules) -------------------------------------------
H, I, KV, L = 4096, 14336, 1024, 32      # Llama 3.1 8B: hidden, MLP width, k/v width (8 heads x 128), layers


def test_hf_modules_price_transformers_layer_kernels():
    """NeMo RL's DTensor worker runs transformers' LlamaDecoderLayer under FSDP2: its eager element-wise bytes are the
    traced hf layer's, 358.188 h + 28 i + 52 kv a token (fwd + bwd), at the hf layer's measured share 0.5870 of the
    HBM rate, instead of torchtitan's layer, 361.88 h + 29.6 i + 17.415 kv at 0.6816 (elementwise.EAGER_MEASURED and
    elementwise_bandwidth.csv, both measured on the H200). 8 micro-batches of 4,096 tokens, 32 layers, no recompute;
    nothing else changes (the loss is aten's upcast cross entropy either way)."""
    tt = estimate(scn()).performance
    d = scn()
    d["train"]["hf_modules"] = True
    hf = estimate(d).performance
    tokens = 8 * 4096 * L
    bw = 3.35e12
    want = tokens * ((358.188 * H + 28 * I + 52 * KV) / (bw * 0.5870) - (361.88 * H + 29.6 * I + 17.415 * KV) / (bw * 0.6816))
    assert hf.breakdown["compute_memory_bound"] - tt.breakdown["compute_memory_bound"] == pytest.approx(want, rel=1e-3)
    assert hf.breakdown["compute_matmul"] == tt.breakdown["compute_matmul"]
    assert hf.details["fsdp2_copy_s"] == tt.details["fsdp2_copy_s"]


@pytest.mark.parametrize("framework,par", [("megatron", {"zero": 1}), ("hf", {"zero": 3}), ("deepspeed", {"zero": 3})])
def test_hf_modules_is_the_torchtitan_profiles_switch(framework, par):
    d = scn(framework, **par)
    d["train"]["hf_modules"] = True
    with pytest.raises(GpuplanError) as err:
        scenario_from_dict(d, "t")
    assert "hf_modules" in str(err.value)


def test_gathered_rows_run_transformers_modules():
    """The DTensor rows and verl's rows train AutoModelForCausalLM; Megatron rows do not take the switch."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import csv
    import validate_gathered as vg
    rows = {r["id"]: r for r in csv.DictReader(open(ROOT / "validation" / "gathered" / "posttrain.csv",
                                                    encoding="utf-8"))}
    for rid in ("NB02", "NB04", "VL01"):
        assert vg.posttrain_scenario(rows[rid])["train"]["hf_modules"] is True
    assert "hf_modules" not in vg.posttrain_scenario(rows["NB01"])["train"]


def test_hf_launch_writes_fsdp2_and_refuses_fsdp1():
    from gpuplan.launch import launch_files
    d = scn("hf")
    text = "\n".join(launch_files(scenario_from_dict(d, "t"), "hf").values())
    assert "fsdp_version: 2" in text or '"fsdp_version": 2' in text
    with pytest.raises(GpuplanError) as err:
        launch_files(scenario_from_dict(scn("hf", fsdp_version=1), "t"), "hf")
    assert "fsdp_version" in str(err.value)
