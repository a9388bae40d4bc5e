"""Regressions found by sweeping valid scenarios (every bundled model x task x engine x GPU) and invalid input
through every surface: each case crashed, printed a non-JSON number, or answered differently by surface."""
import json
import math

import pytest

from gpuplan.api import estimate
from gpuplan.cli import main


def _strict_json(text: str):
    """JSON as RFC 8259 has it: `Infinity` and `NaN` are refused (jq and JSON.parse refuse them too)."""
    def refuse(token):
        raise ValueError(f"non-JSON number {token}")
    return json.loads(text, parse_constant=refuse)


def _finite_everywhere(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            _finite_everywhere(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _finite_everywhere(v, f"{path}[{i}]")
    elif isinstance(obj, float):
        assert math.isfinite(obj), path


# --- TensorRT-LLM on an attention-free (Mamba) model: ZeroDivisionError (0 KV heads) -> an internal error -------

@pytest.mark.parametrize("model", ["mamba-130m-hf", "mamba2-2.7b"])
def test_trtllm_serves_attention_free_model(model):
    est = estimate({"model": model, "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
                    "infer": {"engine": "trtllm", "prompt_len": 1024, "output_len": 256, "concurrency": 8}},
                   allow_hub=False)
    assert est.memory.fits
    assert est.performance.tpot_s > 0 and est.performance.ttft_s > 0


# --- GRPO whose rollout engine cannot run: step_time_s = inf, printed as `Infinity` / `inf days` / `+nan%`, memory
#     "fits" (vLLM stops at start-up: no KV cache after the weights, or less than one response's worth) ---------------

GRPO = {"model": "falcon-40b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 8}, "parallel": {"zero": 3},
        "train": {"objective": "grpo", "method": "full", "micro_batch": 2,
                  "rl": {"prompts_per_step": 16, "group_size": 4, "prompt_len": 256, "max_new_tokens": 256}}}
# KV room for ~19k tokens at gpu_memory_utilization 0.22, but one response is 31k: the second branch
GRPO_LONG = {"model": "qwen2.5-7b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 8},
             "parallel": {"zero": 3},
             "train": {"objective": "grpo", "method": "full", "micro_batch": 2,
                       "rl": {"prompts_per_step": 16, "group_size": 4, "prompt_len": 1024, "max_new_tokens": 30000,
                              "gpu_memory_utilization": 0.22}}}
# the training side fits (91 of 95 GiB), the engine's half of the GPU holds only its weights: memory said "fits"
GRPO_FITS = {"model": "mistral-small-3.2-24b-instruct-2506", "task": "finetune",
             "hardware": {"gpu": "tpu-v5p", "count": 8}, "parallel": {"zero": 3},
             "train": {"objective": "grpo", "method": "full", "micro_batch": 2,
                       "rl": {"prompts_per_step": 16, "group_size": 4, "prompt_len": 256, "max_new_tokens": 256}}}


@pytest.mark.parametrize("scn, why", [(GRPO, "no KV cache is left"), (GRPO_LONG, "less than one response"),
                                      (GRPO_FITS, "no KV cache is left")])
def test_rl_rollout_engine_that_cannot_start_is_refused(scn, why):
    from gpuplan.errors import InputError
    with pytest.raises(InputError) as e:
        estimate(scn, allow_hub=False)
    assert e.value.what.startswith("train.rl.gpu_memory_utilization") and why in e.value.why
    assert "rollout_tp" in e.value.fix


@pytest.mark.parametrize("scn", [GRPO, GRPO_LONG])
def test_rl_step_without_rollout_has_no_time(scn):
    # rl_performance on its own (the pipeline refuses first): no step time, never inf
    from gpuplan.estimate.rl import rl_performance
    from gpuplan.pipeline import resolve
    r = resolve(scn, allow_hub=False)
    perf = rl_performance(r.scenario, r.model, r.gpu)
    assert perf.step_time_s is None and perf.tokens_per_s_per_gpu is None and perf.mfu is None
    assert perf.details["phases_s"]["rollout"] is None and "rl_rollout" not in perf.breakdown
    assert not any("None tokens" in n or " inf" in n for n in perf.notes)
    _finite_everywhere(perf.to_json())


def test_rl_rollout_refusal_on_every_surface(tmp_path, capsys):
    import yaml
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(GRPO))
    whys = set()
    for cmd in (["estimate"], ["memory"], ["explain", "speed.mfu"]):
        argv = [cmd[0], str(path), *cmd[1:], "--json"]
        assert main(argv) == 2, cmd
        whys.add(_strict_json(capsys.readouterr().out)["error"]["why"])
    assert len(whys) == 1
    # rl-plan still searches the placements (a larger rollout_tp may start) and prices the knobs
    main(["rl-plan", str(path), "--json"])
    out = _strict_json(capsys.readouterr().out)["result"]
    assert "error" in out["whatif"][0] and "nan" not in json.dumps(out).lower()
    main(["rl-plan", str(path)])
    text = capsys.readouterr().out
    assert "nan%" not in text and "inf s" not in text
    from fastapi.testclient import TestClient
    from gpuplan.web import create_app
    with TestClient(create_app(isolation="thread")) as c:
        web = c.post("/api/estimate", json=GRPO)
    assert web.status_code == 400 and web.json()["error"]["why"] in whys


def test_cli_json_envelope_is_strict_json():
    from gpuplan.cliargs import dumps
    assert _strict_json(dumps({"a": math.inf, "b": [math.nan, 1.5], "c": (2.0, -math.inf)})) == \
        {"a": None, "b": [None, 1.5], "c": [2.0, None]}


# --- a misspelled scenario key or choice: the message listed no close match ('modle', 'seqlen', 'tensorrt-llm') ------

@pytest.mark.parametrize("section, key, value, want", [
    ("", "modle", "llama-3.1-8b", "model"),
    ("train", "seqlen", 4096, "seq_len"),
    ("infer", "promt_len", 100, "prompt_len"),
    ("infer", "engine", "tensorrt-llm", "trtllm"),
    ("infer", "engine", "llamacpp", "llama.cpp"),
    ("train", "optimizer", "adamw8bit", "adamw-8bit"),
    ("train", "method", "LoRA", "lora"),
])
def test_misspelled_field_or_choice_gets_close_matches(tmp_path, capsys, section, key, value, want):
    import yaml
    task = "infer" if section == "infer" else "finetune"
    scn = {"model": "llama-3.1-8b", "task": task, "hardware": {"gpu": "h100-sxm"}}
    (scn.setdefault(section, {}) if section else scn)[key] = value
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scn))
    assert main(["estimate", str(path), "--json"]) == 2
    err = _strict_json(capsys.readouterr().out)["error"]
    assert want in err["close_matches"] and key in err["why"]
    from fastapi.testclient import TestClient
    from gpuplan.web import create_app
    with TestClient(create_app(isolation="thread")) as c:
        web = c.post("/api/estimate", json=scn)
        wrapped = c.post("/api/serving-curve", json={"scenario": scn}) if task == "infer" else None
    assert web.status_code == 422 and want in web.json()["error"]["close_matches"]
    if wrapped is not None:
        assert wrapped.status_code == 422 and want in wrapped.json()["error"]["close_matches"]


