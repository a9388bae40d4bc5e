"""verl's rollout on vLLM's V0 engine (rl.engine_vllm_v0; docs/speed.md §3.34): the engine's running cap and tokens
per step as verl @44a65f9 builds it on vLLM 0.6.3, and the weight round trip through pageable host memory plus the KV
rebuild that verl's `gen` timer holds every step. Expected values come from the pinned source (vLLM 0.6.3's
EngineArgs default, verl's rollout config and wrappers), the model's parameter count and the cited rates, worked by
hand; none from the code under test."""
import csv
from pathlib import Path

import pytest

from gpuplan import api
from gpuplan.estimate import rl as R
from gpuplan.estimate.calibration import packaged
from gpuplan.estimate.load.engines import engine_policy
from gpuplan.estimate.memory import estimate_memory
from gpuplan.estimate.speed import _Serving, _network, memory_rate
from gpuplan.hardware import get_gpu
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict
from script_module import load_script

vg = load_script("scripts/validate_gathered.py")

# deepseek-llm-7b-chat (config.json: hidden 4096, intermediate 11008, 30 layers, vocab 102400, untied head):
# embedding + head 2 x 102400 x 4096, per layer 4 x 4096^2 (q, k, v, o) + 3 x 4096 x 11008 (gate, up, down) + 2 x 4096
# (norms), final norm 4096
DEEPSEEK_7B_PARAMS = 2 * 102400 * 4096 + 30 * (4 * 4096 ** 2 + 3 * 4096 * 11008 + 2 * 4096) + 4096


def _rows():
    path = Path(__file__).resolve().parents[1] / "validation" / "gathered" / "posttrain.csv"
    with path.open(newline="", encoding="utf-8") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def _scn(rid):
    return scenario_from_dict(vg.posttrain_scenario(_rows()[rid]), rid)


@pytest.mark.parametrize("rid", ["VL01", "VL02"])
def test_verl_v0_engine_runs_256_sequences_and_8192_tokens(rid):
    # vLLM 0.6.3 EngineArgs.max_num_seqs = 256 (arg_utils.py L115); verl passes max_num_batched_tokens 8192
    # (ppo_trainer.yaml L85) but not rollout.max_num_seqs 1024 (L87) (vllm_rollout.py L101-115 @44a65f9)
    scn = _scn(rid)
    gpu = get_gpu(scn.hardware.gpu)
    cap = int(gpu.usable_memory_bytes)
    inf = R.rollout_scenario(scn, cap)
    assert (inf.infer.max_num_seqs, inf.infer.max_num_batched_tokens) == (256, 8192)
    model = get_model(scn.model)
    sv = _Serving(inf, model, gpu, packaged(), None, _network(scn, gpu), estimate_memory(inf, model, cap))
    policy, _ = engine_policy(inf, sv, cap)
    assert (policy.max_num_seqs, policy.token_budget) == (256, 8192)


def test_v1_rollouts_keep_the_llm_class_defaults():
    # a NeMo RL row (vLLM V1 on an H100: >= 70 GiB, not an A100) keeps 1024 / 16384
    rows = _rows()
    rid = next(k for k, r in rows.items() if r["framework"] == "nemo-rl" and r["engine"] == "vllm"
               and not r["notes"].startswith("unscored:"))
    scn = scenario_from_dict(vg.posttrain_scenario(rows[rid]), rid)
    inf = R.rollout_scenario(scn, int(get_gpu(scn.hardware.gpu).usable_memory_bytes))
    assert (inf.infer.max_num_seqs, inf.infer.max_num_batched_tokens) == (1024, 16384)


