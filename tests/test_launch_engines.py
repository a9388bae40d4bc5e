"""Per-engine launch files: the flags and config values an engine gets follow from the scenario.

Complements tests/test_launch.py (snapshots and flag schemas of a few fixed plans): here each
test varies one scenario field and checks, by hand arithmetic, the value that must change."""
from __future__ import annotations

import json
import re
import shlex
import sys

import pytest
import yaml

from gpuplan.errors import InputError, UnsupportedError
from gpuplan.launch import launch_files
from gpuplan.pipeline import evaluate
from gpuplan.scenario import scenario_from_dict

if sys.version_info >= (3, 11):
    import tomllib
else:                                              # pragma: no cover
    tomllib = pytest.importorskip("tomli")


def train(count=8, parallel=None, hw=None, **train_kw):
    t = {"seq_len": 4096, "micro_batch": 2, "global_batch": 64}
    t.update(train_kw)
    return scenario_from_dict({"model": "llama-3.1-8b", "task": "train",
                               "hardware": {"gpu": "h100-sxm", "count": count, **(hw or {})},
                               "parallel": {"zero": 3} if parallel is None else parallel, "train": t})


def serve(count=1, parallel=None, gpu="h100-sxm", **infer_kw):
    return scenario_from_dict({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": gpu, "count": count},
                               "parallel": parallel or {}, "infer": infer_kw})


def argv(text, program):
    """The argv of the command line starting with `program` (backslash continuations joined)."""
    joined = re.sub(r" *\\\n *", " ", text)
    line = next(ln for ln in joined.splitlines() if ln.strip().startswith(program))
    return shlex.split(line)


def flag(args, name):
    """The value after `name`, True for a bare flag, None when absent."""
    if name not in args:
        return None
    i = args.index(name)
    return args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else True


def body(text):
    data = json.loads(text)
    data.pop("_gpuplan")
    return data


# ---- vLLM ---------------------------------------------------------------------------------------

def vllm(s):
    return argv(launch_files(s, "vllm")["serve.sh"], "vllm serve")


@pytest.mark.parametrize("count,par,tp,pp,dp", [(1, {}, "1", "1", None), (4, {"tp": 4}, "4", "1", None),
                                                (8, {"tp": 2, "pp": 2}, "2", "2", "2"), (8, {"tp": 2}, "2", "1", "4")])
def test_vllm_parallel_flags(count, par, tp, pp, dp):
    a = vllm(serve(count, par))
    assert (flag(a, "--tensor-parallel-size"), flag(a, "--pipeline-parallel-size")) == (tp, pp)
    assert flag(a, "--data-parallel-size") == dp
    assert flag(a, "--distributed-executor-backend") is None        # one node


def test_vllm_lengths_memory_and_batching():
    a = vllm(serve(prompt_len=3000, output_len=1000, concurrency=48, gpu_memory_utilization=0.85))
    assert flag(a, "--max-model-len") == "4000"                     # prompt + output
    assert flag(a, "--gpu-memory-utilization") == "0.85"
    assert flag(a, "--max-num-seqs") == "48"                        # defaults to concurrency
    assert flag(a, "--enforce-eager") is None and flag(a, "--max-num-batched-tokens") is None
    a = vllm(serve(prompt_len=3000, output_len=1000, max_model_len=32768, cuda_graphs=False))
    assert flag(a, "--max-model-len") == "32768" and flag(a, "--enforce-eager") is True


def test_vllm_async_scheduling_off_only_when_asked():
    # async scheduling is vLLM's default from 0.14: the launch file turns it off only for
    # infer.async_scheduling false (the estimate then adds the host work to every step)
    assert flag(vllm(serve()), "--no-async-scheduling") is None
    assert flag(vllm(serve(async_scheduling=True)), "--no-async-scheduling") is None
    assert flag(vllm(serve(async_scheduling=False)), "--no-async-scheduling") is True


@pytest.mark.parametrize("weights,quant,dtype", [("bf16", None, "bfloat16"), ("fp16", None, "float16"),
                                                 ("fp8", "fp8", "auto"), ("fp8-block", "fp8", "auto"),
                                                 ("awq-int4", "awq_marlin", "auto"), ("gptq-int4", "gptq_marlin", "auto"),
                                                 ("gptq-int8", "gptq_marlin", "auto"), ("nf4", "bitsandbytes", "auto"),
                                                 ("int8", "bitsandbytes", "auto"), ("nvfp4", "modelopt_fp4", "auto")])
def test_vllm_quantization_per_weight_format(weights, quant, dtype):
    a = vllm(serve(weights=weights))
    assert flag(a, "--quantization") == quant and flag(a, "--dtype") == dtype


def test_awq_gptq_name_the_marlin_kernels_on_sm80_only():
    # issue 17: an explicit "awq" keeps the slow kernel; Marlin needs compute capability 8.0 (not T4/Turing)
    for engine, run in (("vllm", vllm), ("sglang", lambda s: sglang(s))):
        assert flag(run(serve(weights="awq-int4")), "--quantization") == "awq_marlin"
        assert flag(run(serve(weights="awq-int4", gpu="t4")), "--quantization") == "awq"


