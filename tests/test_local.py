"""gpuplan.local: GPU detection parsers on recorded fixtures, the OOM explainer, the no-GPU paths of
calibrate/measure, hardware profiles, and doctor's fit grid. CPU only, no GPU needed."""
from __future__ import annotations

import importlib
import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpuplan.errors import InputError, MissingExtraError, UnsupportedError
from gpuplan.local import cli as local_cli
from gpuplan.local.calibrate import (SCHEMA, CommPoint, GemmPoint, HardwareProfile, NoLocalGpuError, load_profile,
                                     profile_from_dict, require_cuda, save_profile)
from gpuplan.local.oom import candidate_knobs, evaluate_knobs, explain_oom, parse_oom
from gpuplan.scenario import scenario_from_dict
from gpuplan.units import GiB, MiB

det = importlib.import_module("gpuplan.local.detect")   # the module (the package re-exports a function of that name)
FIX = Path(__file__).parent / "fixtures" / "local"
OOM = FIX / "oom"


def read(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------- detection

def test_nvidia_smi_q_8xh100():
    s = det.parse_nvidia_smi_q(read("nvidia-smi-q_8xH100.txt"))
    assert s.source == "nvidia-smi" and s.driver_version == "550.90.07" and s.cuda_version == "12.4"
    assert len(s.gpus) == 8
    assert {g.catalog_id for g in s.gpus} == {"h100-sxm"} and all(g.match == "exact" for g in s.gpus)
    g0, g7 = s.gpus[0], s.gpus[7]
    assert g0.name == "NVIDIA H100 80GB HBM3" and g0.total_bytes == 81559 * MiB
    assert g0.used_bytes == 72790 * MiB and g0.free_bytes == 8218 * MiB and g0.reserved_bytes == 551 * MiB
    assert g7.free_bytes == 81007 * MiB and g7.bus_id == "00000000:DB:00.0"
    assert g0.architecture == "Hopper" and g0.mig_mode == "Disabled" and g0.uuid.startswith("GPU-")
    assert [g.index for g in s.gpus] == list(range(8))


def test_topo_matrix_nvlink_and_pcie():
    links = det.parse_topo_matrix(read("nvidia-smi-topo-m_8xH100.txt"))
    assert len(links) == 28 and all(l.kind == "nvlink" and l.nvlinks == 18 for l in links)
    s = det.LocalSystem(gpus=det.parse_nvidia_smi_q(read("nvidia-smi-q_8xH100.txt")).gpus, links=links)
    assert s.interconnect_summary() == "all 8 GPUs linked pairwise by NVLink (NV18)"
    pcie = det.parse_topo_matrix(read("nvidia-smi-topo-m_8xRTX4090.txt"))
    assert len(pcie) == 28 and {l.kind for l in pcie} == {"pcie"} and {l.code for l in pcie} == {"SYS"}
    assert "SMP interconnect" in pcie[0].description
    assert det.parse_topo_matrix("no matrix here") == ()


def test_nvidia_smi_xml_h200_by_memory():
    s = det.parse_nvidia_smi_xml(read("nvidia-smi-q-x_2xH200.xml"))
    assert s.driver_version == "570.86.15" and s.cuda_version == "12.8"
    assert [g.catalog_id for g in s.gpus] == ["h200-sxm", "h200-sxm"] and s.gpus[0].match == "by-memory"
    assert s.gpus[1].used_bytes == 40213 * MiB and s.gpus[1].total_bytes == 143771 * MiB


def test_rocm_smi_json_unknown_card():
    s = det.parse_rocm_smi_json(read("rocm-smi_7900xt.json"))
    (g,) = s.gpus
    assert g.vendor == "amd" and g.name == "Radeon RX 7900 XT" and g.catalog_id is None
    assert g.total_bytes == 21458059264 and g.free_bytes == 21458059264 - 27856896 and g.architecture == "gfx1100"


@pytest.mark.parametrize("name,expected", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA H20", "h20"), ("NVIDIA H200", "h200-sxm"), ("NVIDIA H200 NVL", "h200-nvl"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"), ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("Tesla T4", "t4"), ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
    ("NVIDIA GH200 480GB", "gh200"), ("AMD Instinct MI300X", "mi300x"), ("NVIDIA L40S", "l40s"),
    ("Apple M2 Ultra", "m2-ultra"), ("Radeon RX 7900 XT", None), ("NVIDIA Quantum Flux 9000", None),
])
def test_match_catalog_exact_not_substring(name, expected):
    assert det.match_catalog(name, 143771 * MiB if "H200" in name else None)[0] == expected


