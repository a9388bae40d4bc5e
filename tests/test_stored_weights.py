"""A published checkpoint stored quantized is served as stored (models/checkpoint.py stored_weight_format,
pipeline.stored_weights_default): gpt-oss's MXFP4 experts, DeepSeek-V3's block FP8."""
from __future__ import annotations

import json
from pathlib import Path

from gpuplan import api
from gpuplan.estimate.memory import inference_weight_bytes
from gpuplan.launch import launch_files
from gpuplan.models import get_model
from gpuplan.models.checkpoint import stored_weight_format
from gpuplan.scenario import scenario_from_dict

CONFIGS = Path(__file__).resolve().parents[1] / "src" / "gpuplan" / "models" / "configs"


def _config(name: str) -> dict:
    return json.loads((CONFIGS / name).read_text(encoding="utf-8"))


def test_the_stored_format_is_read_from_the_bundled_configs():
    assert stored_weight_format(_config("openai__gpt-oss-120b.json")) == "mxfp4-experts"
    assert stored_weight_format(_config("deepseek-ai__DeepSeek-V3.json")) == "fp8-block"
    assert stored_weight_format({"model_type": "llama"}) is None
    # MXFP4 over every linear (no attention left out) is not gpt-oss's layout: no exact format, no default
    assert stored_weight_format({"quantization_config": {"quant_method": "mxfp4"}}) is None
    assert get_model("gpt-oss-20b").stored_weights == "mxfp4-experts"
    assert get_model("llama-3.1-8b").stored_weights is None


def test_gpt_oss_120b_weights_are_its_checkpoint_bytes():
    # the routed experts, by hand from config.json (36 layers, 128 experts, hidden 2880, intermediate 2880:
    # gate_up 2880 x 5760 and down 2880 x 2880 per expert) at 4 bits + one 8-bit scale per 32 elements; their
    # scales alone are 114,661,785,600 / 32 = 3,583,180,800 bytes, the U8 scale bytes the checkpoint's safetensors
    # headers hold (models/registry.csv note); everything else stays bf16
    m = get_model("gpt-oss-120b")
    experts = 36 * 128 * (2880 * 5760 + 2880 * 2880)
    assert experts // 32 == 3_583_180_800
    expected = experts * 4.25 / 8 + (m.params_total - experts) * 2
    got = inference_weight_bytes(m, "mxfp4-experts")
    assert abs(got - expected) / expected < 0.002
    # ... against all linears at MXFP4 (the attention too), which is 1 GiB short of the stored checkpoint
    assert inference_weight_bytes(m, "mxfp4") < got - 2**30


def _serve(model, engine="vllm", **infer):
    return {"model": model, "task": "infer", "hardware": {"gpu": "h200-sxm", "count": 8},
            "parallel": {"tp": 8}, "infer": {"engine": engine, "prompt_len": 1000, "output_len": 200, **infer}}


def test_serving_defaults_to_the_stored_format_and_says_so():
    est = api.estimate(_serve("deepseek-v3"))
    assert est.scenario.infer.weights == "fp8-block"
    assert any("fp8-block" in w and "infer.weights not set" in w for w in est.warnings)
    assert est.memory.fits        # 671 B at ~1 byte on 8 x 141 GB; in bf16 it could not
    # set explicitly, the user's choice stands; engines that may load another copy keep 16-bit
    assert api.estimate(_serve("deepseek-v3", weights="bf16")).scenario.infer.weights == "bf16"
    assert api.estimate(_serve("gpt-oss-20b", engine="hf")).scenario.infer.weights == "bf16"
    assert api.estimate(_serve("llama-3.1-8b")).scenario.infer.weights == "bf16"


def test_the_launch_file_loads_the_checkpoint_as_stored():
    # vLLM reads the method from config.json; a --quantization flag naming it otherwise is refused at start-up
    scn = scenario_from_dict({"model": "gpt-oss-120b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
                              "infer": {"engine": "vllm"}})
    text = launch_files(scn, "vllm")["serve.sh"]
    assert "--quantization" not in text and "--dtype auto" in text