@pytest.mark.parametrize("rid,tp", [("VL01", 2), ("VL02", 4)])
def test_engine_reload_moves_the_engine_shard_out_and_back(rid, tp):
    scn = _scn(rid)
    gpu = get_gpu(scn.hardware.gpu)
    cap = int(gpu.usable_memory_bytes)
    parts = R.engine_reload_time(scn, get_model(scn.model), cap, gpu, packaged())
    shard = 2 * DEEPSEEK_7B_PARAMS / tp          # bf16 weights of one TP rank (vocabulary and head split too)
    # the pageable copy of NVIDIA-NeMo/RL issue 3976 (16.1 GB/s), below the MI300X host link (PCIe 5 x16)
    assert parts["weights_out"] == pytest.approx(shard / 16.1e9, rel=0.02)
    assert parts["weights_back"] == pytest.approx(shard / 16.1e9, rel=0.02)
    # KV rebuild: the pinned 4 GiB swap space zeroed by one host thread at 24.1 GB/s, plus the GPU pool at its rate
    swap = 4 * 2 ** 30 / 24.1e9
    assert swap < parts["kv_init"] < swap + 192e9 / memory_rate(packaged(), gpu)


def test_engine_reload_is_a_verl_gen_phase_only_on_v0():
    est = api.estimate(vg.posttrain_scenario(_rows()["VL01"]))
    phases = est.performance.details["phases_s"]
    assert phases["engine_reload"] > 0
    assert "engine_reload" in vg.VERL_PHASES["generation_time_s"]
    # a V1 rollout (NeMo RL) has no such phase
    rows = _rows()
    rid = next(k for k, r in rows.items() if r["framework"] == "nemo-rl" and not r["notes"].startswith("unscored:"))
    assert "engine_reload" not in api.estimate(vg.posttrain_scenario(rows[rid])).performance.details["phases_s"]
    scn = scenario_from_dict(vg.posttrain_scenario(rows[rid]), rid)
    gpu = get_gpu(scn.hardware.gpu)
    assert sum(R.engine_reload_time(scn, get_model(scn.model), int(gpu.usable_memory_bytes), gpu,
                                    packaged()).values()) == 0.0


# V0's host work timed under CPython 3.9 + torch 2.4.0 (scripts/bench_vllm_v0_host.py on the vLLM 0.6.3 sources; the
# lowest of two runs each): engine (schedule + output), prepare_model_input, sampler host side at width 0
PY39_MEASURED_US = {1: (34.44, 13.17, 20.45), 5: (18.28, 8.09, 6.91)}


@pytest.mark.parametrize("n", [1, 5])
def test_py39_constants_reproduce_the_timed_widths(n):
    from gpuplan.estimate.engine_host import vllm_v0_host
    h = vllm_v0_host(1, "3.9")
    assert (h.seq_s + h.group_s / n) * 1e6 == pytest.approx(sum(PY39_MEASURED_US[n]), abs=0.05)
    h311 = vllm_v0_host(1)
    assert vllm_v0_host(1, "3.11") == h311
    # 3.9 costs more per sequence and more per group than the 3.11 reference (41.4 / 21.4 us re-timed: 40.1 / 21.5)
    assert h.seq_s > h311.seq_s and h.group_s > h311.group_s
    assert not h.overlapped


def test_verl_rows_run_their_engine_under_python_39():
    for rid in ("VL01", "VL02"):
        d = vg.posttrain_scenario(_rows()[rid])
        assert d["train"]["rl"]["engine_python"] == "3.9"
        inf = R.rollout_scenario(scenario_from_dict(d, rid)).infer
        assert inf.python_version == "3.9"
    # a row without the column keeps the reference timing
    d = vg.posttrain_scenario(_rows()["VL01"])
    del d["train"]["rl"]["engine_python"]
    assert R.rollout_scenario(scenario_from_dict(d, "VL01")).infer.python_version is None


def test_py39_host_step_by_hand():
    # the serving engine's per-step host term for 256 running sequences of groups of 5 under 3.9, at the reference
    # host's speed: (24.58 + 43.48 / 5) us x 256
    d = vg.posttrain_scenario(_rows()["VL01"])
    scn = scenario_from_dict(d, "VL01")
    gpu = get_gpu(scn.hardware.gpu)
    cap = int(gpu.usable_memory_bytes)
    inf = R.rollout_scenario(scn, cap)
    model = get_model(scn.model)
    sv = _Serving(inf, model, gpu, packaged(), None, _network(scn, gpu), estimate_memory(inf, model, cap))
    assert sv.host_step(256) * sv.host_speed == pytest.approx((24.58 + 43.48 / 5) * 1e-6 * 256, rel=0.002)