def test_vllm_bitsandbytes_needs_the_out_of_tree_plugin():
    # issue 17: vLLM >= 0.28 has no in-tree bitsandbytes; the plugin registers it
    text = launch_files(serve(weights="nf4"), "vllm")["serve.sh"]
    assert "import vllm_bnb_plugin" in text and "pip install vllm-bnb-plugin" in text
    assert text.index("import vllm_bnb_plugin") < text.index("vllm serve")      # checked before serving
    assert "pre-quantized" not in text                                           # NF4 quantizes in flight
    text = launch_files(serve(weights="int8"), "vllm")["serve.sh"]
    assert "load_in_8bit checkpoint" in text and "pre-quantized checkpoint" in text
    assert "vllm_bnb_plugin" not in launch_files(serve(weights="awq-int4"), "vllm")["serve.sh"]


@pytest.mark.parametrize("kv,name", [("bf16", "auto"), ("fp16", "auto"), ("fp8", "fp8")])
def test_vllm_kv_cache_dtype(kv, name):
    assert flag(vllm(serve(kv_cache=kv)), "--kv-cache-dtype") == name


def test_vllm_multi_node_uses_ray_and_prequantized_note():
    text = launch_files(serve(16, {"tp": 8, "pp": 2}, weights="awq-int4"), "vllm")["serve.sh"]
    assert flag(argv(text, "vllm serve"), "--distributed-executor-backend") == "ray"
    assert "ray start --head" in text and "on the other 1 node(s)" in text
    assert "pre-quantized checkpoint" in text


def test_vllm_refuses_gguf_and_training():
    with pytest.raises(UnsupportedError) as err:
        launch_files(serve(weights="gguf-q4_k_m"), "vllm")
    assert "llama.cpp" in err.value.message
    with pytest.raises(UnsupportedError):
        launch_files(train(), "vllm")


# ---- SGLang --------------------------------------------------------------------------------------

def sglang(s):
    return argv(launch_files(s, "sglang")["serve.sh"], "python -m sglang")


def test_sglang_flags_follow_the_scenario():
    a = sglang(serve(8, {"tp": 2, "pp": 2}, prompt_len=1500, output_len=500, concurrency=20,
                     gpu_memory_utilization=0.8, kv_cache="fp8", weights="gptq-int4", cuda_graphs=False))
    assert (flag(a, "--tp-size"), flag(a, "--pp-size"), flag(a, "--dp-size")) == ("2", "2", "2")
    assert "--tp" not in a and "--dp" not in a and "--enable-dp-attention" not in a   # full names; dp = replicas
    assert flag(a, "--context-length") == "2000" and flag(a, "--max-running-requests") == "20"
    assert flag(a, "--mem-fraction-static") == "0.8"
    assert flag(a, "--kv-cache-dtype") == "fp8_e4m3"                # SGLang spells plain fp8 as e4m3
    assert flag(a, "--quantization") == "gptq_marlin" and "--disable-cuda-graph" not in a    # deprecated alias
    assert (flag(a, "--cuda-graph-backend-decode"), flag(a, "--cuda-graph-backend-prefill")) == ("disabled", "disabled")
    a = sglang(serve())
    assert flag(a, "--dp-size") is None and flag(a, "--pp-size") is None and flag(a, "--quantization") is None
    assert flag(a, "--cuda-graph-backend-decode") is None
    assert flag(a, "--nnodes") is None and flag(a, "--dtype") == "bfloat16"


def moe_serve(count, parallel):
    return scenario_from_dict({"model": "qwen3-30b-a3b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": count},
                               "parallel": parallel, "infer": {}})


def test_sglang_moe_attention_dp_with_expert_parallel():
    # issue 17: tp1 x dp8 with ep8 is ONE engine of 8 ranks: attention split 8 ways, experts over 8.
    # "--tp 1 --dp 8 --ep-size 8" started 8 replicas of tp 1 whose MoE width tp/ep rounds to 0.
    a = sglang(moe_serve(8, {"tp": 1, "dp": 8, "ep": 8}))
    # SGLang 0.5.23 spells attention-DP `--attn-dp-size N` (`--dp-size N --enable-dp-attention` is
    # deprecated there and goes after 2026-12-31); --dp-size would mean replicas
    assert (flag(a, "--tp-size"), flag(a, "--attn-dp-size"), flag(a, "--ep-size")) == ("8", "8", "8")
    assert flag(a, "--dp-size") is None and flag(a, "--enable-dp-attention") is None
    a = sglang(moe_serve(8, {"tp": 2, "dp": 4, "ep": 4}))          # tp x dp = 8 ranks, experts over 4 of them
    assert (flag(a, "--tp-size"), flag(a, "--attn-dp-size"), flag(a, "--ep-size")) == ("8", "4", "4")
    a = sglang(moe_serve(8, {"tp": 8, "ep": 8}))                   # no dp: plain TP + EP, no attention-DP
    assert (flag(a, "--tp-size"), flag(a, "--ep-size"), flag(a, "--attn-dp-size")) == ("8", "8", None)