def _runner(outputs: dict[str, str | None]):
    def run(cmd):
        return outputs.get(" ".join(cmd))
    return run


def test_detect_falls_back_to_nvidia_smi_text(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)        # nvidia-ml-py not installed
    s = det.detect(run=_runner({"nvidia-smi -q": read("nvidia-smi-q_8xH100.txt"),
                                "nvidia-smi topo -m": read("nvidia-smi-topo-m_8xH100.txt")}))
    assert s.source == "nvidia-smi" and len(s.gpus) == 8 and len(s.links) == 28
    assert any("pynvml" in n for n in s.notes)
    assert json.loads(json.dumps(s.to_json()))["interconnect"].startswith("all 8 GPUs")


def test_detect_nvml(monkeypatch):
    @dataclass
    class Mem:
        total: int = 81559 * MiB
        free: int = 80000 * MiB
        used: int = 1559 * MiB

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "550.90.07", nvmlSystemGetCudaDriverVersion=lambda: 12040,
        nvmlDeviceGetCount=lambda: 2, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3", nvmlDeviceGetMemoryInfo=lambda h: Mem(),
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}", nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=f"0000:{h}"),
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0),
        NVML_P2P_CAPS_INDEX_NVLINK=3, NVML_P2P_STATUS_OK=0, nvmlDeviceGetP2PStatus=lambda a, b, i: 0)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    s = det.detect(run=_runner({}))
    assert s.source == "nvml" and s.cuda_version == "12.4" and s.driver_version == "550.90.07"
    assert [g.catalog_id for g in s.gpus] == ["h100-sxm", "h100-sxm"] and s.gpus[0].compute_capability == "9.0"
    assert s.links[0].kind == "nvlink"


