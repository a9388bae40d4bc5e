"""A measured hardware profile (gpuplan calibrate) replaces datasheet x default efficiency."""
import json

import pytest

from gpuplan.api import estimate
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu

SCN = {"model": "llama-3.1-8b", "task": "train", "hardware": {"gpu": "h100-sxm", "count": 1},
       "train": {"seq_len": 2048, "recompute": "full"}}


def _profile(tmp_path, gpu_id="h100-sxm", bf16_fraction=0.5, bw_fraction=0.9):
    gpu = get_gpu(gpu_id)
    data = {"schema": "gpuplan.hardware-profile/1", "gpu_name": gpu.name, "gpu_id": gpu_id, "gpu_count": 1,
            "created": "2026-12-02T00:00:00Z", "torch_version": "2.13.0", "cuda_version": "13.0",
            "matmul_flops_per_s": {"bf16": bf16_fraction * gpu.peak_flops_per_s["bf16"]},
            "memory_bandwidth_bytes_per_s": bw_fraction * gpu.mem_bandwidth_bytes_per_s}
    p = tmp_path / "profile.json"
    p.write_text(json.dumps(data))
    return str(p)


def test_slower_measured_gemm_means_slower_steps(tmp_path):
    base = estimate(SCN).performance.step_time_s
    slow = estimate({**SCN, "hardware": {**SCN["hardware"], "profile": _profile(tmp_path, bf16_fraction=0.3)}})
    fast = estimate({**SCN, "hardware": {**SCN["hardware"], "profile": _profile(tmp_path, bf16_fraction=0.9)}})
    assert slow.performance.step_time_s > base > fast.performance.step_time_s
    assert estimate(SCN).memory.peak_bytes_per_gpu == slow.memory.peak_bytes_per_gpu   # memory unaffected


def test_profile_of_another_gpu_is_refused(tmp_path):
    with pytest.raises(InputError, match="another GPU"):
        estimate({**SCN, "hardware": {**SCN["hardware"], "profile": _profile(tmp_path, gpu_id="a100-sxm-80gb")}})


def test_environment_variable(tmp_path, monkeypatch):
    base = estimate(SCN).performance.step_time_s
    monkeypatch.setenv("GPUPLAN_PROFILE", _profile(tmp_path, bf16_fraction=0.3))
    assert estimate(SCN).performance.step_time_s > base