def test_sglang_multi_node_and_fp8_on_ampere():
    a = sglang(serve(16, {"tp": 16}))
    assert flag(a, "--nnodes") == "2" and "--node-rank" in a and "--dist-init-addr" in a
    with pytest.raises(UnsupportedError):               # A100 has no fp8 tensor cores
        launch_files(serve(gpu="a100-sxm-80gb", weights="fp8"), "sglang")


# ---- TensorRT-LLM --------------------------------------------------------------------------------

GIB = 2 ** 30


def test_trtllm_options_and_flags_without_estimate():
    fs = launch_files(serve(2, {"tp": 2}, prompt_len=16000, output_len=1000, concurrency=64,
                            gpu_memory_utilization=0.877), "trtllm")
    opts = yaml.safe_load(fs["extra_llm_api_options.yaml"])
    assert opts["dtype"] == "bfloat16"
    assert opts["kv_cache_config"] == {"free_gpu_memory_fraction": 0.88, "dtype": "auto", "enable_block_reuse": True}
    # neither limit stated: trtllm-bench's heuristic, by hand for Llama-3.1-8B (8.03e9 params, bf16; KV 32 layers x
    # 2 x 8 heads x 128 x 2 B = 128 KiB per token) on 2 x H100 (79.65 GiB each as the catalog's usable memory):
    # room (159.30 - 14.95) GiB x 0.877 / (128 KiB x 17,000 tokens = 2.075 GiB) = 61.0 requests -> batch 64
    # (multiple of 32, floor 64); tokens 61 x (1 + 16) = 1,037 -> floor 2,048, then raised to prompt + batch = 16,064
    assert opts["cuda_graph_config"] == {"enable_padding": True, "max_batch_size": 64}
    a = argv(fs["serve.sh"], "trtllm-serve")
    assert (flag(a, "--tp_size"), flag(a, "--pp_size"), flag(a, "--max_batch_size")) == ("2", "1", "64")
    assert flag(a, "--max_num_tokens") == "16064"
    b = argv(fs["bench.sh"].split("throughput", 1)[1].join(["trtllm-bench throughput", ""]), "trtllm-bench")
    assert (flag(b, "--max_batch_size"), flag(b, "--max_num_tokens")) == ("64", "16064")
    assert flag(a, "--max_seq_len") == "17000"
    prep = argv(fs["bench.sh"], "trtllm-bench")
    assert flag(prep, "--num-requests") == "256"                  # max(100, 4 x 64)
    assert (flag(prep, "--input-mean"), flag(prep, "--output-mean")) == ("16000", "1000")


def test_trtllm_stated_pair_is_written_and_estimated_alike():
    scn = serve(2, {"tp": 2}, engine="trtllm", concurrency=64, max_num_seqs=96, max_num_batched_tokens=4096)
    a = argv(launch_files(scn, "trtllm")["serve.sh"], "trtllm-serve")
    assert (flag(a, "--max_batch_size"), flag(a, "--max_num_tokens")) == ("96", "4096")
    limits = evaluate(scn).to_json()["performance"]["details"]["engine_limits"]
    assert limits == {"max_batch": 96, "max_num_tokens": 4096, "source": "stated"}


def test_vllm_one_stated_limit_says_which_came_from_the_engine_default():
    scn = serve(1, {}, engine="vllm", concurrency=64, max_num_seqs=96)
    limits = evaluate(scn).to_json()["performance"]["details"]["engine_limits"]
    assert limits["max_batch"] == 96
    assert limits["source"] == "max_num_seqs stated, max_num_batched_tokens engine default"


def test_trtllm_launch_writes_the_estimates_limits():
    # one stated value alone is ignored by trtllm-bench (general.py get_settings): the estimate says so and the
    # launch files carry the very pair the estimate ran with
    scn = serve(2, {"tp": 2}, engine="trtllm", concurrency=64, max_num_seqs=96, prompt_len=1000, output_len=1000)
    est = evaluate(scn).to_json()
    limits = est["performance"]["details"]["engine_limits"]
    assert limits["source"] == "trtllm-bench heuristic" and limits["max_batch"] != 96
    assert any("only one of infer.max_num_seqs" in n for n in est["performance"]["notes"])
    a = argv(launch_files(scn, "trtllm", estimate=est)["serve.sh"], "trtllm-serve")
    assert (flag(a, "--max_batch_size"), flag(a, "--max_num_tokens")) == (str(limits["max_batch"]),
                                                                          str(limits["max_num_tokens"]))


@pytest.mark.parametrize("kv,peak,cap,fraction", [(40, 70, 80, 0.8), (1, 10, 80, 0.05), (60, 62, 80, 0.77),
                                                  (70, 71, 80, 0.89), (70, 70, 72, 0.95)])