def test_detect_rocm_and_apple_and_nothing(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    amd = det.detect(run=_runner({"rocm-smi --showproductname --showmeminfo vram --json": read("rocm-smi_7900xt.json")}))
    assert amd.source == "rocm-smi" and amd.gpus[0].vendor == "amd"
    mac = det.detect(run=_runner({"sysctl -n hw.memsize": str(192 * GiB), "sysctl -n machdep.cpu.brand_string": "Apple M2 Ultra"}),
                     system="Darwin")
    assert mac.source == "apple" and mac.gpus[0].catalog_id == "m2-ultra" and mac.gpus[0].total_bytes == 144 * GiB
    none = det.detect(run=_runner({}), system="Linux")
    assert not none.has_gpu and none.source == "none"
    msg = det.no_gpu_message(none)
    assert msg.startswith("No GPU found") and "--oom" in msg and "--gpu" in msg and "\n" not in msg


# ---------------------------------------------------------------------------------------------- OOM

EXPECTED_KIND = {
    "new_fragmentation_h100.txt": "fragmentation",
    "new_shortage_with_traceback.txt": "shortage",
    "new_full_gpu.txt": "shortage",
    "new_exceeds_capacity.txt": "exceeds-capacity",
    "v21_capacty_fragmentation.txt": "fragmentation",
    "v21_process_shortage.txt": "shortage",
    "old_shortage.txt": "shortage",
    "old_fragmentation.txt": "fragmentation",
    "old_max_split_hint.txt": "shortage",
    "old_free_enough.txt": "unexplained",
    "v10_cached.txt": "unexplained",
    "hip_shortage.txt": "shortage",
    "hip_allowed_limit.txt": "process-limit",
    "hip_free_enough_fragmented.txt": "unexplained",
}


def test_every_oom_fixture_is_classified():
    assert sorted(EXPECTED_KIND) == sorted(p.name for p in OOM.glob("*.txt"))


@pytest.mark.parametrize("name,kind", sorted(EXPECTED_KIND.items()))
def test_oom_classification(name, kind):
    e = explain_oom((OOM / name).read_text())
    assert e.kind == kind, e.headline
    text = e.render()
    assert "memory_summary" in text and "_record_memory_history" in text and "_dump_snapshot" in text
    json.dumps(e.to_json())


def test_oom_new_form_numbers_and_fragmentation_advice():
    r = parse_oom((OOM / "new_fragmentation_h100.txt").read_text())
    assert (r.form, r.backend, r.device) == ("new", "cuda", 0)
    assert r.requested_bytes == round(35.60 * GiB) and r.total_bytes == round(79.33 * GiB)
    assert r.free_bytes == round(26.16 * GiB) and r.allocated_bytes == round(11.97 * GiB)
    assert r.reserved_unallocated_bytes == round(40.69 * GiB) and r.other_processes == ((76883, round(53.16 * GiB)),)
    e = explain_oom(r)
    advice = " ".join(e.advice)
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in advice and "max_split_size_mb" in advice
    assert e.deficit_if_defragmented_bytes == 0 and e.other_bytes < 0.1 * GiB   # "Process 76883" is this process
    assert "nvidia-smi -q -d MEMORY" in e.render()


def test_oom_real_shortage_by_how_much():
    e = explain_oom((OOM / "new_shortage_with_traceback.txt").read_text())
    assert e.report.process_bytes == round(18.73 * GiB)
    assert e.deficit_bytes == round(22.78 * GiB) - round(12.73 * GiB)
    assert e.deficit_if_defragmented_bytes == round(22.78 * GiB) - round(12.73 * GiB) - round(9.35 * GiB)
    assert "10.05 GiB short" in e.headline and any("Fragmentation contributes" in r for r in e.reasons)


def test_oom_old_form():
    r = parse_oom((OOM / "old_shortage.txt").read_text())
    assert r.form == "old" and r.allocated_bytes == round(10.85 * GiB)
    assert r.reserved_unallocated_bytes == round(10.86 * GiB) - round(10.85 * GiB)
    e = explain_oom(r)
    assert e.deficit_bytes == round(128 * MiB) - round(24.81 * MiB) and any("Old-format" in n for n in e.notes)
    cached = parse_oom((OOM / "v10_cached.txt").read_text())
    # PyTorch 1.0 printed the cache ("4.68 MiB cached") apart from allocated memory; never negative here
    assert cached.form == "old" and cached.reserved_unallocated_bytes == 0


def test_oom_other_processes_flagged():
    e = explain_oom((OOM / "old_max_split_hint.txt").read_text())
    assert e.other_bytes > 12 * GiB and e.advice[0].startswith("Free the GPU first")


def test_oom_hip_variants():
    e = explain_oom((OOM / "hip_shortage.txt").read_text())
    assert e.report.backend == "hip" and e.report.alloc_conf_var == "PYTORCH_HIP_ALLOC_CONF"
    assert "rocm-smi" in e.render()
    lim = explain_oom((OOM / "hip_allowed_limit.txt").read_text())
    assert lim.report.allowed_bytes == round(1.05 * GiB) and lim.report.private_pool_bytes == round(17 * MiB)


def test_oom_bad_input():
    with pytest.raises(InputError, match="no PyTorch"):
        parse_oom("Killed\nsegmentation fault")
    with pytest.raises(InputError, match="cut off"):
        parse_oom("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 8.00 GiB of which 1.00 GiB is free.")


# ---------------------------------------------------------------------------------------------- knobs

@dataclass
class _Mem:
    peak_bytes_per_gpu: int
    capacity_bytes_per_gpu: int = 80 * GiB
    components: dict = field(default_factory=dict)
    phase: str = "backward"


def _fake_estimate(scn):
    """A stand-in with simple, known effects per knob."""
    t, p = scn.train, scn.parallel
    weights = 16 * GiB if t.method == "full" else (8 * GiB if t.method == "lora" else 4 * GiB)
    states = {"adamw": 64 * GiB, "adamw-8bit": 16 * GiB}.get(t.optimizer, 0) if t.method == "full" else GiB
    if p.offload != "none":
        states = 0
    acts = {"none": 40, "selective": 30, "full": 5}[t.recompute] * GiB * t.micro_batch // 4 * t.seq_len // 4096
    if p.zero == 3:
        weights, states = weights // (p.dp or 1), states // (p.dp or 1)
    return types.SimpleNamespace(memory=_Mem(weights + states + acts))


def test_knobs_sorted_by_bytes_freed_with_stand_in():
    scn = scenario_from_dict({"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 8},
                              "train": {"method": "full", "seq_len": 4096, "micro_batch": 4}})
    peak, cap, knobs = evaluate_knobs(scn, estimate_fn=_fake_estimate, capacity_bytes=80 * GiB)
    assert peak == 120 * GiB and cap == 80 * GiB
    freed = [k.bytes_freed for k in knobs]
    assert freed == sorted(freed, reverse=True)
    names = [k.name for k in knobs]
    # stand-in peaks: qlora 4+1+40, lora 8+1+40, zero-3 2+8+40, offload 16+0+40, 8-bit 16+16+40 GiB ...
    assert names[:5] == ["method=qlora", "method=lora", "zero=3", "offload=optimizer", "optimizer=adamw-8bit"]
    assert [k.bytes_freed // GiB for k in knobs[:5]] == [75, 71, 70, 64, 48]
    # the least that frees anything is selective recompute (the stand-in ignores ZeRO-1/2 and master weights)
    positive = [k for k in knobs if k.bytes_freed > 0]
    assert positive[-1].name == "recompute=selective" and positive[-1].bytes_freed == 10 * GiB
    assert {k.name for k in knobs if k.bytes_freed == 0} == {"zero=1", "zero=2", "master_weights=false"}
    assert {"recompute=full", "optimizer=adamw-8bit", "method=lora", "method=qlora", "offload=optimizer",
            "micro_batch=2 (+accumulation)", "micro_batch=1 (+accumulation)", "seq_len=2048"} <= set(names)
    assert all(k.fits == (k.peak_bytes <= cap) for k in knobs)


def test_knob_that_cannot_be_evaluated_goes_last():
    scn = scenario_from_dict({"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "h100-sxm"},
                              "train": {"micro_batch": 2}})

    def est(s):
        if s.train.method == "qlora":
            raise UnsupportedError("qlora", "not modelled for this test.")
        return _fake_estimate(s)
    _, _, knobs = evaluate_knobs(scn, estimate_fn=est)
    assert knobs[-1].name == "method=qlora" and knobs[-1].error == "not modelled for this test."


def test_inference_knobs():
    scn = scenario_from_dict({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "l4"},
                              "infer": {"concurrency": 32, "prompt_len": 4096}})
    names = [k.name for k in candidate_knobs(scn)]
    assert names == ["kv_cache=fp8", "weights=fp8", "weights=awq-int4", "weights=gptq-int4", "concurrency=16",
                     "prompt_len=2048"]


def test_oom_with_scenario_against_real_estimator():
    pytest.importorskip("gpuplan.api")
    scn = scenario_from_dict({"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "a100-sxm-80gb"},
                              "train": {"method": "full", "seq_len": 4096, "micro_batch": 4}})
    e = explain_oom((OOM / "new_fragmentation_h100.txt").read_text(), scn)
    assert e.scenario_capacity_bytes == e.report.total_bytes and e.scenario_peak_bytes > 0
    freed = [k.bytes_freed for k in e.knobs if k.error is None]
    assert freed == sorted(freed, reverse=True) and freed[0] > 0
    by = {k.name: k for k in e.knobs}
    assert by["recompute=full"].bytes_freed > 0 and by["optimizer=adamw-8bit"].bytes_freed > 0
    assert "Knobs, most memory freed first" in e.render()


# ---------------------------------------------------------------------------------------------- calibrate / measure

def _no_cuda(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_require_cuda_refuses_cleanly(monkeypatch):
    _no_cuda(monkeypatch)
    with pytest.raises(NoLocalGpuError, match="needs a local GPU"):
        require_cuda("gpuplan calibrate")
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingExtraError):
        require_cuda("gpuplan calibrate")


@pytest.mark.parametrize("argv", [["calibrate", "--quick"], ["measure", str(FIX / "measure_scenario.yaml")]])
def test_calibrate_and_measure_without_gpu_exit_1(monkeypatch, capsys, argv, tmp_path):
    _no_cuda(monkeypatch)
    monkeypatch.setattr(det, "detect", lambda **kw: det.LocalSystem(notes=("`nvidia-smi` is not available or failed.",)))
    (FIX / "measure_scenario.yaml").exists() or pytest.skip("fixture missing")
    rc = local_cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 1 and "needs a local GPU" in err and "No GPU found" in err
    assert "Traceback" not in err and err.strip().count("\n") == 0


def test_calibrate_when_driver_sees_gpu_but_torch_does_not(monkeypatch, capsys):
    _no_cuda(monkeypatch)
    smi = det.parse_nvidia_smi_q(read("nvidia-smi-q_8xH100.txt"))
    monkeypatch.setattr(det, "detect", lambda **kw: smi)
    assert local_cli.main(["calibrate"]) == 1
    err = capsys.readouterr().err
    assert "driver does report 8 GPU(s)" in err and "CUDA 12.4" in err


def test_measure_refuses_model_parallel_layouts():
    from gpuplan.local.measure import _check_supported
    tp = scenario_from_dict({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 2},
                             "parallel": {"tp": 2}})
    with pytest.raises(UnsupportedError, match="tp=2"):
        _check_supported(tp)
    z3 = scenario_from_dict({"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 8},
                             "parallel": {"zero": 3}})
    with pytest.raises(UnsupportedError, match="ZeRO"):
        _check_supported(z3)
    dp = scenario_from_dict({"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 2},
                             "train": {"recompute": "selective"}})
    notes = _check_supported(dp)
    assert any("one replica" in n for n in notes) and any("selective" in n for n in notes)


