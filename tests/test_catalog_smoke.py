"""Every catalog row can be planned on: an 8B LoRA fine-tune and an 8B bf16 serving replica estimate on
every accelerator without an unexpected exception and with finite numbers; rows with enough memory fit.
Accelerators without CUDA get the software-fit treatment (an engine they cannot run is refused with the
alternative; the one they run estimates). Power and memory variants change the speed the way their
datasheets say (issue 13): a 500 W part trains slower than the same part at 700 W, a 2.4 TB/s part decodes
slower than a 3.35 TB/s one."""
from __future__ import annotations

import math

import pytest

from gpuplan.api import estimate
from gpuplan.errors import UnsupportedError
from gpuplan.hardware import list_gpus
from gpuplan.hardware import gpus as gpus_mod
from gpuplan.hardware.software import support_for

GiB = 2 ** 30
# Llama-3.1-8B: 8.03e9 parameters -> 16.06 GB = 14.96 GiB of bf16 weights. A serving replica with a small
# KV pool fits with ~9 GiB of headroom for runtime and cache: "enough memory" = 24 GiB usable. LoRA keeps
# the frozen bf16 weights plus activations of a 2048-token sequence without recomputation: 40 GiB.
SERVE_ENOUGH = 24 * GiB
LORA_ENOUGH = 40 * GiB
ENGINES = ("vllm", "sglang", "llama.cpp", "trtllm", "hf")          # first one the GPU's software row allows


pytestmark = pytest.mark.usefixtures("builtin_catalog")   # conftest.py


def _engine(gpu) -> str:
    levels = support_for(gpu).engines
    return next(e for e in ENGINES if levels[e.replace(".", "")] in ("yes", "limited"))


def _lora(gpu) -> dict:
    precision = "bf16" if "bf16" in gpu.peak_flops_per_s else "fp16"   # Volta/Turing/M1/M2: no bf16 rate
    return {"model": "llama-3.1-8b", "task": "finetune", "framework": "hf", "hardware": {"gpu": gpu.id, "count": 1},
            "train": {"method": "lora", "precision": precision, "seq_len": 2048, "micro_batch": 1}}


def _serve(gpu, engine: str | None = None, concurrency: int = 8) -> dict:
    return {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": gpu.id, "count": 1},
            "infer": {"engine": engine or _engine(gpu), "weights": "bf16", "concurrency": concurrency,
                      "prompt_len": 512, "output_len": 128}}


def _non_finite(x, path="") -> list[str]:
    if isinstance(x, dict):
        return [p for k, v in x.items() for p in _non_finite(v, f"{path}.{k}")]
    if isinstance(x, (list, tuple)):
        return [p for i, v in enumerate(x) for p in _non_finite(v, f"{path}[{i}]")]
    return [path] if isinstance(x, float) and not math.isfinite(x) else []


def _check(est, *, must_fit: bool) -> dict:
    j = est.to_json()
    assert not _non_finite(j), _non_finite(j)[:5]
    assert j["memory"]["peak_bytes_per_gpu"] > 0
    if must_fit:
        assert j["memory"]["fits"] is True
    return j


GPUS = [g.id for g in list_gpus()]


@pytest.mark.parametrize("gid", GPUS)
def test_lora_8b_estimates_on_every_accelerator(gid):
    gpu = gpus_mod.get_gpu(gid)
    j = _check(estimate(_lora(gpu), allow_hub=False), must_fit=gpu.usable_memory_bytes >= LORA_ENOUGH)
    if j["memory"]["fits"]:
        assert j["performance"]["tokens_per_s_per_gpu"] > 0


@pytest.mark.parametrize("gid", GPUS)
def test_bf16_serving_8b_estimates_on_every_accelerator(gid):
    gpu = gpus_mod.get_gpu(gid)
    _check(estimate(_serve(gpu), allow_hub=False), must_fit=gpu.usable_memory_bytes >= SERVE_ENOUGH)


def test_accelerators_without_cuda_get_the_software_fit_treatment():
    checked = 0
    for gpu in list_gpus():
        sup = support_for(gpu)
        if sup.stack == "cuda" or sup.engines["vllm"] != "no":
            continue
        with pytest.raises(UnsupportedError) as err:           # e.g. Apple: no Metal backend in vLLM
            estimate(_serve(gpu, "vllm"), allow_hub=False)
        assert "llama.cpp" in str(err.value)
        _check(estimate(_serve(gpu, "llama.cpp"), allow_hub=False), must_fit=gpu.usable_memory_bytes >= SERVE_ENOUGH)
        checked += 1
    assert checked >= 7          # the Apple rows: M1 Max/Ultra, M2 Max/Ultra, M3 Max/Ultra, M4 Max


def _train_tps(gid: str) -> float:
    return estimate(_lora(gpus_mod.get_gpu(gid)), allow_hub=False).to_json()["performance"]["tokens_per_s_per_gpu"]


def test_power_limited_part_trains_slower_than_the_full_power_part():
    # same silicon, memory and datasheet peak; 500 W instead of 700 W board power
    assert _train_tps("h100-sxm-96gb-500w") < _train_tps("h100-sxm-96gb")


def test_hbm2e_part_decodes_slower_than_hbm3_part():
    # batch-1 decode reads every weight once per token: bounded by bandwidth (2.4 vs 3.35 TB/s, same compute)
    def decode(gid):
        perf = estimate(_serve(gpus_mod.get_gpu(gid), "vllm", concurrency=1), allow_hub=False).to_json()["performance"]
        return perf["tpot_s"]
    assert decode("h100-sxm-94gb") > decode("h100-sxm")
