"""vLLM V0's per-step host work (engine_host.vllm_v0_host; docs/posttrain.md, *vLLM V0's per-sequence host work*):
the constants against the timings they were read from (scripts/bench_vllm_v0_host.py on vLLM v0.6.3's own code), the
rule that prices them (serial with the forward, part per sequence group, the output share beside the next forward when
V0's async output processor runs), and the RL rollout routed through the V0 engine. Expected values are the measured
figures or worked by hand from the constants."""
import pytest

from gpuplan import api, pipeline
from gpuplan.errors import GpuplanError
from gpuplan.estimate import engine_host as eh
from gpuplan.estimate.engine_host import engine_host, vllm_v0_host
from gpuplan.estimate.load.engines import engine_policy
from gpuplan.estimate.speed import serving_model
from script_module import load_script

vg = load_script("scripts/validate_gathered.py")

# the timed slopes (us per running sequence per step, best steps, reference host's generation): sampling width n
# -> (schedule, prepare_model_input, output processing, sampler host side)
MEASURED = {1: (13.1, 8.85, 5.3, 12.8), 5: (6.7, 5.69, 3.9, 5.2)}


@pytest.mark.parametrize("n", [1, 5])
def test_constants_reproduce_the_timed_widths(n):
    parts = ((eh.VLLM_V0_SCHEDULE_SEQ_S, eh.VLLM_V0_SCHEDULE_GROUP_S),
             (eh.VLLM_V0_PREPARE_SEQ_S, eh.VLLM_V0_PREPARE_GROUP_S),
             (eh.VLLM_V0_OUTPUT_SEQ_S, eh.VLLM_V0_OUTPUT_GROUP_S),
             (eh.VLLM_V0_SAMPLER_SEQ_S, eh.VLLM_V0_SAMPLER_GROUP_S))
    for (s, g), us in zip(parts, MEASURED[n]):
        assert (s + g / n) * 1e6 == pytest.approx(us, abs=0.06)


def test_v0_host_is_serial_and_sums_its_parts():
    h = engine_host("vllm", vllm_v0=True)
    assert h == vllm_v0_host()
    assert not h.overlapped                                   # V0 schedules between forwards
    assert not engine_host("vllm", async_scheduling=True, vllm_v0=True).overlapped
    assert h.seq_s * 1e6 == pytest.approx(5.1 + 4.9 + 3.6 + 3.3, abs=0.05)
    assert h.group_s * 1e6 == pytest.approx(8.0 + 3.95 + 1.7 + 9.5, abs=0.05)
    assert (h.output_seq_s, h.output_group_s) == (eh.VLLM_V0_OUTPUT_SEQ_S, eh.VLLM_V0_OUTPUT_GROUP_S)
    assert engine_host("vllm").group_s == 0.0 and engine_host("vllm").seq_s == pytest.approx(4.52e-6)   # V1 as before


def _v0(**infer):
    scn = {"model": "deepseek-llm-7b-chat", "task": "infer", "hardware": {"gpu": "mi300x", "count": 2},
           "parallel": {"tp": 2},
           "infer": {"engine": "vllm", "prompt_len": 82, "output_len": 942, "concurrency": 1024, "vllm_v0": True,
                     "max_num_seqs": 1024, **infer}}
    r = pipeline.resolve(scn)
    return serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network,
                         memory=pipeline.memory(r))


def test_eager_v0_step_adds_its_host_work_by_hand():
    # enforce_eager: no async output processor, so the whole host work follows the forward; the MI300X's usual host
    # is the reference host (speed 1)
    for n in (1, 5):
        sv = _v0(cuda_graphs=False, parallel_samples=n)
        assert sv.host_speed == pytest.approx(1.0)
        st = sv.decode_step(1000, 300)
        per_seq = (5.1 + 4.9 + 3.6 + 3.3 + (8.0 + 3.95 + 1.7 + 9.5) / n) * 1e-6
        assert st["time"] - st["gpu_time"] == pytest.approx(1000 * per_seq, rel=1e-3)


def test_async_output_share_runs_beside_the_forward():
    # with CUDA graphs V0's async output processor runs the output share during the next forward:
    # step = max(GPU, output share) + the rest
    sv = _v0(cuda_graphs=True, parallel_samples=5)
    st = sv.decode_step(256, 300)
    out = 256 * (3.6 + 1.7 / 5) * 1e-6
    rest = 256 * (5.1 + 4.9 + 3.3 + (8.0 + 3.95 + 9.5) / 5) * 1e-6
    assert st["time"] == pytest.approx(max(st["gpu_time"], out) + rest, rel=1e-6)
    assert st["gpu_time"] > out            # a decode step of a 7B model outlasts the output share here


def test_v0_preempts_without_prefix_caching():
    # V0's EngineArgs.enable_prefix_caching defaults to False (v0.6.3): a preempted request keeps no cached blocks
    r = pipeline.resolve({"model": "deepseek-llm-7b-chat", "task": "infer", "hardware": {"gpu": "mi300x", "count": 1},
                          "infer": {"engine": "vllm", "prompt_len": 82, "output_len": 512, "concurrency": 64,
                                    "vllm_v0": True}})
    sv = serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network, memory=pipeline.memory(r))
    cap = int(r.gpu.usable_memory_bytes)
    assert engine_policy(r.scenario, sv, cap)[0].keep_preempted is False
    r1 = pipeline.resolve({**r.scenario.model_dump(exclude_none=True), "infer": {
        **r.scenario.infer.model_dump(exclude_none=True), "vllm_v0": False}})
    sv1 = serving_model(r1.scenario, r1.model, r1.gpu, params=r1.speed_params, network=r1.network,
                        memory=pipeline.memory(r1))
    assert engine_policy(r1.scenario, sv1, cap)[0].keep_preempted is True


def _rows():
    import csv
    from pathlib import Path
    with (Path(__file__).resolve().parents[1] / "validation" / "gathered" / "posttrain.csv").open(
            newline="", encoding="utf-8") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_verl_rows_roll_out_on_v0_with_their_group():
    from gpuplan.estimate.rl import rollout_scenario
    from gpuplan.scenario import scenario_from_dict
    rows = _rows()
    for rid, n in (("VL01", 5), ("VL02", 1)):
        d = vg.posttrain_scenario(rows[rid])
        assert d["train"]["rl"]["engine_vllm_v0"] is True          # engine_version 0.6.3
        inf = rollout_scenario(scenario_from_dict(d, rid)).infer
        assert inf.vllm_v0 and inf.parallel_samples == n
    # rows of vLLM V1 rollouts stay on V1
    for rid, r in rows.items():
        scored = not r["notes"].startswith(vg.UNSCORED)
        if scored and r["engine"] == "vllm" and (not r["engine_version"] or not vg.vllm_v0(r["engine_version"])):
            assert "engine_vllm_v0" not in vg.posttrain_scenario(r)["train"]["rl"]
            break


def test_engine_vllm_v0_refuses_the_v1_in_process_core():
    d = vg.posttrain_scenario(_rows()["VL02"])
    d["train"]["rl"]["engine_in_process"] = True
    with pytest.raises(GpuplanError, match="engine_vllm_v0"):
        api.estimate(d)