def test_measure_result_table():
    from gpuplan.local.measure import MeasureResult
    r = MeasureResult(scenario={}, device_name="NVIDIA H100 80GB HBM3", torch_version="2.13",
                      measured={"peak_allocated_bytes": 50 * GiB, "peak_reserved_bytes": 52 * GiB,
                                "peak_device_used_bytes": 53 * GiB, "step_time_s": 1.0},
                      predicted={"peak_bytes_per_gpu": 55 * GiB, "peak_bytes_without_overhead": 54 * GiB,
                                 "step_time_s": 0.9, "tokens_per_s_per_gpu": None, "ttft_s": None, "tpot_s": None})
    err = r.relative_errors()
    assert err["peak_allocated"] == pytest.approx(0.08) and err["step_time"] == pytest.approx(-0.1)
    text = r.render()
    assert "peak allocated" in text and "+8%" in text and "time to first token" not in text


def _profile() -> HardwareProfile:
    return HardwareProfile(
        gpu_name="NVIDIA H100 80GB HBM3", gpu_id="h100-sxm", gpu_count=8, created="2026-01-01T00:00:00+00:00",
        torch_version="2.13.0", cuda_version="12.8", matmul_flops_per_s={"bf16": 7.0e14, "fp32": 5.0e13},
        matmul=(GemmPoint("bf16", 4096, 4096, 4096, 1.0e-3, 6.0e14), GemmPoint("bf16", 8192, 8192, 8192, 1.6e-3, 7.0e14)),
        memory_bandwidth_bytes_per_s=2.9e12, comm_bus_bandwidth_bytes_per_s={"all_reduce": 3.6e11},
        comm=(CommPoint("all_reduce", 2**28, 1.3e-3, 2.06e11, 3.6e11),), world_size=8)