# --- a weight format the engine cannot load was estimated as if it could (llama.cpp + fp8: 8.46 GiB, 6.55 ms/token),
#     while `gpuplan launch` refused the same plan ----------------------------------------------------------------

@pytest.mark.parametrize("engine, weights", [("llama.cpp", "fp8"), ("llama.cpp", "awq-int4"), ("llama.cpp", "nf4"),
                                             ("llama.cpp", "int8"), ("trtllm", "gguf-q4_k_m"), ("trtllm", "nf4"),
                                             ("hf", "gguf-q4_k_m")])
def test_engine_refuses_a_weight_format_it_cannot_load(capsys, engine, weights):
    argv = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--task", "infer", "--engine", engine, "--weights", weights]
    assert main(["estimate", *argv, "--json"]) == 2
    err = _strict_json(capsys.readouterr().out)["error"]
    assert weights in err["what"] and engine in err["what"] and err["fix"]
    from fastapi.testclient import TestClient
    from gpuplan.web import create_app
    scn = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm"},
           "infer": {"engine": engine, "weights": weights}}
    with TestClient(create_app(isolation="thread")) as c:
        assert c.post("/api/estimate", json=scn).status_code == 400


@pytest.mark.parametrize("engine, weights", [("llama.cpp", "gguf-q4_k_m"), ("llama.cpp", "bf16"), ("vllm", "gguf-q4_k_m"),
                                             ("sglang", "gguf-q4_k_m"), ("trtllm", "awq-int4"), ("hf", "nf4"),
                                             ("vllm", "nf4")])
def test_engine_keeps_the_weight_formats_it_loads(engine, weights):
    est = estimate({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm"},
                    "infer": {"engine": engine, "weights": weights}}, allow_hub=False)
    assert est.performance.tpot_s > 0


# --- disaggregation on too few GPUs: `serve` refused it, `estimate` and the web answered with colocated figures ------

