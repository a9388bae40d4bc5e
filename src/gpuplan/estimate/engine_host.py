"""Serving-engine work outside the GPU forward: the engine's per-sequence host work each iteration and
the front end's latency per request (docs/serving-load.md, *Host and front-end*).

Two mechanisms, each with its own published measurement (none is fitted on the load-test rows in
validation/gathered/serve-load.csv):

* **Per-sequence host work per iteration** (scheduler bookkeeping, the output update, input preparation):
  `seq_s` seconds per scheduled sequence. Whether it adds to the GPU step or hides under it depends on
  the engine: an engine that schedules step n+1 while the GPU runs step n (vLLM's async scheduling,
  SGLang's overlap scheduler, TensorRT-LLM's overlap scheduler) takes max(GPU, host); one that
  schedules in between takes GPU + host (`step_with_host`).
* **Front-end latency per request** (HTTP server, request parsing and tokenisation, hand-off to the
  engine process, the first streamed chunk): `frontend_s` seconds added to every request's
  time to first token; it does not occupy the GPU.
* **Front-end streaming throughput** (`stream_token_s`): the API server is one Python process (vLLM's
  `vllm serve` runs one unless `--api-server-count` says more), and every token it streams (detokenised,
  wrapped in a response chunk, written to its connection) takes that one core `stream_token_s` seconds.
  The client cannot receive more than 1 / `stream_token_s` tokens a second per process, so the step it
  sees lasts at least `stream_token_s` x the decoding requests / the processes (the load simulator's
  `StreamCeiling`, load/cost.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..hardware.hosts import host_cpu_speed
from ..versions import Version, parse_version


@dataclass(frozen=True)
class EngineHost:
    seq_s: float          # host seconds per scheduled sequence per iteration
    overlapped: bool      # host work of one step runs while the GPU runs another
    frontend_s: float     # front-end seconds per request, before its first token reaches the client
    source: str
    stream_token_s: float = 0.0  # seconds of one API-server process per streamed token (0: not modelled)
    # vLLM V0 only (VLLM_V0 below): host seconds per running sequence *group* (one request; SamplingParams.n samples
    # of a prompt share it) per iteration, and the share of the per-sequence and per-group work that is V0's output
    # processing, which its async output processor runs beside the next forward instead of after it
    group_s: float = 0.0
    output_seq_s: float = 0.0
    output_group_s: float = 0.0


# vLLM V1.
# seq_s: GPUStack's performance lab ran gpt-oss-20b on one H100 with vLLM 0.11.0 (synchronous scheduling)
# with and without `--async-scheduling`, 1000 ShareGPT requests sent at once (docs/performance-lab/
# gpt-oss-20b/h100.md, gpustack/gpustack at 7b50d5067ddbdeba0739e7f72d6f40e53d3b9a04): mean TPOT 91.33 ms
# -> 86.81 ms. The 4.52 ms a step saves is the host work async scheduling hides; over the ~1000 requests
# the engine runs at once (max_num_seqs 1024 on an H100) that is 4.5 us per sequence. (The model and rows
# differ from the Qwen3 rows of validation/gathered/serve-load.csv.) For scale, vLLM PR 46112 times one
# of the phases alone, `Scheduler.update_from_output`: 0.142 ms at batch 128, 0.287 ms at 256 (1.13 us per
# sequence). The fixed part of a step (PR 42131: schedule 0.2 ms, _update_states 0.18 ms, input
# preparation ~0.05 ms at small batches) is inside the calibrated step_overhead_s.
# overlapped: async scheduling is on by default from vLLM 0.14.0 (release notes: "Async scheduling is now
# enabled by default", PR 27614); infer.async_scheduling false describes older versions.
# frontend_s: vLLM PR 17866's own `vllm bench serve` run (V1, Llama-3.2-1B, 100 requests of 500 prompt and
# 50 output tokens at 0.92 req/s, i.e. one at a time): mean TTFT 21.47 ms, mean TPOT 2.73 ms. The GPU is not
# named; an H100 SXM is assumed, on which gpuplan's `serve` prices that prompt at 4.0 ms, leaving
# 21.47 - 4.0 = 17.5 ms outside the GPU (the OpenAI completions endpoint: no chat template). The priced TPOT
# (2.43 ms on an H100, 3.03 ms on an A100) brackets the measured 2.73 ms and cannot tell the two apart; on an
# A100 the prefill is 8.2 ms and the front end would be 13.3 ms.
# stream_token_s: vLLM PR 13923 (njhill, "[V1] AsyncLLM data parallel", comment of 2025-03-17) ran vLLM's serving
# benchmark with 300 concurrent requests against "llama-1b" (Llama-3.2-1B, the model of the same author's PR
# 17546) on one A100, V1 engine, one API-server process: 6000 requests (1,322,102 prompt and 1,205,048
# generated tokens: 220 and 201 a request, ShareGPT lengths) in 80.55 s: 74.49 req/s, 14,960.69 output
# tokens/s, mean TPOT 19.47 ms. The GPU is not the limit: gpuplan prices that model's decode step at 300
# sequences at a fraction of 19.47 ms (tests/test_engine_host.py), and the engine core's own host work (seq_s
# x 300) is 1.4 ms of it; the same author's PR 17546 (`--api-server-count`) exists because the one API-server
# process is. Saturated, that process streamed 14,960.69 tokens a second: 66.8 us of its core per streamed
# token, the request's own admission work (parsing, tokenisation, hand-off: ~1/201 of it per token) included
# - the run cannot split the two, and charging it all per request instead is ruled out by the unscored
# gpt-oss-20b rows of the same lab (GX01/GX02: 1000 chat requests admitted far faster than 13.4 ms each;
# docs/serving-load.md). It matches the per-chunk ceiling earlier read off those rows (~70 us; diagnostic).
# The benchmark's default endpoint (/v1/completions) is assumed; the host CPU is not named and is taken as
# gpuplan's reference host (hardware/hosts.py; a named hardware.host_cpu scales it by its single-thread
# speed). Not read from any row of validation/gathered/serve-load.csv.
VLLM_STREAM_TOKENS_PER_S = 1_205_048 / 80.55
VLLM = EngineHost(seq_s=(91.33e-3 - 86.81e-3) / 1000, overlapped=True, frontend_s=21.47e-3 - 4.0e-3,
                  source="GPUStack performance lab gpt-oss-20b H100 (vLLM 0.11 with/without async scheduling), "
                         "vLLM 0.14.0 release notes (async scheduling default), vLLM PR 17866 (light-load TTFT "
                         "less the priced prefill), vLLM PR 13923 (one API server saturated at 14,961 "
                         "streamed tokens/s)",
                  stream_token_s=1.0 / VLLM_STREAM_TOKENS_PER_S)

# vLLM 0.11.0's chat endpoint parses the model's Jinja chat template again for every request, in the one
# API-server process (infer.chat_template_parse; docs/serving-load.md, *The chat template in vLLM 0.11.0's API
# server*). Read in the vllm-0.11.0 PyPI wheel (vllm/_version.py: git f71952c1c): OpenAIServingChat.
# create_chat_completion -> OpenAIServing._preprocess_chat -> chat_utils.apply_hf_chat_template ->
# resolve_chat_template_kwargs, which builds a new jinja2 ImmutableSandboxedEnvironment, parses the whole
# template (env.parse) and walks it (jinja2.meta.find_undeclared_variables) on every call; PR 25794 (a
# security fix, 2025-09) added that call for each request, and vLLM 0.11.1 wraps it in lru_cache
# (_cached_resolve_chat_template_kwargs, read in the vllm-0.11.1 wheel). Rendering itself is cached (0.03 ms).
# The cost: that function's Jinja work timed on Qwen3's chat template (3,810 characters: the template of the
# GPUStack rows' models) on this project's development machine, an AMD EPYC Zen 4 (Genoa: CPU family 25,
# model 17, the reference host's generation, hardware/hosts.py), Python 3.11.7, jinja2 3.1.6: 9.81 ms a
# request, best of 15 runs of 20 (median 10.22 ms; Llama 3.1's 5,396-character template 10.85 ms;
# scripts/bench_chat_template_parse.py repeats the timing on any CPU). A
# published figure of the same kind: vLLM PR 20065 (2025-06) found that parsing and walking a Llama chat
# template once per request (the then-uncached _detect_content_format) held 1000 benchmark requests for 6-8 s
# "before prompts actually are started to process", 6-8 ms a request on its host (that half of the work,
# parse and walk, takes 4.8 ms of Llama 3.1's template on the machine above). Not read from any row of
# validation/gathered/serve-load.csv.
VLLM_CHAT_TEMPLATE_PARSE_S = 9.81e-3


def chat_template_parse_s(engine: str, enabled: bool | None) -> float:
    """Seconds of the API-server process each chat request spends parsing the chat template (vLLM 0.11.0,
    infer.chat_template_parse), on the reference host; 0 when the scenario does not say so."""
    return VLLM_CHAT_TEMPLATE_PARSE_S if (enabled and engine == "vllm") else 0.0


# SGLang: the overlap scheduler is on by default since v0.4 (LMSYS blog, 2024-12-04, "zero-overhead batch
# scheduler"). seq_s: no per-sequence measurement of its own was found: 0, not modelled.
# frontend_s: tenstorrent/tt-inference-server issue 3560 (comment of 2026-05-18) timed SGLang's whole serving
# path over a mock model whose forward busy-waits 1/380 s = 2.632 ms and does nothing else (dmadicTT/
# tt-sglang-plugin, HOW_WE_MEASURE_OVERHEAD.md at 494915e1cc6c79043a9486b1afea4dd09eff4970: HTTP server,
# tokenizer manager, scheduler and detokenizer processes and their ZMQ hand-offs run unchanged; on that CPU
# engine the overlap scheduler is off, so nothing of the front end hides under a forward). `vllm bench serve`,
# /v1/chat/completions, 128-token random prompts, one request at a time (4 requests: a small sample): median
# TTFT 9.54 ms. The first token needs one forward (the prefill), so 9.54 - 2.632 = 6.91 ms is outside the
# model: chat template, tokenisation,
# the hand-offs, the scheduler's own prefill bookkeeping and the first streamed chunk. The same run's TPOT,
# 2.94 ms against the 2.632 ms forward, puts the scheduler's own per-step tick at ~0.31 ms, so the rest
# (~6.6 ms) is the per-request path. The run's SGLang is the 2026-05 main; the three-process design (tokenizer
# manager -> scheduler -> detokenizer over ZMQ) is the one SGLang has had since its first server releases,
# and no version-specific light-load measurement was found, so every SGLang version gets this constant.
# Not one of the scored rows' sources (validation/gathered/serve-load.csv).
SGLANG = EngineHost(seq_s=0.0, overlapped=True, frontend_s=9.54e-3 - 1.0 / 380,
                    source="SGLang v0.4 blog (overlap scheduler default); tenstorrent/tt-inference-server issue "
                           "3560 (SGLang over a 2.632 ms mock forward: median TTFT 9.54 ms, less the one "
                           "forward); no per-sequence measurement found")

# TensorRT-LLM: the overlap scheduler is enabled by default (docs/source/features/overlap-scheduler.md,
# `disable_overlap_scheduler` defaults to False).
# seq_s: TensorRT-LLM PR 10273 (lancelly, description of 2025-12-24, merged 2026-01-20; the PyTorch executor of that
# month's main; its baseline runs the C++ CapacityScheduler/MicroBatchScheduler) timed the executor loop of trtllm-serve on
# GB200 (its host: Grace), attention DP over 2 GPUs, max_batch_size 1536 per rank, a client at max-concurrency 3072
# (1536 running sequences a rank), ISL/OSL 1k/1k: the average per-iteration `host_step_time` was 44.53 ms for
# Llama-3.2-1B (45.11 ms for GPT-OSS-120B). `host_step_time` is the wall time between two passes of the
# executor loop (PyExecutor._profiler, tensorrt_llm/_torch/pyexecutor/py_executor.py); gpuplan prices a 1B model's
# decode step at 1536 sequences at 16 ms on a GB200 (tests/test_engine_host.py; the PR calls the scenario
# host-bound), so the
# 44.53 ms is host work: 44.53 ms / 1536 = 28.99 us per scheduled sequence per iteration on Grace. In reference-host
# seconds (hardware/hosts.py; `_Serving.host_step` divides by the host's speed) that is 28.99 us x Grace's speed,
# 1,052 / 2,893 (host_cpus.csv `grace`: TransformerEngine issue 2053's PyTorch host times on Grace and a DGX H100
# Xeon): 10.54 us. The perf-overview rows (the v1.0 page) predate the PR by months; the sampler and
# input-preparation loops it times were rewritten only later (PRs 11141, 11704, 16313, 16564, 2026), so the
# constant is taken for v1.0 too. Not read from any row of validation/public/inference.csv.
# frontend_s: TensorRT-LLM PR 10156 (2025-12, a sampler change; its test run) served Qwen3-32B with a bare
# `trtllm-serve serve` (PyTorch backend, tp 1, defaults) and timed it with AIPerf on the chat endpoint,
# streaming, one request at a time, 50-token synthetic prompts, 200 output tokens, 256 requests: mean TTFT
# 40.10 ms, mean inter-token latency 24.64 ms (time to second token 24.36 ms). A ~60-token prompt (50 plus
# the chat template) of a 32B model reads the weights once, as a decode step does: gpuplan prices the two
# within 0.1 % of each other on any GPU (27.86 vs 27.87 ms on an H100 SXM, whose 2.66 TB/s effective the
# measured step matches; an H200 would step in ~21 ms, an A100 in ~43 ms). So the prefill costs one measured
# step and 40.10 - 24.64 = 15.46 ms of the TTFT is outside the GPU: the OpenAI server, chat template and
# tokenisation, the hand-off to the executor worker, the first response's detokenisation and the first
# streamed chunk. Not one of the scored rows' sources (validation/gathered/serve-load.csv); NIM's own front
# end (its rows' engine is TensorRT-LLM behind NIM's server) is assumed to cost the same.
TRTLLM_PR10273_STEP_S = 44.53e-3   # host_step_time per iteration, Llama-3.2-1B, GB200 (Grace), C++ scheduler
TRTLLM_PR10273_SEQS = 3072 // 2     # max-concurrency 3072 over 2 attention-DP ranks (max_batch_size 1536)
TRTLLM_PR10273_HOST = "grace"
TRTLLM = EngineHost(seq_s=TRTLLM_PR10273_STEP_S / TRTLLM_PR10273_SEQS * host_cpu_speed(TRTLLM_PR10273_HOST),
                    overlapped=True, frontend_s=40.10e-3 - 24.64e-3,
                    source="TensorRT-LLM overlap-scheduler docs (default on); TensorRT-LLM PR 10273 (GB200/Grace, "
                           "1536 running sequences a rank: host_step_time 44.53 ms per iteration -> 28.99 us per "
                           "sequence on Grace, in reference-host seconds x 1052/2893); TensorRT-LLM PR 10156 "
                           "(trtllm-serve, Qwen3-32B, one request at a time: mean TTFT 40.10 ms less one 24.64 ms "
                           "step for the prefill)")

NONE = EngineHost(seq_s=0.0, overlapped=False, frontend_s=0.0, source="not modelled")

# vLLM without CUDA graphs (--enforce-eager, LLM(enforce_eager=True); infer.cuda_graphs false). With graphs,
# a decode-only batch replays one captured graph; eager (and, in V0, any prefill step or a batch above the
# largest captured size: ModelInputForGPUBuilder._use_captured_graph in vllm/worker/model_runner.py of the V0
# line, "decode_only and not enforce_eager and batch_size <= max_batchsize_to_capture") runs the model's
# Python forward, which dispatches and launches every op of every layer from the host. The GPU runs them
# asynchronously, so a step lasts max(GPU, host issue) - the mechanism of the HF eager constant
# (efficiency.json engines.hf.host_issue_layer_s), with vLLM's own (fused, fewer) ops per layer.
# Host seconds per decoder layer, read off vLLM PR 1440 (yunfeng-scale, 2023-10-20, the CUDA-graph prototype
# PR 1926 superseded): Llama 2 7B, no tensor parallelism, batch 1, 5 prompt and 100 output tokens, "about
# 1.05 s with CUDA graph ... vs about 1.2 s without". With graphs a step takes 10.5 ms, so the GPU's share of
# the eager step is at most that; the eager step, 12.0 ms, is set by the host: 12.0 ms / 32 layers =
# 0.375 ms per layer, its host's fixed per-step work included (as the HF constant includes it). The GPU and
# host CPU are not named: the host is taken as gpuplan's reference host (hardware/hosts.py, scaled by the
# host's single-thread speed like the HF constant). Not read from any scored row.
VLLM_EAGER_LAYER_S = 1.2 / 100 / 32


# vLLM V1's CUDA graphs cover batches up to a largest captured size only. Read in the vllm-0.11.0 PyPI wheel
# (vllm/_version.py: git f71952c1c):
# * vllm/config/scheduler.py:222-227 `SchedulerConfig.__post_init__`: with no --cuda-graph-sizes,
#   cuda_graph_sizes = [min(max_num_seqs * 2, 512)];
# * vllm/config/__init__.py:593-610 `VllmConfig._set_cudagraph_sizes`: one value n gives the capture list
#   [1, 2, 4] + range(8, n + 1, 8), then every size above max_num_batched_tokens is dropped (no enforce_eager;
#   sequence parallelism, off by default, would round to the TP size);
# * vllm/config/compilation.py:549-551 `init_with_cudagraph_sizes`: max_capture_size = the largest size left;
# * vllm/v1/worker/gpu_model_runner.py:1927-1944 `_get_num_input_tokens`: a step of at most that many tokens is
#   padded to the next captured size ("Use CUDA graphs"), a larger one runs unpadded ("Eager mode"); the
#   dispatcher (vllm/v1/cudagraph_dispatcher.py:96-125) finds no FULL or PIECEWISE key for it and returns
#   CUDAGraphMode.NONE, and the piecewise backend then calls the compiled graph for the general shape
#   (vllm/compilation/cuda_piecewise_backend.py:86-96; vllm/compilation/cuda_graph.py:113-121 returns
#   self.runnable(...) for NONE): every kernel of every layer is launched from the host, as without graphs.
# So with `vllm serve`'s defaults (EngineArgs._set_default_args, vllm/engine/arg_utils.py:1605-1624: 1024
# sequences / 8192 tokens on GPUs with >= 70 GiB other than A100, 256 / 2048 otherwise) the largest graph is
# 512 tokens on every GPU: an A100's 256 decodes always replay one, an H100's 513-1024 decodes never do.
VLLM_V1_GRAPH_SIZE_CAP = 512


def vllm_v1_max_capture_size(max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """The most tokens a vLLM V1 step may carry and still replay a CUDA graph, with the default capture
    sizes (no --cuda-graph-sizes): the largest of [1, 2, 4] + range(8, min(2 x max_num_seqs, 512) + 1, 8) that
    is not above max_num_batched_tokens; 0 when none is left (see VLLM_V1_GRAPH_SIZE_CAP's comment)."""
    n = min(int(max_num_seqs) * 2, VLLM_V1_GRAPH_SIZE_CAP)
    sizes = [s for s in [1, 2, 4] + list(range(8, n + 1, 8)) if s <= int(max_num_batched_tokens)]
    return max(sizes) if sizes else 0


def eager_issue_layer_s(engine: str, cuda_graphs: bool) -> float:
    """Host seconds per decoder layer to issue one eager forward of `engine` run without CUDA graphs
    (0 with graphs, and for engines without a measurement: SGLang --disable-cuda-graph is not modelled;
    engine hf has its own constant in efficiency.json)."""
    return VLLM_EAGER_LAYER_S if (engine == "vllm" and not cuda_graphs) else 0.0

# vLLM V0 (the LLMEngine of every release before 0.8; infer.vllm_v0): the engine's own host work per decode step,
# timed on this project's development machine (the reference host's generation: AMD EPYC Zen 4 Genoa, CPU family
# 25 model 17; Python 3.11.7, torch 2.13 CPU) by scripts/bench_vllm_v0_host.py, which runs the real `LLMEngine.step`
# of the vLLM v0.6.3 source release (PyPI vllm-0.6.3.tar.gz; the vLLM verl's ROCm image builds) on decode steps of
# a full batch (docs/posttrain.md, *vLLM V0's per-sequence host work*):
# * schedule: `Scheduler.schedule` (`_schedule_chunked_prefill`, block manager v2 `can_append_slots` /
#   `append_slots`, a SequenceGroupMetadata per group);
# * prepare: the worker's `ModelInputForGPUBuilder` (vllm/worker/model_runner.py: per-sequence token, position and
#   length lists; the ROCm flash-attention metadata builder's slot mapping and block tables; build() into tensors);
# * output: `_process_model_outputs` (SingleStepOutputProcessor: token append, stop check, n > 1 parent/child
#   bookkeeping, freeing; a RequestOutput only when a group finishes, as the offline LLM class asks: FINAL_ONLY);
# * sampler: the V0 Sampler's host side (SamplingMetadata.prepare, SamplingTensors, the sampled tokens' and their
#   log-probs' pythonization into SequenceOutputs; logprobs=0, detokenize off: verl's rollout SamplingParams), run on
#   CPU logits 64 and 512 wide and carried to width 0 (the CPU's own tensor work, 0.032 us per logit, is the GPU's).
# Each figure is the increase of the best step (of 30-40) per running sequence from a small to a full batch (64 ->
# 1024, or 60 -> 1020 at n = 5), the lowest over repeated runs (the machine is shared: medians run 10-30 % higher, and
# a run timing every part in one process up to 1.5x higher, so these are a floor). Two sampling widths separate
# per-group from per-sequence work:
#   n = 1:  schedule 13.1, prepare 8.85, output 5.3, sampler 12.8 us a sequence (40.1);
#   n = 5:  schedule  6.7, prepare 5.69, output 3.9, sampler  5.2 us a sequence (21.5);
# per_seq(n) = seq_s + group_s / n gives: schedule s 5.1 / g 8.0 us, prepare s 4.9 / g 3.95, output s 3.6 / g 1.7,
# sampler s 3.3 / g 9.5. No row of any validation file was read.
# overlapped: V0 has no async scheduling (the scheduler runs between forwards). Its async output processor (on by
# default from 0.6.0 with CUDA graphs; off under enforce_eager: "Since, enforce-eager is enabled, async output
# processor cannot be used", vllm/config.py verify_async_output_proc @v0.6.3; off with pipeline parallelism or
# speculative decoding) runs the output share during the next forward (output_seq_s / output_group_s).
VLLM_V0_SCHEDULE_SEQ_S, VLLM_V0_SCHEDULE_GROUP_S = 5.1e-6, 8.0e-6
VLLM_V0_PREPARE_SEQ_S, VLLM_V0_PREPARE_GROUP_S = 4.9e-6, 3.95e-6
VLLM_V0_OUTPUT_SEQ_S, VLLM_V0_OUTPUT_GROUP_S = 3.6e-6, 1.7e-6
VLLM_V0_SAMPLER_SEQ_S, VLLM_V0_SAMPLER_GROUP_S = 3.3e-6, 9.5e-6


# Multi-step scheduling (infer.num_scheduler_steps N > 1; read in the vllm-0.6.0 PyPI wheel, sha256 6d68104d...):
# the scheduler runs once per N-step run (vllm/engine/llm_engine.py:1500-1519 `step`: `schedule()` only when
# `_has_remaining_steps` is false) and the model input is built once, the later steps advancing it on the GPU
# (vllm/worker/multi_step_model_runner.py:381-391: `wait_previous_step` then `_advance_step`); the sampler skips
# its CPU output (multi_step_model_runner.py:370-372, skip_sampler_cpu_output) and each step's sampled tokens are
# pythonized and run through `_process_model_outputs` by the async callback (multi_step_model_runner.py:264-288
# `_async_process_outputs`), which vllm/worker/model_runner.py:1489-1490 calls after the forward and logits are
# launched, i.e. beside the GPU. So per step: schedule + prepare / N, serial; sampler + output beside the forward.
# The same V0 host work under CPython 3.9 (infer.python_version "3.9": verl's 2025 ROCm image is
# rocm/vllm:rocm6.2_mi300_ubuntu20.04_py3.9_vllm_0.6.4, docs/amd_tutorial/amd_build_dockerfile.md
# @44a65f956d72aa1bd88ad3ea24de33a309bb0c70, which builds vLLM v0.6.3 from source on it). The constants above were timed
# under 3.11; CPython 3.11's specialising interpreter runs this attribute- and call-heavy code much faster. Timed with
# the same script, the same machine and the same vLLM 0.6.3 sources (the PyPI wheel's Python), batches 64 -> 256 (60 -> 255
# at n = 5), `--prepare --sampler` at 64 and 512 logits carried to width 0, two interleaved repetitions, the lowest of
# each (docs/speed.md §3.34): CPython 3.9.18 with torch 2.4.0 (vLLM 0.6.3's torch pin) against CPython 3.11.7 with
# torch 2.13 (the reference timing, which these runs reproduce: 41.4 and 21.4 us against 40.1 and 21.5):
#   3.9:  n = 1: engine (schedule + output) 34.44, prepare 13.17, sampler 20.45 us a sequence (68.06);
#         n = 5: 18.28, 8.09, 6.91 (33.28);
#   3.11: n = 1: 18.48, 8.35, 14.6 (41.4); n = 5: 10.27, 5.82, 5.29 (21.4).
# per_seq(n) = seq_s + group_s / n under 3.9: seq 24.58 us, group 43.48 us, i.e. x 1.454 and x 1.878 the 3.11 constants;
# every part (output shares and multi-step splits included) is scaled by these two ratios. No row was read.
VLLM_V0_PY39_PER_SEQ_US = {1: 68.06, 5: 33.28}


def _py39_ratios() -> tuple[float, float]:
    """(per-sequence, per-group) ratio of V0's host work under CPython 3.9 to the 3.11 constants."""
    seq, group = _split(VLLM_V0_PY39_PER_SEQ_US)
    ref = _vllm_v0_host(1)          # the 3.11 constants' per-sequence and per-group sums
    return seq * 1e-6 / ref.seq_s, group * 1e-6 / ref.group_s


# V0's host work by release (infer.vllm_v0_release; data/vllm_v0_host.csv): the constants above are vLLM 0.6.3's code.
# A release before 0.6.0 runs the code of the table's nearest timed release not newer than it (0.5.4 for 0.5.x:
# vllm-0.5.4 PyPI wheel, git 4db5176d), timed by the same script on the same machine in the same session as 0.6.3's
# (`--prepare --sampler`, 64 and 512 logits carried to width 0, batches 64 -> 256 / 60 -> 255 at n = 5; 0.5.4 under
# the scheduler its EngineArgs build for an 8K-context model: block manager v1, no chunked prefill, `--serving-defaults`);
# the ratio of its per-sequence and per-group parts to 0.6.3's, from n = 1 and n = 5 as for CPython 3.9, scales the
# constants. And before 0.6.0 there is no async output processor (vllm/config.py `use_async_output_proc` and
# LLMEngine's `_process_model_outputs` callback arrived in 0.6.0; v0.5.4's `LLMEngine.step`, llm_engine.py:903-945,
# runs schedule, execute_model and `_process_model_outputs` one after the other): no output share beside the forward.
VLLM_V0_ASYNC_OUTPUT_FROM = (0, 6, 0)
VLLM_V0_REFERENCE_RELEASE = "0.6.3"


def release_key(release: str) -> Version:
    """(major, minor, patch) of a vLLM release string such as "0.5.4" or "0.6.3.post1" (versions.parse_version)."""
    return parse_version(release, "infer.vllm_v0_release", VLLM_V0_REFERENCE_RELEASE, full=True)


def _release_timings() -> dict[str, dict[int, tuple[float, float]]]:
    """release -> n -> (its per-sequence us, 0.6.3's per-sequence us timed beside it), from data/vllm_v0_host.csv."""
    from .datafiles import rows
    out: dict[str, dict[int, tuple[float, float]]] = {}
    for r in rows("vllm_v0_host.csv"):
        out.setdefault(r["release"], {})[int(r["n"])] = (float(r["per_seq_us"]), float(r["ref_per_seq_us"]))
    return out


def _split(per_seq_us: dict[int, float]) -> tuple[float, float]:
    """(seq, group) us of per_seq(n) = seq + group / n, from n = 1 and n = 5."""
    a, b = per_seq_us[1], per_seq_us[5]
    group = (a - b) * 5.0 / 4.0
    return a - group, group


def timed_release(release: str | None) -> str:
    """The release whose V0 code prices `release`: the newest timed one not newer than it, 0.6.3 (the constants) from
    0.6.0 on; None: 0.6.3."""
    if release is None or release_key(release) >= VLLM_V0_ASYNC_OUTPUT_FROM:
        return VLLM_V0_REFERENCE_RELEASE
    older = [r for r in _release_timings() if release_key(r) <= release_key(release)]
    if not older:
        raise ValueError(f"vLLM V0's host work is timed from release 0.5.4 on (data/vllm_v0_host.csv); {release} is older")
    return max(older, key=release_key)


def _release_ratios(release: str) -> tuple[float, float]:
    """(per-sequence, per-group) ratio of a timed release's V0 host work to 0.6.3's, timed side by side."""
    t = _release_timings()[release]
    s, g = _split({n: v[0] for n, v in t.items()})
    s0, g0 = _split({n: v[1] for n, v in t.items()})
    return s / s0, g / g0


def vllm_v0_host(num_scheduler_steps: int = 1, python_version: str | None = None,
                 release: str | None = None) -> EngineHost:
    """vLLM V0's engine host constants (VLLM_V0_*): no async scheduling; the front end is V1's (not measured for V0).
    With multi-step scheduling (num_scheduler_steps N > 1) the schedule and input-preparation shares count once per
    run of N steps and the sampler's host side joins the output share that runs beside the next forward.
    `python_version` "3.9": the same work under CPython 3.9 (VLLM_V0_PY39_PER_SEQ_US); None or "3.11": as timed.
    `release` (infer.vllm_v0_release): before 0.6.0, the timed 0.5.x code's host work (data/vllm_v0_host.csv) and no
    async output processor (output share 0: all of it after the forward); None or 0.6.0 on: 0.6.3's."""
    h = _vllm_v0_host(num_scheduler_steps)
    if python_version == "3.9":
        rs, rg = _py39_ratios()
        h = replace(h, seq_s=h.seq_s * rs, group_s=h.group_s * rg, output_seq_s=h.output_seq_s * rs,
                    output_group_s=h.output_group_s * rg, source=h.source + "; under CPython 3.9 (timed there too)")
    timed = timed_release(release)
    if timed != VLLM_V0_REFERENCE_RELEASE:
        rs, rg = _release_ratios(timed)
        h = replace(h, seq_s=h.seq_s * rs, group_s=h.group_s * rg, output_seq_s=0.0, output_group_s=0.0,
                    source=h.source + f"; scaled to vLLM {timed}'s code (timed beside it), no async output processor")
    return h


def _vllm_v0_host(num_scheduler_steps: int = 1) -> EngineHost:
    """vllm_v0_host under CPython 3.11, the reference timing."""
    n = max(1, int(num_scheduler_steps or 1))
    if n == 1:
        seq_s = VLLM_V0_SCHEDULE_SEQ_S + VLLM_V0_PREPARE_SEQ_S + VLLM_V0_OUTPUT_SEQ_S + VLLM_V0_SAMPLER_SEQ_S
        group_s = VLLM_V0_SCHEDULE_GROUP_S + VLLM_V0_PREPARE_GROUP_S + VLLM_V0_OUTPUT_GROUP_S + VLLM_V0_SAMPLER_GROUP_S
        out_seq, out_group = VLLM_V0_OUTPUT_SEQ_S, VLLM_V0_OUTPUT_GROUP_S
        how = ""
    else:
        out_seq = VLLM_V0_OUTPUT_SEQ_S + VLLM_V0_SAMPLER_SEQ_S
        out_group = VLLM_V0_OUTPUT_GROUP_S + VLLM_V0_SAMPLER_GROUP_S
        seq_s = (VLLM_V0_SCHEDULE_SEQ_S + VLLM_V0_PREPARE_SEQ_S) / n + out_seq
        group_s = (VLLM_V0_SCHEDULE_GROUP_S + VLLM_V0_PREPARE_GROUP_S) / n + out_group
        how = f"; multi-step ({n} steps a run): schedule and prepare once a run, sampler and output beside the forward"
    return replace(VLLM, seq_s=seq_s, group_s=group_s, output_seq_s=out_seq,
                   output_group_s=out_group, overlapped=False,
                   source="vLLM v0.6.3 LLMEngine.step (Scheduler.schedule, prepare_model_input, "
                          "_process_model_outputs, the Sampler's host side) timed on the reference host's "
                          "generation (scripts/bench_vllm_v0_host.py)" + how)


# SGLang without its overlap scheduler (every release before 0.4; infer.async_scheduling false): the per-step host work
# of SGLang 0.3.0's scheduler loop, timed on this project's development machine (the reference host's generation: AMD
# EPYC Zen 4 Genoa, CPU family 25 model 17; Python 3.11.7, torch 2.13 CPU) by scripts/bench_sglang_v03_host.py, which
# runs the real `ModelTpServer.exposed_step` of the sglang-0.3.0 source release (PyPI sglang-0.3.0.tar.gz, sha256
# 3ff5ff2d09c3...) over a stand-in model runner, and pickles its output as the controller's `send_pyobj` does
# (srt/managers/controller_single.py:93-105): per decode pass `forward_decode_batch` (srt/managers/tp_worker.py:
# 653-723: `check_for_jump_forward`'s loop, `prepare_for_decode`, `next_token_ids.tolist()`, the per-request output
# append and `check_finished`) and `handle_finished_requests` (:725-823: for every streamed request, each step,
# `init_incremental_detokenize`'s read_ids - the output so far copied -, a meta_info dict, the BatchTokenIDOut lists).
# Requests as sglang.bench_serving sends them (temperature 0, ignore_eos, stream), ChunkCache (--disable-radix-cache),
# 220-token prompts, ~100-130 tokens into the output. The increase of the best pass (of 30) per running request from 32
# to 512 requests, lowest of three runs (the machine is shared): 7.92 us (the others 8.42 and 11.78). No row of any
# validation file was read.
# overlapped: no. `forward_step` runs one prefill or decode batch per `loop_for_forward` pass (tp_worker.py:255-287) and
# the CUDA-graph runner synchronises before and after its replay (cuda_graph_runner.py:314-317), so this host work
# adds to the GPU's step. Not in the constant (not timed here): the graph runner's input copies and flashinfer's index
# update (fixed per step, inside the calibrated step_overhead_s), and at tp > 1 the gloo broadcast of the received
# requests every pass.
SGLANG_V03_SEQ_S = 7.92e-6

# SGLang 0.3.0 captures CUDA graphs for decode batches of [1, 2, 4] + 8..160 only (srt/model_executor/model_runner.py:
# 499-502 `init_cuda_graphs`, no --disable-cuda-graph-padding); `forward_decode` replays one when
# `cuda_graph_runner.can_run(len(batch.reqs))` (batch <= max_bs = 160, cuda_graph_runner.py:160-164) and otherwise
# runs the model's eager forward (model_runner.py:523-539), whose kernels the host issues one by one.
SGLANG_V03_GRAPH_MAX_BS = 160


# SGLang 0.3.0's default cap on running requests (no --max-running-requests): srt/managers/tp_worker.py:126-133
# `max_running_requests = min(max_total_num_tokens // 2, req_to_token_pool.size - 1)`, the request pool's size from
# srt/model_executor/model_runner.py:373-383 `init_memory_pool`: min(max(int(pool tokens / context_len x 512), 2048),
# 5120). For Llama 3.1 (131,072 context) with a pool under ~524k tokens that is 2,047, not the 1,024 of the engine
# profile (efficiency.json engines.sglang.max_batch).
def sglang_v03_max_running_requests(pool_tokens: float, context_len: int) -> int:
    """SGLang 0.3.0's default max_running_requests for a KV pool of `pool_tokens` tokens (one rank's; every TP rank
    holds every token) and the model's context length."""
    pool = int(pool_tokens)
    req_pool = min(max(int(pool / max(1, int(context_len)) * 512), 2048), 5120)
    return max(1, min(pool // 2, req_pool - 1))


def sglang_no_overlap_host() -> EngineHost:
    """SGLang run without its overlap scheduler (before v0.4): SGLang 0.3.0's per-sequence host work
    (SGLANG_V03_SEQ_S) added to every step; the front end is SGLANG's."""
    return replace(SGLANG, seq_s=SGLANG_V03_SEQ_S, overlapped=False,
                   source="SGLang 0.3.0 ModelTpServer.exposed_step + send_pyobj timed on the reference host's "
                          "generation (scripts/bench_sglang_v03_host.py); " + SGLANG.source)


_ENGINES = {"vllm": VLLM, "sglang": SGLANG, "trtllm": TRTLLM}


def engine_host(engine: str, async_scheduling: bool | None = None, trtllm_backend: str = "pytorch",
                vllm_v0: bool = False, num_scheduler_steps: int = 1, python_version: str | None = None,
                vllm_v0_release: str | None = None) -> EngineHost:
    """The host and front-end constants of `engine` (zeros for engines without a measurement);
    `async_scheduling` (infer.async_scheduling) overrides whether its host work overlaps the GPU step;
    `trtllm_backend` "tensorrt" (infer.trtllm_backend: a TensorRT engine under the C++ executor) drops TensorRT-LLM's
    per-sequence constant, which was measured on the PyTorch backend's Python executor; `vllm_v0` (infer.vllm_v0) takes
    vLLM V0's own constants (vllm_v0_host, with its multi-step split when `num_scheduler_steps` > 1), which has no
    async scheduling to turn on; `python_version` (infer.python_version) picks V0's CPython 3.9 timing and
    `vllm_v0_release` (infer.vllm_v0_release) its code's release."""
    if engine == "vllm" and vllm_v0:
        return vllm_v0_host(num_scheduler_steps, python_version, vllm_v0_release)
    if engine == "sglang" and async_scheduling is False:
        return sglang_no_overlap_host()
    h = _ENGINES.get(engine, NONE)
    if engine == "trtllm" and trtllm_backend == "tensorrt":
        h = replace(h, seq_s=0.0, source=h.source + "; C++ executor: per-sequence host work not modelled")
    if async_scheduling is not None and h is not NONE:
        h = replace(h, overlapped=bool(async_scheduling))
    return h


def step_with_host(gpu_s: float, host_s: float, overlapped: bool) -> float:
    """One iteration's wall time: the host work hides under the GPU step when the engine overlaps them
    (the slower of the two sets the pace), else the two run one after the other."""
    return max(gpu_s, host_s) if overlapped else gpu_s + host_s
