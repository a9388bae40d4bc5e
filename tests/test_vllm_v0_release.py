"""vLLM V0's host work by release (infer.vllm_v0_release; engine_host.vllm_v0_host, data/vllm_v0_host.csv; docs/speed.md
§3.35). Expected values are the timings scripts/bench_vllm_v0_host.py printed on this project's development machine on
2026-12-04 (vllm-0.5.4 PyPI wheel, git 4db5176d, beside the vllm-0.6.3 sources; lowest of two interleaved repetitions
per part) and the release dates of vLLM's async output processor (0.6.0), worked by hand."""
import pytest

from gpuplan import pipeline
from gpuplan.errors import GpuplanError
from gpuplan.estimate import engine_host as eh
from gpuplan.estimate.datafiles import rows
from gpuplan.estimate.speed import serving_model
from gpuplan.scenario import scenario_from_dict
from script_module import load_script

vg = load_script("scripts/validate_gathered.py")

# the printed slopes, us per running sequence per step: (engine side, --prepare, sampler at width 0)
TIMED_054 = {1: (18.12, 9.32, 17.84), 5: (9.98, 6.02, 5.80)}
TIMED_063 = {1: (18.32, 8.50, 14.80), 5: (10.07, 5.84, 5.39)}


def test_table_holds_the_printed_timings():
    t = {int(r["n"]): r for r in rows("vllm_v0_host.csv") if r["release"] == "0.5.4"}
    assert set(t) == {1, 5}
    for n in (1, 5):
        r = t[n]
        assert r["commit"].startswith("4db5176d") and r["ref_release"] == "0.6.3"
        assert (float(r["engine_us"]), float(r["prepare_us"]), float(r["sampler_us"])) == TIMED_054[n]
        assert (float(r["ref_engine_us"]), float(r["ref_prepare_us"]), float(r["ref_sampler_us"])) == TIMED_063[n]
        assert float(r["per_seq_us"]) == pytest.approx(sum(TIMED_054[n]), abs=0.01)
        assert float(r["ref_per_seq_us"]) == pytest.approx(sum(TIMED_063[n]), abs=0.01)


def test_side_by_side_063_reproduces_the_reference_constants():
    # the 0.6.3 timing beside 0.5.4 lands within 4 % of the reference constants' own timing (40.1 and 21.5 us):
    # the session's machine load did not shift the scale the ratios are taken against
    for n, ref in ((1, 40.1), (5, 21.5)):
        assert sum(TIMED_063[n]) == pytest.approx(ref, rel=0.04)


def test_054_scales_the_constants_by_the_timed_ratios_without_output_overlap():
    # per_seq(n) = seq + group / n from n = 1 and n = 5, by hand
    g054 = (sum(TIMED_054[1]) - sum(TIMED_054[5])) * 5 / 4          # 29.35
    s054 = sum(TIMED_054[1]) - g054                                 # 15.93
    g063 = (sum(TIMED_063[1]) - sum(TIMED_063[5])) * 5 / 4          # 25.40
    s063 = sum(TIMED_063[1]) - g063                                 # 16.22
    h0, h = eh.vllm_v0_host(), eh.vllm_v0_host(1, None, "0.5.4")
    assert h.seq_s == pytest.approx(h0.seq_s * s054 / s063, rel=1e-9)
    assert h.group_s == pytest.approx(h0.group_s * g054 / g063, rel=1e-9)
    assert (h.output_seq_s, h.output_group_s) == (0.0, 0.0)         # no async output processor before 0.6.0
    assert not h.overlapped
    # n = 1: 8 % more host work than 0.6.3's code, as timed (45.28 / 41.62)
    assert (h.seq_s + h.group_s) / (h0.seq_s + h0.group_s) == pytest.approx(45.28 / 41.62, rel=0.01)