def test_disaggregation_on_too_few_gpus_is_refused_everywhere(tmp_path, capsys):
    import yaml
    scn = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 2},
           "infer": {"load": {"rate_per_s": 1, "disaggregation": {"prefill_instances": 2, "decode_instances": 2}}}}
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(scn))
    whys = []
    for cmd in ("estimate", "serve", "memory"):
        assert main([cmd, str(path), "--json"]) == 2, cmd
        err = _strict_json(capsys.readouterr().out)["error"]
        whys.append(err["why"])
        assert err["what"] == "infer.load.disaggregation" and "need 4 GPUs" in err["why"]
    assert len(set(whys)) == 1
    from fastapi.testclient import TestClient
    from gpuplan.web import create_app
    with TestClient(create_app(isolation="thread")) as c:
        r = c.post("/api/estimate", json=scn)
    assert r.status_code == 400 and r.json()["error"]["why"] == whys[0]


# --- `count: yes` (a YAML boolean) was read as 1 GPU: pydantic's lax mode turns true/false into 1/0 -------------------

@pytest.mark.parametrize("section, key, value", [("hardware", "count", True), ("train", "seq_len", True),
                                                 ("train", "micro_batch", False), ("train", "tokens", True)])
def test_boolean_for_a_number_is_refused(tmp_path, capsys, section, key, value):
    import yaml
    scn = {"model": "llama-3.1-8b", "task": "train", "hardware": {"gpu": "h100-sxm"}}
    scn.setdefault(section, {})[key] = value
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(scn))
    assert main(["estimate", str(path), "--json"]) == 2
    err = _strict_json(capsys.readouterr().out)["error"]
    assert f"'{section}.{key}' is a number" in err["why"]


def test_booleans_stay_booleans():
    est = estimate({"model": "qwen2.5-0.5b", "task": "train", "hardware": {"gpu": "h100-sxm"},
                    "train": {"seq_len": 1024, "compile": True, "master_weights": False}}, allow_hub=False)
    assert est.scenario.train.compile is True and est.scenario.train.master_weights is False


# --- QLoRA with precision fp8 was estimated as bf16 while reporting an FP8 recipe (a silent guess) ------------------------

def test_qlora_with_fp8_precision_is_refused(capsys):
    argv = ["estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--task", "finetune", "--method", "qlora",
            "--precision", "fp8", "--json"]
    assert main(argv) == 2
    err = _strict_json(capsys.readouterr().out)["error"]
    assert "fp8" in err["why"] and "qlora" in err["why"] and "bf16" in err["why"]


# --- launch refusals ended mid-sentence: "Fix: use bf16, or" (no engine named), "..., or Engines that can: ..." -----