def test_trtllm_kv_fraction_from_estimate(kv, peak, cap, fraction):
    # free after everything but the KV cache = cap - (peak - kv); fraction = kv / free, clamped 0.05..0.95
    # 40/50 = 0.8; 1/71 -> clamp 0.05; 60/78 = 0.769; 70/79 = 0.886; 70/72 = 0.972 -> clamp 0.95
    est = {"memory": {"peak_bytes_per_gpu": peak * GIB, "capacity_bytes_per_gpu": cap * GIB,
                      "components": {"kv_cache": kv * GIB}}}
    fs = launch_files(serve(), "trtllm", estimate=est)
    got = yaml.safe_load(fs["extra_llm_api_options.yaml"])["kv_cache_config"]["free_gpu_memory_fraction"]
    assert got == fraction
    assert flag(argv(fs["serve.sh"], "trtllm-serve"), "--kv_cache_free_gpu_memory_fraction") == f"{fraction:g}"


def test_trtllm_refusals():
    with pytest.raises(UnsupportedError) as err:
        launch_files(serve(4, {"tp": 2}), "trtllm")              # dp 2
    assert "dp=2" in err.value.message and "vllm" in err.value.message
    with pytest.raises(UnsupportedError) as err:
        launch_files(serve(gpu="a100-sxm-80gb", kv_cache="fp8"), "trtllm")
    assert "fp8 KV cache" in err.value.message
    with pytest.raises(UnsupportedError) as err:
        launch_files(serve(weights="nf4"), "trtllm")
    assert "vllm, sglang" in err.value.message


# ---- llama.cpp -----------------------------------------------------------------------------------

def test_llamacpp_context_slots_and_layers():
    fs = launch_files(serve(weights="gguf-q8_0", kv_cache="q4_0", prompt_len=1000, output_len=24, concurrency=3,
                            gpu_layers=20), "llama.cpp")
    text = fs["serve.sh"]
    a = argv(text, "llama-server")
    assert flag(a, "-c") == str(3 * 1024) and flag(a, "-np") == "3"
    assert flag(a, "-ngl") == "20" and "20 layers on the GPU, the rest on the CPU" in text
    assert (flag(a, "--cache-type-k"), flag(a, "--cache-type-v")) == ("q4_0", "q4_0")
    assert flag(a, "--split-mode") is None
    assert "llama-3.1-8b-Q8_0.gguf" in text


def test_llamacpp_two_gpus_and_refusals():
    a = argv(launch_files(serve(2, {"tp": 2}, weights="gguf-q4_k_m"), "llama.cpp")["serve.sh"], "llama-server")
    assert flag(a, "--split-mode") == "layer" and flag(a, "-ngl") == "999"
    with pytest.raises(UnsupportedError) as err:
        launch_files(serve(16, {"tp": 16}, weights="gguf-q4_k_m"), "llama.cpp")
    assert "2 nodes" in err.value.message
    with pytest.raises(UnsupportedError) as err:
        launch_files(serve(weights="gguf-q4_k_m", kv_cache="fp8"), "llama.cpp")
    assert "q8_0" in err.value.message


# ---- DeepSpeed -----------------------------------------------------------------------------------

@pytest.mark.parametrize("count,micro,glob,accum", [(8, 2, 64, 4), (4, 1, 32, 8), (2, 4, 8, 1)])
def test_deepspeed_batch_identity(count, micro, glob, accum):
    cfg = body(launch_files(train(count, micro_batch=micro, global_batch=glob), "deepspeed")["ds_config.json"])
    assert cfg["train_batch_size"] == glob
    assert cfg["train_micro_batch_size_per_gpu"] == micro and cfg["gradient_accumulation_steps"] == accum
    assert cfg["train_batch_size"] == micro * accum * count          # dp = count (no tp/pp)


@pytest.mark.parametrize("zero,offload", [(1, "none"), (2, "optimizer"), (3, "optimizer"), (3, "optimizer+params"),
                                          (0, "none")])
def test_deepspeed_zero_sections(zero, offload):
    z = body(launch_files(train(parallel={"zero": zero, "offload": offload}), "deepspeed")["ds_config.json"])
    z = z["zero_optimization"]
    assert z["stage"] == zero
    assert ("overlap_comm" in z) == (zero >= 1)
    assert ("allgather_bucket_size" in z) == (zero >= 2)
    assert ("stage3_prefetch_bucket_size" in z) == (zero == 3)
    assert z.get("offload_optimizer", {}).get("device") == (None if offload == "none" else "cpu")
    assert ("offload_param" in z) == (offload == "optimizer+params")


def test_deepspeed_precision_and_optimizer():
    cfg = body(launch_files(train(precision="fp16", tokens=1e9), "deepspeed")["ds_config.json"])
    # init_scale 4096 = 2**12; 3815 steps -> growth interval 190
    fp16 = cfg["fp16"]
    assert fp16["enabled"] and fp16["initial_scale_power"] == 12 and fp16["loss_scale_window"] == 190
    assert "bf16" not in cfg
    assert cfg["optimizer"]["params"]["weight_decay"] == 0.1 and cfg["optimizer"]["params"]["lr"] == 3e-4
    lora = body(launch_files(train(method="lora"), "deepspeed")["ds_config.json"])
    assert lora["bf16"] == {"enabled": True} and lora["optimizer"]["params"]["weight_decay"] == 0.0
    assert lora["optimizer"]["params"]["lr"] == 2e-4
    fs = launch_files(train(optimizer="sgd"), "deepspeed")
    assert "optimizer" not in body(fs["ds_config.json"]) and "created by the HF Trainer" in fs["ds_config.json"]
    assert body(fs["training_args.json"])["optim"] == "sgd"


