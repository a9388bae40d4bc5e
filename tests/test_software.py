"""Software fit: formats, attention kernels, engines per accelerator."""
from __future__ import annotations

import pytest

from gpuplan.errors import UnknownNameError
from gpuplan.hardware import get_gpu, list_gpus
from gpuplan.hardware.software import ENGINES, check, support_for


def _severities(problems):
    return [p.severity for p in problems]


def test_every_gpu_has_a_row():
    for spec in list_gpus():
        sup = support_for(spec)
        assert sup.gpu_id == spec.id
        assert sup.source_url.startswith("https://") and sup.retrieved
        assert set(sup.engines) == set(ENGINES)


def test_cuda_compute_capabilities():
    cc = {"v100-sxm2-16gb": "7.0", "t4": "7.5", "a100-sxm-80gb": "8.0", "rtx-3090": "8.6", "rtx-4090": "8.9",
          "l40s": "8.9", "h100-sxm": "9.0", "b200": "10.0", "rtx-5090": "12.0"}
    for gid, value in cc.items():
        assert support_for(gid).cuda_cc == value, gid
    assert support_for("mi300x").stack == "rocm" and support_for("mi300x").rocm_min
    assert support_for("tpu-v5p").xla and support_for("gaudi3").synapse and support_for("m2-ultra").metal


def test_format_support_matches_catalog_rates():
    # a native format must have a peak rate, except where the vendor publishes none (documented)
    unpublished = {("gaudi2", "fp32"), ("gaudi2", "fp16")}
    for spec in list_gpus():
        sup = support_for(spec)
        for fmt in sup.native_formats:
            if fmt == "int4" or (spec.id, fmt) in unpublished:
                continue
            assert fmt in spec.peak_flops_per_s, (spec.id, fmt)


def test_tensorrt_llm_on_mi300x_is_an_error_with_alternative():
    problems = check("mi300x", engine="trtllm")
    assert _severities(problems) == ["error"]
    assert "vLLM" in problems[0].alternative and "SGLang" in problems[0].alternative
    assert check("mi300x", engine="vllm") == [] and check("mi300x", engine="sglang") == []


def test_tensorrt_llm_is_nvidia_only():
    for spec in list_gpus():
        if spec.vendor != "NVIDIA":
            assert support_for(spec).engines["trtllm"] == "no", spec.id


def test_fp8_on_a100_is_a_warning_about_weight_only():
    problems = check("a100-sxm-80gb", dtype="fp8")
    assert _severities(problems) == ["warning"]
    assert "W8A16" in problems[0].message
    assert check("h100-sxm", dtype="fp8") == [] and check("l40s", dtype="fp8") == []


def test_bf16_on_t4_and_v100_warns_and_suggests_fp16():
    for gid in ("t4", "v100-sxm2-32gb"):
        problems = check(gid, dtype="bf16")
        assert _severities(problems) == ["warning"]
        assert "fp16" in problems[0].alternative


def test_flash_attention_rules():
    assert _severities(check("a100-sxm-80gb", attention="flash_attn3")) == ["error"]
    assert check("a100-sxm-80gb", attention="flash_attn3")[0].alternative == "use flash_attn2"
    assert check("h100-sxm", attention="fa3") == []
    assert _severities(check("t4", attention="flash_attn2")) == ["error"]
    assert _severities(check("v100-sxm2-16gb", attention="fa2")) == ["error"]
    assert check("rtx-4090", attention="flash_attn2") == []
    assert check("mi300x", attention="flash_attn2") == []     # ROCm Composable Kernel port
    assert check("t4", attention="sdpa") == []
    for spec in list_gpus():
        if support_for(spec).attention["flash_attn3"] == "yes":
            assert spec.family == "hopper", spec.id


def test_fp4_only_native_on_blackwell_and_cdna4():
    for spec in list_gpus():
        if "fp4" in support_for(spec).native_formats:
            assert spec.family in ("blackwell", "cdna4"), spec.id
    assert check("b200", dtype="nvfp4") == []
    assert _severities(check("h100-sxm", dtype="mxfp4")) == ["warning"]


def test_platform_specific_engines():
    assert _severities(check("tpu-v5p", engine="deepspeed")) == ["error"]
    assert _severities(check("tpu-v5p", engine="megatron")) == ["error"]
    assert check("tpu-v6e", engine="vllm") == []
    assert _severities(check("gaudi3", engine="vllm")) == ["warning"]          # vllm-gaudi plugin
    assert "Gaudi" in check("gaudi3", engine="deepspeed")[0].message
    assert _severities(check("m2-ultra", engine="vllm")) == ["error"]
    assert "llama.cpp" in check("m2-ultra", engine="vllm")[0].alternative
    assert check("m2-ultra", engine="llama.cpp") == []
    assert _severities(check("m2-ultra", dtype="bf16")) == ["warning"]
    assert check("m4-max", dtype="bf16") == []
    for spec in list_gpus():
        assert support_for(spec).engines["llamacpp"] in ("yes", "no")


def test_geforce_40_50_note_no_p2p():
    for gid in ("rtx-4090", "rtx-5090"):
        assert "P2P" in support_for(gid).engine_notes.get("p2p", "")
        assert get_gpu(gid).p2p is False


def test_unsupported_format_is_an_error():
    problems = check("tpu-v5e", dtype="fp4")
    assert _severities(problems) == ["error"] and "bf16" in problems[0].alternative
    assert _severities(check("mi250x", dtype="fp8")) == ["error"]


def test_unknown_names_raise():
    with pytest.raises(UnknownNameError):
        check("h100-sxm", engine="vllmm")
    with pytest.raises(UnknownNameError):
        check("h100-sxm", dtype="fp7")
    with pytest.raises(UnknownNameError):
        check("h100-sxm", attention="flash4ever")


def test_combined_check_reports_each_problem():
    problems = check("t4", engine="trtllm", dtype="fp8", attention="fa2")
    assert sorted(_severities(problems)) == ["error", "warning", "warning"]