def test_launch_refusal_fix_reads_as_a_sentence(capsys):
    base = ["launch", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--no-estimate", "--json"]
    assert main([*base, "--engine", "axolotl", "--task", "finetune", "--precision", "fp8"]) == 2
    fix = _strict_json(capsys.readouterr().out)["error"]["fix"]
    assert fix == "use bf16."
    assert main([*base, "--engine", "llama.cpp", "--task", "infer", "--weights", "awq-int4"]) == 2
    fix = _strict_json(capsys.readouterr().out)["error"]["fix"]
    assert fix.startswith("use a gguf-* weight format, or use an engine that can: vllm")


# --- a config with only model_type was estimated as LlamaConfig's defaults (6.74B) without a word ----------------------

def test_config_that_leaves_the_size_to_defaults_says_so(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama"}))
    assert main(["estimate", "--model", str(path), "--gpu", "h100-sxm", "--task", "infer", "--json"]) == 0
    warnings = _strict_json(capsys.readouterr().out)["result"]["warnings"]
    assert any("gives no hidden size, no layer count, no vocabulary size" in w and "4,096" in w for w in warnings)
    from fastapi.testclient import TestClient
    from gpuplan.web import create_app
    with TestClient(create_app(isolation="thread")) as c:
        web = c.post("/api/estimate", json={"model": {"model_type": "llama"}, "task": "infer",
                                            "hardware": {"gpu": "h100-sxm"}}).json()
    assert web["warnings"] == warnings
    # a whole config, and a bundled name, say nothing
    full = estimate({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm"}}, allow_hub=False)
    assert not any("gives no" in w for w in full.warnings)


# --- `gpuplan estimate --model gpt2 --task infer` was refused for "infer.prompt_len + output_len = 1,280", lengths
#     the user never typed (the defaults 1,024 + 256); a refused default now says it is one -------------------------------

def test_refused_default_serving_length_says_it_is_a_default(capsys):
    argv = ["estimate", "--model", "gpt2", "--gpu", "h100-sxm", "--task", "infer", "--json"]
    assert main(argv) == 2
    what = _strict_json(capsys.readouterr().out)["error"]["what"]
    assert what == "infer.prompt_len + output_len (prompt_len 1,024 and output_len 256 by default) = 1,280"
    assert main([*argv, "--prompt-len", "900", "--output-len", "300"]) == 2
    assert _strict_json(capsys.readouterr().out)["error"]["what"] == "infer.prompt_len + output_len = 1,200"


# --- a misspelled recommend objective ('cheapst') listed no close match -------------------------------------------------

def test_misspelled_objective_gets_close_matches(capsys):
    assert main(["recommend", "--model", "llama-3.1-8b", "--task", "finetune", "--objective", "cheapst", "--json"]) == 2
    assert _strict_json(capsys.readouterr().out)["error"]["close_matches"][0] == "cheapest"
    from fastapi.testclient import TestClient
    from gpuplan.web import create_app
    with TestClient(create_app(isolation="thread")) as c:
        r = c.post("/api/recommend", json={"scenario": {"model": "llama-3.1-8b", "task": "finetune"},
                                           "objective": "fastst"})
    assert r.status_code == 400 and r.json()["error"]["close_matches"] == ["fastest"]


# --- compare: the CLI's --json named serving throughput output_tokens_per_s, POST /api/compare tokens_per_s ----------

def test_compare_rows_have_one_shape_on_both_surfaces(capsys):
    gpus = ["h100-sxm", "rtx-4090"]
    assert main(["compare", "--model", "qwen2.5-0.5b", "--task", "infer", "--gpus", ",".join(gpus), "--json"]) == 0
    cli = _strict_json(capsys.readouterr().out)["result"]
    from fastapi.testclient import TestClient
    from gpuplan.web import create_app
    with TestClient(create_app(isolation="thread")) as c:
        web = c.post("/api/compare", json={"scenario": {"model": "qwen2.5-0.5b", "task": "infer"}, "gpus": gpus}).json()
    assert web == cli
    assert "output_tokens_per_s" in web["rows"][0] and "tokens_per_s" not in web["rows"][0]


# --- an RL step of 100,000 prompts x 64 responses ran the rollout simulation for ~3 minutes (unbounded work) ----------

def test_rl_step_too_large_to_simulate_is_refused_at_once():
    import time
    from gpuplan.errors import InputError
    scn = {"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 8},
           "parallel": {"zero": 3},
           "train": {"objective": "grpo", "rl": {"prompts_per_step": 100_000, "group_size": 64}}}
    t = time.perf_counter()
    with pytest.raises(InputError) as e:
        estimate(scn, allow_hub=False)
    assert time.perf_counter() - t < 2
    assert "6,400,000 responses per step" in e.value.why and "262,144" in e.value.why


# --- llama.cpp with -ngl below the layer count: memory put the layers in host memory, speed kept them on the GPU
#     (-ngl 0 and -ngl 32 both 5.5 ms per token) ---------------------------------------------------------------------

def test_llamacpp_cpu_layers_get_no_gpu_speed(tmp_path, capsys):
    import yaml
    base = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm"},
            "infer": {"engine": "llama.cpp", "weights": "gguf-q4_k_m"}}
    full = estimate(base, allow_hub=False)
    assert full.performance.tpot_s > 0
    part = {**base, "infer": {**base["infer"], "gpu_layers": 0}}
    est = estimate(part, allow_hub=False)
    assert est.memory.cpu_bytes > 0
    assert est.performance.tpot_s is None and est.performance.ttft_s is None
    assert any("32 of llama-3.1-8b's 32 layers in host memory" in n for n in est.performance.notes)
    all_on_gpu = {**base, "infer": {**base["infer"], "gpu_layers": 32}}
    assert estimate(all_on_gpu, allow_hub=False).performance.tpot_s == full.performance.tpot_s
    path = tmp_path / "ngl.yaml"
    path.write_text(yaml.safe_dump(part))
    assert main(["serve", str(path), "--json"]) == 2
    assert _strict_json(capsys.readouterr().out)["error"]["what"] == "infer.gpu_layers"


# --- a KV-cache format the engine has no cache for was estimated (llama.cpp + fp8, vllm + q8_0) -----------------------

@pytest.mark.parametrize("engine, weights, kv, ok", [
    ("llama.cpp", "gguf-q4_k_m", "fp8", False), ("llama.cpp", "gguf-q4_k_m", "fp8_e5m2", False),
    ("vllm", "bf16", "q8_0", False), ("trtllm", "bf16", "q4_0", False), ("hf", "bf16", "q8_0", False),
    ("llama.cpp", "gguf-q4_k_m", "q8_0", True), ("vllm", "bf16", "fp8", True), ("trtllm", "bf16", "fp8", True)])
def test_engine_kv_cache_formats(capsys, engine, weights, kv, ok):
    argv = ["estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--task", "infer", "--engine", engine,
            "--weights", weights, "--kv-cache", kv, "--json"]
    rc = main(argv)
    out = _strict_json(capsys.readouterr().out)
    if ok:
        assert rc == 0 and out["result"]["performance"]["tpot_s"] > 0
    else:
        assert rc == 2 and out["error"]["what"] == f"infer.kv_cache = {kv} with engine {engine}" and out["error"]["fix"]


# --- speculative method mtp on a checkpoint without a multi-token-prediction layer was priced silently ----------------

def test_mtp_needs_the_checkpoints_mtp_layer():
    from gpuplan.errors import InputError
    base = {"task": "infer", "hardware": {"gpu": "h100-sxm", "count": 8}, "parallel": {"tp": 8},
            "infer": {"engine": "vllm", "weights": "fp8", "speculative": {"method": "mtp"}}}
    with pytest.raises(InputError) as e:          # Kimi-K2's config: num_nextn_predict_layers 0
        estimate({**base, "model": "kimi-k2-instruct"}, allow_hub=False)
    assert "says it has none" in e.value.why and "eagle" in e.value.fix
    est = estimate({**base, "model": "llama-3.1-8b"}, allow_hub=False)     # the config does not say: a warning
    assert any("names no multi-token-prediction layer" in w for w in est.warnings)
    est = estimate({**base, "model": "deepseek-v3"}, allow_hub=False)      # num_nextn_predict_layers 1
    assert not any("multi-token-prediction" in w for w in est.warnings)


# --- `--count 3 --tp 2` was refused with no fix beyond "correct the field(s) named above" -----------------------------

def test_layout_that_does_not_divide_the_gpus_names_counts_that_do(capsys):
    assert main(["estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--count", "3", "--tp", "2", "--json"]) == 2
    why = _strict_json(capsys.readouterr().out)["error"]["why"]
    assert "use hardware.count 4 or 2" in why and "divides 3 (e.g. 1)" in why


# --- recommend with a request rate and no latency target sized replicas at infer.concurrency (1 request each) --------

def test_a_request_rate_without_an_slo_is_sized_by_the_load_simulator():
    # Qwen2.5-0.5B at 50 requests/s of 512 + 128 tokens is 6,400 output tokens/s: one H100 reads the 1 GB of weights
    # once per decode step for the whole running batch (vLLM continuous batching), so a step of ~50 requests takes
    # a few ms, not 50 x the batch-1 time. Sizing at infer.concurrency (default 1) asked for 13 H100s.
    from gpuplan.search import recommend
    part = {"model": "qwen2.5-0.5b", "task": "infer",
            "infer": {"engine": "vllm", "prompt_len": 512, "output_len": 128, "load": {"rate_per_s": 50}}}
    res = recommend(part, gpus=["h100-sxm"], top=3, progress=False)
    best = res.plans[0]
    assert best.count <= 2, best.label
    assert "bounded queue" in " ".join(res.assumptions)


# --- a request longer than the engine's context limit (infer.max_model_len) was estimated as if served -------------

def test_a_request_longer_than_max_model_len_is_refused():
    from gpuplan.errors import InputError
    d = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm"},
         "infer": {"engine": "vllm", "prompt_len": 512, "output_len": 128, "max_model_len": 8}}
    with pytest.raises(InputError) as err:
        estimate(d)
    assert "max_model_len" in str(err.value) and "640" in str(err.value)
    d["infer"]["max_model_len"] = 640
    assert estimate(d).memory.fits


# --- POST /api/estimate with infer.load answered the batch-1 steady state without a word (the CLI printed a note) --

def test_web_estimate_says_where_the_load_is_simulated():
    from fastapi.testclient import TestClient

    from gpuplan.web.app import create_app
    scn = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
           "infer": {"engine": "vllm", "prompt_len": 1024, "output_len": 256, "load": {"rate_per_s": 5}}}
    with TestClient(create_app(isolation="thread")) as c:
        body = c.post("/api/estimate", json=scn).json()
    assert any("/api/serving-curve" in w and "5 requests/s" in w for w in body["warnings"])
    scn["infer"].pop("load")
    with TestClient(create_app(isolation="thread")) as c:
        assert not any("serving-curve" in w for w in c.post("/api/estimate", json=scn).json()["warnings"])