def test_release_picks_the_newest_timed_code_not_newer():
    assert eh.timed_release(None) == eh.timed_release("0.6.0") == eh.timed_release("0.7.3") == "0.6.3"
    assert eh.timed_release("0.5.4") == eh.timed_release("0.5.5") == "0.5.4"
    for rel in ("0.6.0", "0.6.3", "0.7.3"):
        assert eh.vllm_v0_host(1, None, rel) == eh.vllm_v0_host()     # 0.6.x rows do not move
    assert eh.engine_host("vllm", vllm_v0=True, vllm_v0_release="0.5.4") == eh.vllm_v0_host(1, None, "0.5.4")
    with pytest.raises(ValueError):
        eh.timed_release("0.5.3")


def _scn(**infer):
    return {"model": "llama-3-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
            "infer": {"engine": "vllm", "prompt_len": 256, "output_len": 256, "concurrency": 256, "vllm_v0": True,
                      **infer}}


@pytest.mark.parametrize("infer, match", [
    ({"vllm_v0": False, "vllm_v0_release": "0.5.4"}, "vllm_v0_release"),
    ({"vllm_v0_release": "0.5.3"}, "0.5.4"),
    ({"vllm_v0_release": "0.8.0"}, "0.8.0"),
    ({"vllm_v0_release": "0.5.5", "num_scheduler_steps": 8}, "multi-step"),
    ({"vllm_v0_release": "0.5"}, r"'0\.5', not a release number: write it as MAJOR\.MINOR\.PATCH .*e\.g\. 0\.6\.3"),
])
def test_scenario_refuses(infer, match):
    with pytest.raises((GpuplanError, ValueError), match=match):
        scenario_from_dict(_scn(**infer), "t")


def test_other_engines_refuse_the_release():
    d = _scn(vllm_v0_release="0.5.4")
    d["infer"].pop("vllm_v0")
    d["infer"]["engine"] = "sglang"
    with pytest.raises((GpuplanError, ValueError), match="vllm_v0_release"):
        scenario_from_dict(d, "t")


def _sv(**infer):
    r = pipeline.resolve(_scn(**infer))
    return serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network,
                         memory=pipeline.memory(r))


def test_054_step_is_forward_plus_all_host_work():
    # CUDA graphs on: 0.6.3 runs the output share (5.3 us a sequence at n = 1) beside the forward, 0.5.4 has no async
    # output processor, so its whole host work follows the forward
    sv0, sv = _sv(), _sv(vllm_v0_release="0.5.4")
    st0, st = sv0.decode_step(256, 384), sv.decode_step(256, 384)
    assert st["gpu_time"] == pytest.approx(st0["gpu_time"], rel=1e-9)
    h = eh.vllm_v0_host(1, None, "0.5.4")
    assert st["time"] == pytest.approx(st["gpu_time"] + 256 * (h.seq_s + h.group_s) / sv.host_speed, rel=1e-6)
    h0 = eh.vllm_v0_host()
    out = 256 * (h0.output_seq_s + h0.output_group_s) / sv0.host_speed
    assert st0["time"] == pytest.approx(max(st0["gpu_time"], out) + 256 * (h0.seq_s + h0.group_s) / sv0.host_speed
                                        - out, rel=1e-6)


def test_validate_gathered_reads_the_release():
    assert vg.vllm_release("0.5.4.dev (main 2024-08-04, V0 engine)") == "0.5.4"
    assert vg.vllm_release("0.6.0 (V0 engine; --num-scheduler-steps 10 --max_model_len 4096)") == "0.6.0"
    assert vg.vllm_release("0.6 V0 (release not stated; V0 from the blog date 2024-10-10)") is None
    row = {"model": "llama-3-8b", "gpu": "h100-sxm", "gpus": "1", "engine": "vllm", "weights": "bf16",
           "kv_cache": "bf16", "prompt_len": "256", "output_len": "256", "concurrency": "1000", "tp": "",
           "max_num_seqs": "256", "engine_version": "0.5.4.dev (main 2024-08-04, V0 engine)", "source": "",
           "notes": ""}
    assert vg.serve_scenario(row)["infer"]["vllm_v0_release"] == "0.5.4"