def test_profile_round_trip_and_use(tmp_path):
    p = _profile()
    path = save_profile(p, tmp_path / "prof.json")
    assert json.loads(path.read_text())["schema"] == SCHEMA
    q = load_profile(path)
    assert q == p
    assert q.matmul_rate("bf16", 4000) == 6.0e14 and q.matmul_rate("bf16") == 7.0e14
    assert q.matmul_efficiency("bf16", 989.4e12) == pytest.approx(0.7075, rel=1e-3)
    assert q.matmul_efficiency("fp8", 1979e12) is None


def test_profile_validation(tmp_path):
    good = _profile().to_json()
    with pytest.raises(InputError, match="schema"):
        profile_from_dict({**good, "schema": "other/9"})
    with pytest.raises(InputError, match="matmul_flops_per_s"):
        profile_from_dict({k: v for k, v in good.items() if k != "matmul_flops_per_s"})
    with pytest.raises(InputError, match="positive"):
        profile_from_dict({**good, "matmul_flops_per_s": {"bf16": -1}})
    with pytest.raises(InputError, match="does not exist"):
        load_profile(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_profile(tmp_path / "bad.json")
    assert "ignored unknown fields: extra" in profile_from_dict({**good, "extra": 1}).notes


# ---------------------------------------------------------------------------------------------- doctor

def test_what_runs_grid_real_estimator():
    pytest.importorskip("gpuplan.api")
    from gpuplan.local.doctor import TASKS, what_runs
    r = what_runs("rtx-4090", 1, models=["llama-3.1-8b", "qwen3-0.6b", "llama-3.1-70b"])
    cells = {row.model: {c.task: c for c in row.cells} for row in r.rows}
    assert set(cells["qwen3-0.6b"]) == set(TASKS) and all(c.fits for c in cells["qwen3-0.6b"].values())
    assert not cells["llama-3.1-70b"]["infer-bf16"].fits and "at least" in cells["llama-3.1-70b"]["infer-bf16"].note
    assert cells["llama-3.1-8b"]["infer-int4"].fits
    for row in r.rows:
        for c in row.cells:
            if c.fits:
                assert c.peak_bytes <= r.capacity_bytes
    text = r.render()
    assert "What runs on 1 x NVIDIA GeForce RTX 4090" in text
    json.dumps(r.to_json())


def test_doctor_cli_named_gpu_and_json(capsys):
    pytest.importorskip("gpuplan.api")
    rc = local_cli.main(["doctor", "--gpu", "h100", "--count", "8", "--models", "llama-3.1-8b", "--json"])
    envelope = json.loads(capsys.readouterr().out)
    if rc == 0:
        data = envelope["result"]
        assert data["gpu"]["count"] == 8 and data["models"][0]["model"] == "llama-3.1-8b"
    else:                       # 'h100' is ambiguous: the error envelope lists the candidates
        assert rc == 2 and "h100-sxm" in envelope["error"]["close_matches"]
    assert local_cli.main(["doctor", "--gpu", "h100-sxm", "--count", "8", "--models", "llama-3.1-8b", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["result"]
    assert data["gpu"]["id"] == "h100-sxm" and data["models"][0]["tasks"]["full"]["fits"] is True


def test_doctor_cli_no_gpu(monkeypatch, capsys):
    monkeypatch.setattr(det, "detect", lambda **kw: det.LocalSystem(notes=("`nvidia-smi` is not available or failed.",)))
    assert local_cli.main(["doctor"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("No GPU found") and "--oom" in err and "Traceback" not in err


def test_doctor_cli_detected_node(monkeypatch, capsys):
    pytest.importorskip("gpuplan.api")
    smi = det.parse_nvidia_smi_q(read("nvidia-smi-q_8xH100.txt"))
    node = det.LocalSystem(gpus=smi.gpus, links=det.parse_topo_matrix(read("nvidia-smi-topo-m_8xH100.txt")),
                           driver_version=smi.driver_version, cuda_version=smi.cuda_version, source="nvidia-smi")
    monkeypatch.setattr(det, "detect", lambda **kw: node)
    assert local_cli.main(["doctor", "--models", "llama-3.1-70b"]) == 0
    out = capsys.readouterr().out
    assert "Detected via nvidia-smi: driver 550.90.07, CUDA 12.4" in out and "NV18" in out
    assert "What runs on 8 x NVIDIA H100 SXM5" in out


def test_doctor_cli_oom_stdin_and_scenario(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(read=lambda: (OOM / "old_fragmentation.txt").read_text()))
    assert local_cli.main(["doctor", "--oom", "-", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["result"]
    assert data["kind"] == "fragmentation" and data["report"]["form"] == "old"
    assert local_cli.main(["doctor", "--oom", str(OOM / "nope.txt")]) == 2


def test_wired_into_main_cli(capsys):
    from gpuplan import cli
    assert cli.main(["doctor", "--oom", str(OOM / "hip_shortage.txt")]) == 0
    assert "Real shortage" in capsys.readouterr().out


TINY_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
              "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}


@pytest.mark.parametrize("section", [
    {"task": "finetune", "train": {"method": "full", "precision": "bf16", "seq_len": 32, "micro_batch": 2, "recompute": "full"}},
    {"task": "finetune", "train": {"method": "lora", "precision": "bf16", "seq_len": 32, "micro_batch": 2, "lora_rank": 4}},
    {"task": "infer", "infer": {"engine": "hf", "weights": "bf16", "prompt_len": 16, "output_len": 4, "concurrency": 2}}])
def test_measure_loops_run_on_the_cpu(tmp_path, section):
    """The training and decode loops `gpuplan measure` runs on a GPU, run here on a tiny random model through the
    same code (only synchronisation and allocator statistics differ): they build, step and time without error."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if section.get("train", {}).get("method") == "lora":
        pytest.importorskip("peft")
    from gpuplan.local.measure import _Cpu, measure_on
    from gpuplan.scenario import scenario_from_dict
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_LLAMA))
    scn = scenario_from_dict({"model": str(cfg), "hardware": {"gpu": "h200-sxm"}, **section})
    res = measure_on(torch, _Cpu(torch), "cpu", None, scn, steps=2, warmup=1)
    m = res.measured
    if scn.is_training:
        assert m["step_time_s"] > 0 and m["steps"] == 2
        assert m["tokens_per_s_per_gpu"] == pytest.approx(2 * 32 / m["step_time_s"])
    else:
        assert m["decode_steps"] == 4 and 0 < m["tpot_s"] and 0 < m["ttft_s"]
    assert res.predicted and res.predicted["peak_bytes_per_gpu"] > 0
    assert any("not in the hardware catalog" in n for n in res.notes)
    assert "peak_allocated_bytes" not in m      # no allocator statistics off the GPU: none invented


def test_profiler_annotations_are_not_kernels():
    """torch.optim opens a record_function range around every step that the profiler lists among the kernels with
    the step's device time: counted as a kernel it adds the optimizer's time twice to the busy time."""
    from gpuplan.local.measure import is_profiler_annotation
    assert is_profiler_annotation("Optimizer.step#AdamW.step") and is_profiler_annotation("ProfilerStep#3")
    assert is_profiler_annotation("Command Buffer Full")
    assert not is_profiler_annotation("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...>")
    assert not is_profiler_annotation("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN")


@pytest.mark.parametrize("train,reference", [
    ({"method": "full", "recompute": "full"}, "copy"),
    ({"method": "lora", "lora_rank": 4}, "base"),
    ({"method": "full", "reference": "precomputed"}, "precomputed")])
def test_measure_runs_trls_dpo_step_on_the_cpu(tmp_path, monkeypatch, train, reference):
    """objective dpo runs TRL's DPOTrainer step. At the first step the reference is the initial policy (a copy of its
    weights, the base with the LoRA adapters disabled, B = 0, or log-probs precomputed from it), so both log-ratios
    are 0 and the sigmoid loss is -log(sigmoid(0)) = ln 2 = 0.6931 (hand arithmetic); a reference with other weights
    would give another loss. The frozen copy is never updated while the policy is; tokens count both sequences."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if train["method"] == "lora":
        pytest.importorskip("peft")
    import gpuplan.local.measure as lm
    built, copies, initial = [], [], []
    real_build, real_copy = lm._build_model, lm._reference_copy

    def build(*a):
        built.append(real_build(*a))
        initial.extend(p.detach().clone() for p in built[-1][0].parameters())   # the policy's initial weights
        return built[-1]
    monkeypatch.setattr(lm, "_build_model", build)
    monkeypatch.setattr(lm, "_reference_copy", lambda m: copies.append(real_copy(m)) or copies[-1])
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_LLAMA))
    scn = scenario_from_dict({"model": str(cfg), "hardware": {"gpu": "h200-sxm"}, "task": "finetune",
                              "train": {"objective": "dpo", "precision": "bf16", "seq_len": 32, "micro_batch": 2, **train}})
    torch.manual_seed(0)
    res = lm.measure_on(torch, lm._Cpu(torch), "cpu", None, scn, steps=2, warmup=1)
    m = res.measured
    assert len(m["losses"]) == 3 and m["losses"][0] == pytest.approx(0.6931, abs=2e-3)
    assert m["tokens_per_s_per_gpu"] == pytest.approx(2 * 2 * 32 / m["step_time_s"])
    assert any(f"reference {reference}" in n for n in res.notes)
    assert len(copies) == (1 if reference == "copy" else 0)
    if copies:
        ref, policy = copies[0], built[0][0]
        assert all(not p.requires_grad for p in ref.parameters()) and not ref.training
        assert all(torch.equal(p, q) for p, q in zip(ref.parameters(), initial))        # never updated
        assert not all(torch.equal(p, q) for p, q in zip(policy.parameters(), initial))  # the policy was
    assert res.predicted and res.predicted["peak_bytes_per_gpu"] > 0


def test_measure_refuses_untimed_objectives():
    from gpuplan.local.measure import _check_supported
    kto = scenario_from_dict({"model": "llama-3.2-1b", "task": "finetune", "hardware": {"gpu": "h200-sxm"},
                              "train": {"objective": "kto", "micro_batch": 2}})
    with pytest.raises(UnsupportedError, match="objective 'kto'"):
        _check_supported(kto)
    joined = scenario_from_dict({"model": "llama-3.2-1b", "task": "finetune", "hardware": {"gpu": "h200-sxm"},
                                 "train": {"objective": "dpo", "pair_concat": "sequence"}})
    with pytest.raises(UnsupportedError, match="pair_concat"):
        _check_supported(joined)
    assert _check_supported(scenario_from_dict({"model": "llama-3.2-1b", "task": "finetune",
                                                "hardware": {"gpu": "h200-sxm"}, "train": {"objective": "dpo"}})) == []