@pytest.mark.parametrize("parallel,extra,needle", [({"zero": 0, "offload": "optimizer"}, {}, "ZeRO"),
                                                    ({"zero": 2, "offload": "optimizer"}, {"optimizer": "sgd"},
                                                     "adamw"),
                                                    ({"zero": 1, "tp": 2, "pp": 2}, {}, "megatron")])
def test_deepspeed_refusals(parallel, extra, needle):
    s = train(parallel=parallel, **extra)
    with pytest.raises(UnsupportedError) as err:
        launch_files(s, "deepspeed")
    assert needle in err.value.message


# ---- HF Trainer / accelerate ----------------------------------------------------------------------

def test_hf_lora_files():
    fs = launch_files(train(2, method="lora", lora_rank=8, lora_targets=["q_proj", "v_proj"], global_batch=8,
                            parallel={"zero": 0}), "hf")
    lc = body(fs["lora_config.json"])
    assert (lc["r"], lc["lora_alpha"], lc["target_modules"]) == (8, 16, ["q_proj", "v_proj"])   # alpha = 2 r
    assert "bnb_config.json" not in fs
    ta = body(fs["training_args.json"])
    assert ta["gradient_accumulation_steps"] == 8 // (2 * 2) and ta["weight_decay"] == 0.0
    assert ta["max_steps"] == 1000 and "placeholder" in fs["training_args.json"]
    assert yaml.safe_load(fs["accelerate_config.yaml"])["distributed_type"] == "MULTI_GPU"


@pytest.mark.parametrize("count,zero,storage", [(1, 0, None), (2, 2, "bfloat16"), (2, 0, None)])
def test_hf_qlora_quant_storage_only_when_sharded(count, zero, storage):
    fs = launch_files(train(count, method="qlora", global_batch=2 * count, parallel={"zero": zero}), "hf")
    bnb = body(fs["bnb_config.json"])
    assert bnb.get("bnb_4bit_quant_storage") == storage and bnb["bnb_4bit_compute_dtype"] == "bfloat16"


def test_hf_qlora_keeps_unquantized_weights_in_the_load_dtype():
    # peft's prepare_model_for_kbit_training upcasts every 16-bit parameter to fp32 (embeddings, head, norms);
    # the memory estimate prices them 16-bit, so the written script casts them back
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    script = launch_files(train(1, method="qlora", global_batch=2, parallel={"zero": 0}), "hf")["train_hf.py"]
    call = script.index("prepare_model_for_kbit_training(model")
    assert script.index("keep_compute_dtype(model, dtype)", call) - call < 200       # right after it
    ns = {"__name__": "train_hf", "__file__": "train_hf.py"}
    exec(compile(script, "train_hf.py", "exec"), ns)
    cfg = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                   num_key_value_heads=1, vocab_size=128)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model = peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    assert model.get_input_embeddings().weight.dtype == torch.float32      # what peft does
    ns["keep_compute_dtype"](model, torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_hf_accelerate_fsdp_and_multi_node():
    fs = launch_files(train(16, parallel={"zero": 3, "offload": "optimizer+params"}, global_batch=32), "hf")
    acc = yaml.safe_load(fs["accelerate_config.yaml"])
    assert (acc["num_machines"], acc["num_processes"], acc["distributed_type"]) == (2, 16, "FSDP")
    assert acc["fsdp_config"]["fsdp_offload_params"] is True and acc["fsdp_config"]["fsdp_reshard_after_forward"]
    assert acc["mixed_precision"] == "bf16"
    a = argv(fs["launch.sh"], "accelerate launch")
    assert "--machine_rank" in a and "--main_process_ip" in a
    with pytest.raises(UnsupportedError):
        launch_files(train(parallel={"zero": 3, "offload": "optimizer"}), "hf")
    with pytest.raises(UnsupportedError) as err:
        launch_files(train(precision="fp16", master_weights=False), "hf")
    assert "master" in err.value.message


# ---- torchrun + FSDP2 ---------------------------------------------------------------------------------

def toml_of(s):
    return tomllib.loads(launch_files(s, "torchrun")["train_fsdp2.toml"])


@pytest.mark.parametrize("zero,replicate,shard,reshard", [(0, 8, 1, "never"), (2, 1, 8, "never"),
                                                          (3, 1, 8, "always")])
def test_torchrun_parallelism_table(zero, replicate, shard, reshard):
    p = toml_of(train(parallel={"zero": zero}))["parallelism"]
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == (replicate, shard)
    assert p["fsdp_reshard_after_forward"] == reshard


def test_torchrun_training_table_and_lora():
    cfg = toml_of(train(tokens=1e9, method="lora", lora_rank=4, recompute="full"))
    tr = cfg["training"]
    assert (tr["local_batch_size"], tr["global_batch_size"], tr["seq_len"], tr["steps"]) == (2, 64, 4096, 3815)
    assert cfg["lr_scheduler"]["warmup_steps"] == 190 and cfg["activation_checkpoint"]["mode"] == "full"
    assert cfg["lora"]["r"] == 4 and cfg["lora"]["lora_alpha"] == 8 and cfg["model"]["init"] == "random"
    assert cfg["gpuplan"]["method"] == "lora"
    launch = launch_files(train(4), "torchrun")["launch.sh"]
    assert flag(argv(launch, "torchrun"), "--nproc-per-node") == "4"


@pytest.mark.parametrize("extra,parallel,needle", [({"precision": "fp16"}, None, "precision 'fp16'"),
                                                   ({"optimizer": "lion"}, None, "optimizer 'lion'"),
                                                   ({}, {"zero": 3, "offload": "optimizer"}, "offload 'optimizer'"),
                                                   ({"method": "qlora"}, None, "method 'qlora'")])
def test_torchrun_refusals(extra, parallel, needle):
    s = train(parallel=parallel, **extra)
    with pytest.raises(UnsupportedError) as err:
        launch_files(s, "torchrun")
    assert needle in err.value.message


# ---- Megatron ------------------------------------------------------------------------------------

def megatron(s):
    a = argv(launch_files(s, "megatron")["train_megatron.sh"], "torchrun")
    return a[next(i for i, x in enumerate(a) if x.endswith("pretrain_gpt.py")) + 1:]


def test_megatron_layout_flags():
    # 8 GPUs, tp 2 x pp 4 -> dp 1; 32 layers / (pp 4 x vpp 2) = 4 per virtual stage
    a = megatron(train(parallel={"tp": 2, "pp": 4, "vpp": 2, "zero": 1}, global_batch=16))
    assert (flag(a, "--tensor-model-parallel-size"), flag(a, "--pipeline-model-parallel-size")) == ("2", "4")
    assert flag(a, "--num-layers-per-virtual-pipeline-stage") == "4"
    assert flag(a, "--sequence-parallel") is True and flag(a, "--use-distributed-optimizer") is True
    batch = (flag(a, "--micro-batch-size"), flag(a, "--global-batch-size"), flag(a, "--seq-length"))
    assert batch == ("2", "16", "4096")
    a = megatron(train(parallel={"tp": 2, "sp": False, "cp": 2, "zero": 0}, global_batch=4))
    assert flag(a, "--sequence-parallel") is None and flag(a, "--use-distributed-optimizer") is None
    assert flag(a, "--context-parallel-size") == "2"


def test_megatron_precision_flags():
    a = megatron(train(precision="fp16", tokens=1e9))
    assert flag(a, "--fp16") is True and flag(a, "--initial-loss-scale") == "4096"
    assert flag(a, "--loss-scale-window") == "190" and flag(a, "--train-iters") == "3815"
    a = megatron(train(precision="fp8"))
    assert flag(a, "--bf16") is True and flag(a, "--fp8-format") == "hybrid"
    with pytest.raises(UnsupportedError) as err:
        launch_files(train(precision="fp8", hw={"gpu": "a100-sxm-80gb"}), "megatron")
    assert "no fp8 tensor cores" in err.value.message


def megatron_model(model, **train_kw):
    t = {"seq_len": 4096, "micro_batch": 1, "global_batch": 8, **train_kw}
    return megatron(scenario_from_dict({"model": model, "task": "train", "hardware": {"gpu": "h100-sxm", "count": 8},
                                        "parallel": {"zero": 1}, "train": t}))


def test_megatron_architecture_switches_come_from_the_model():
    # issue 17. Values from the bundled HF configs: Qwen3-8B rms_norm_eps 1e-06 with q/k norms;
    # Qwen2.5-7B rms_norm_eps 1e-06 with q/k/v biases and no other bias; Llama-3.1-8B 1e-05, no biases.
    a = megatron_model("Qwen/Qwen3-8B")
    assert flag(a, "--qk-layernorm") is True and flag(a, "--norm-epsilon") == "1e-06"
    assert flag(a, "--add-qkv-bias") is None and flag(a, "--disable-bias-linear") is True
    a = megatron_model("Qwen/Qwen2.5-7B")
    assert flag(a, "--add-qkv-bias") is True and flag(a, "--disable-bias-linear") is True
    assert flag(a, "--qk-layernorm") is None and flag(a, "--norm-epsilon") == "1e-06"
    a = megatron_model("llama-3.1-8b")
    assert flag(a, "--qk-layernorm") is None and flag(a, "--add-qkv-bias") is None
    assert flag(a, "--norm-epsilon") == "1e-05"


def test_megatron_rope_scaling_factor_from_the_model():
    # Llama-3.1 configs say factor 8.0, Llama-3.2 factor 32.0 (bundled HF configs); Megatron's default is 8
    assert flag(megatron_model("llama-3.1-8b"), "--rope-scaling-factor") == "8"
    a = megatron_model("meta-llama/Llama-3.2-3B")
    assert flag(a, "--use-rope-scaling") is True and flag(a, "--rope-scaling-factor") == "32"
    assert flag(megatron_model("Qwen/Qwen3-8B"), "--use-rope-scaling") is None


def test_megatron_refuses_what_the_gpt_arguments_cannot_describe():
    # Gemma 3: sandwich norms, GeGLU and 5:1 local/global windows -> refused, not silently a Llama
    with pytest.raises(UnsupportedError) as err:
        megatron_model("google/gemma-3-1b-it")
    assert "sandwich norm placement" in err.value.message and "Megatron-Bridge" in err.value.fix


def test_megatron_resumes_from_its_checkpoints():
    # issue 17: --save without --load restarted from scratch
    a = megatron_model("llama-3.1-8b")
    assert flag(a, "--load") == flag(a, "--save") == "$CHECKPOINT_DIR"
    assert "--exit-signal-handler" in a                             # SIGTERM -> save and exit


@pytest.mark.parametrize("count,parallel,extra,needle", [
    (6, {"pp": 3, "zero": 0}, {"global_batch": 12}, "32 layers do not split evenly into 3"),
    (8, {"pp": 1, "vpp": 2}, {}, "vpp=2 with pp=1"),
    (8, {"zero": 3, "offload": "optimizer+params"}, {}, "offload 'optimizer+params'"),
    (8, {"zero": 1}, {"method": "lora"}, "method 'lora'"),
    (8, {"zero": 1}, {"optimizer": "adafactor"}, "optimizer 'adafactor'")])
def test_megatron_refusals(count, parallel, extra, needle):
    s = train(count, parallel=parallel, **extra)
    with pytest.raises(UnsupportedError) as err:
        launch_files(s, "megatron")
    assert needle in err.value.message


# ---- SLURM ---------------------------------------------------------------------------------------

def sbatch_lines(text):
    return dict(ln[len("#SBATCH "):].split("=", 1) for ln in text.splitlines() if ln.startswith("#SBATCH --")
                and "=" in ln)


@pytest.mark.parametrize("count,gpn,nodes,per_node", [(16, None, 2, 8), (4, None, 1, 4), (32, 4, 8, 4)])
def test_slurm_nodes_consistent_with_count(count, gpn, nodes, per_node):
    s = train(count, hw={"gpus_per_node": gpn} if gpn else None, global_batch=2 * count)
    fs = launch_files(s, "slurm")
    sb = sbatch_lines(fs["slurm.sbatch"])
    assert sb["--nodes"] == str(nodes) and sb["--ntasks-per-node"] == "1" and sb["--gpus-per-node"] == str(per_node)
    assert int(sb["--nodes"]) * int(sb["--gpus-per-node"]) == count
    assert sb["--cpus-per-task"] == str(max(8, 8 * per_node))
    assert "launch.sh" in fs and "accelerate_config.yaml" in fs             # framework hf -> hf engine
    assert sbatch_lines(fs["slurm.sbatch"])["--time"] == "1-00:00:00"       # no prediction: the 24 h limit
    assert 'CHUNKS="${CHUNKS:-1}"' in fs["submit.sh"]


@pytest.mark.parametrize("ttt,limit,time,jobs", [
    (7200.0, None, "0-04:00:00", 1),           # ceil(7200 x 1.2 / 3600) + 1 = 4 h: one job
    (3600.0 * 30, None, "1-00:00:00", 2),      # 36 + 1 = 37 h > 24 h: two jobs of 24 h
    (249 * 86400.0, None, "1-00:00:00", 299),  # issue 17's 249 days: 7172 + 1 = 7173 h / 24 -> 299 jobs
    (3600.0 * 30, 48, "1-13:00:00", 1),        # a 48 h partition takes the 37 h run in one job
    (3600.0 * 30, 4.5, "0-04:30:00", 9)])      # 37 / 4.5 -> 9 jobs
def test_slurm_time_limit_and_chained_jobs(ttt, limit, time, jobs):
    fs = launch_files(train(16, global_batch=32), "slurm", estimate={"performance": {"time_to_train_s": ttt}},
                      time_limit_h=limit)
    sb = fs["slurm.sbatch"]
    assert sbatch_lines(sb)["--time"] == time
    assert f'CHUNKS="${{CHUNKS:-{jobs}}}"' in fs["submit.sh"]
    assert "--dependency=afterany:" in fs["submit.sh"]
    assert "#SBATCH --requeue" in sb and "#SBATCH --signal=B:USR1@600" in sb and "trap on_usr1 USR1" in sb


def test_slurm_srun_cpus_threads_and_fabric():
    sb = launch_files(train(16, global_batch=32), "slurm")["slurm.sbatch"]
    srun = argv(sb, "srun")
    assert "--cpus-per-task=$SLURM_CPUS_PER_TASK" in srun                  # Slurm >= 22.05 does not inherit it
    assert 'export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"' in sb
    assert "export OMP_NUM_THREADS=8" in sb                                 # 64 cores / 8 workers
    assert "ib-ndr-400 (infiniband)" in sb and "NCCL_IB_DISABLE=0" in sb   # the H100 node's default fabric
    efa = launch_files(train(16, hw={"network": "efa-3200"}, global_batch=32), "slurm")["slurm.sbatch"]
    assert "FI_PROVIDER=efa" in efa
    eth = launch_files(train(16, hw={"network": "eth-100"}, global_batch=32), "slurm")["slurm.sbatch"]
    assert "NCCL_IB_DISABLE=1" in eth
    with pytest.raises(InputError):
        launch_files(train(16, global_batch=32), "slurm", time_limit_h=0.25)


def test_slurm_inner_engines_and_refusals():
    fs = launch_files(train(16, global_batch=32), "slurm", inner="deepspeed")
    assert "ds_config.json" in fs and "bash launch.sh" in fs["slurm.sbatch"]
    assert "--job-name=gpuplan-deepspeed" in fs["slurm.sbatch"]
    with pytest.raises(UnsupportedError) as err:
        launch_files(train(16, global_batch=32), "slurm", inner="vllm")
    assert "wrapping engine 'vllm'" in err.value.message
    with pytest.raises(UnsupportedError) as err:
        launch_files(serve(), "slurm")
    assert "task 'infer'" in err.value.message and "vllm" in err.value.message


# ---- offload must not be dropped silently (found while writing these tests) -----------------------

def test_hf_single_gpu_offload_is_honoured_or_refused():
    s = train(1, parallel={"zero": 3, "offload": "optimizer+params"}, global_batch=2)
    try:
        fs = launch_files(s, "hf")
    except UnsupportedError:
        return
    acc = yaml.safe_load(fs["accelerate_config.yaml"])
    assert acc["distributed_type"] == "FSDP" and acc["fsdp_config"]["fsdp_offload_params"] is True


def test_torchrun_zero0_offload_is_honoured_or_refused():
    s = train(2, parallel={"zero": 0, "offload": "optimizer+params"}, global_batch=4)
    try:
        cfg = toml_of(s)
    except UnsupportedError:
        return
    # train_fsdp2.py applies CPUOffloadPolicy only on its FSDP path, i.e. when [gpuplan] zero > 0
    assert cfg["gpuplan"]["zero"] > 0 and cfg["parallelism"]["data_parallel_shard_degree"] == 2


# ---- every training launcher resumes from its latest checkpoint (issue 17) -----------------------

def test_every_training_launcher_resumes():
    fs = launch_files(train(), "torchrun")
    toml = tomllib.loads(fs["train_fsdp2.toml"])
    assert toml["checkpoint"] == {"enable": True, "folder": "checkpoint", "interval": 500}
    assert "latest_step(ck_dir)" in fs["train_fsdp2.py"] and "load_checkpoint(" in fs["train_fsdp2.py"]
    assert "torchtitan v0.2.2" in fs["train_fsdp2.toml"]                 # the version whose key names it uses
    for engine in ("hf", "deepspeed"):
        script = launch_files(train(), engine)["train_hf.py"]
        assert "get_last_checkpoint(args.output_dir)" in script and "resume_from_checkpoint=last" in script
    assert "--load" in megatron(train(parallel={"zero": 1}))


def test_hf_training_arguments_use_activation_checkpointing():
    # transformers 5.x: gradient_checkpointing is a deprecated alias of activation_checkpointing
    args = body(launch_files(train(recompute="full"), "hf")["training_args.json"])
    assert args["activation_checkpointing"] is True and args["activation_checkpointing_kwargs"] == {"use_reentrant": False}
    assert not any(k.startswith("gradient_checkpointing") for k in args)


def test_trtllm_under_load_estimate_simulator_and_launch_share_trtllm_serves_defaults():
    # a service at a request rate runs trtllm-serve, whose limits without flags are BuildConfig's 2048 / 8192
    # (tensorrt_llm/commands/serve.py get_llm_args); the steady-state point, the simulator's policy and the
    # launch files must all carry that pair
    scn = serve(1, engine="trtllm", concurrency=8, prompt_len=512, output_len=128,
                load={"rate_per_s": 2, "requests": 200, "seed": 0})
    est = evaluate(scn).to_json()
    assert est["performance"]["details"]["engine_limits"] == {"max_batch": 2048, "max_num_tokens": 8192,
                                                              "source": "trtllm-serve defaults"}
    from gpuplan import pipeline
    r = pipeline.resolve(scn)
    policy = pipeline.serving_load(r, pipeline.memory(r), search=False)["policy"]
    assert (policy["max_num_seqs"], policy["max_num_batched_tokens"]) == (2048, 8192)
    a = argv(launch_files(scn, "trtllm", estimate=est)["serve.sh"], "trtllm-serve")
    assert (flag(a, "--max_batch_size"), flag(a, "--max_num_tokens")) == ("2048", "8192")
