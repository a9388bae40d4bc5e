"""TensorRT-LLM's own sizing of max batch size and max num tokens when the user states neither.

`trtllm-bench throughput` (and the engines it builds) does not use the LLM API defaults (2048 / 8192)
when `--max_batch_size` / `--max_num_tokens` are not given: it derives both from how many requests of
the dataset's mean length fit in the KV cache. Sources (NVIDIA/TensorRT-LLM):

- tensorrt_llm/bench/benchmark/utils/general.py @0171265e `get_settings`: no user values -> the
  heuristic of `get_benchmark_engine_settings` with the dataset's mean ISL/OSL and the
  `--kv_cache_free_gpu_mem_fraction` given (CLI default 0.90); chunked prefill off (the default) ->
  max_num_tokens raised to at least max ISL + max batch size;
- tensorrt_llm/bench/build/build.py @000a01de: FP8/NVFP4/FP8-block/unquantized checkpoints are tuned,
  other formats get BuildConfig's defaults;
- tensorrt_llm/bench/build/tuning.py @04cba882 `calc_engine_setting` / `finetune_setting`: weights at
  1 byte (FP8), 0.5 (NVFP4) or 2 bytes per parameter; KV bytes per token over all attention layers with
  at least one KV head per TP rank; device memory as NVML's total (GiB) x GPUs; requests that fit =
  (memory - weights) x fraction / (KV per token x (ISL + OSL)); batch = min(requests, 4096) / PP
  rounded up (to 32 with a floor of 64 below 256, to 128 below 1024, to 256 above); tokens = batch x
  (1 + ISL/OSL) capped at 32768, rounded up (to 256 with a floor of 2048 below 4096, to 512 below 8192,
  to 1024 above).

The perf-overview tables gpuplan validates against (docs/source/performance/perf-overview.md @00f3768)
were run this way: `trtllm-bench ... throughput --dataset ... --backend pytorch` without either value.
"""
from __future__ import annotations

import math
from typing import Any

from ..dtypes import kv_bytes, weight_format

# weight bytes per parameter the heuristic assumes for the formats it tunes (tuning.py BYTES_PER_ELEM)
_TUNED_WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8-block": 1.0, "nvfp4": 0.5}
# BuildConfig defaults, used for formats the heuristic does not tune (build.py)
DEFAULT_MAX_BATCH, DEFAULT_MAX_TOKENS = 2048, 8192
_BATCH_CAP, _TOKEN_CAP = 4096, 32768


def _round_up(x: float, step: int) -> int:
    return step * math.ceil(x / step)


def finetune(requests_fit: float, isl: float, osl: float, pp: int) -> tuple[int, int]:
    """(max batch size, max num tokens) from the requests that fit in the KV cache (finetune_setting)."""
    raw_bs = min(requests_fit, _BATCH_CAP) / pp
    raw_tok = min(raw_bs * (1.0 + isl / max(osl, 1.0)), _TOKEN_CAP)
    return _bucket(raw_bs, _BATCH_TIERS), _bucket(raw_tok, _TOKEN_TIERS)


# (below this, round up to a multiple of this, but not under this): finetune_setting's optimistic rounding
_BATCH_TIERS = ((256, 32, 64), (1024, 128, 0), (math.inf, 256, 0))
_TOKEN_TIERS = ((4096, 256, 2048), (8192, 512, 0), (math.inf, 1024, 0))


def _bucket(x: float, tiers: tuple) -> int:
    for bound, step, floor in tiers:
        if x < bound:
            return max(floor, _round_up(x, step))
    raise AssertionError("the last tier is unbounded")


def bench_settings(*, weights: str, params_total: float, kv_bytes_per_token: float, device_memory_gib: float,
                   tp: int, pp: int, isl: float, osl: float, kv_fraction: float,
                   max_isl: float | None = None, chunked_prefill: bool = False) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) trtllm-bench picks for this model, layout and dataset.

    `kv_bytes_per_token`: one token of one sequence over all attention layers, each TP rank holding at
    least one KV head (whole model, not per GPU)."""
    wb = _TUNED_WEIGHT_BYTES.get(weights)
    if wb is None:
        bs, tok = DEFAULT_MAX_BATCH, DEFAULT_MAX_TOKENS
    else:
        gib = 1024.0 ** 3
        available = device_memory_gib * tp * pp - params_total * wb / gib
        per_request = kv_bytes_per_token / gib * (isl + osl)
        requests = max(0.0, available * kv_fraction / per_request) if per_request > 0 else float(_BATCH_CAP)
        bs, tok = finetune(requests, isl, osl, pp)
    # get_settings raises the token budget after either path, the heuristic's or BuildConfig's defaults
    if not chunked_prefill:   # the whole longest prompt must fit one step beside a full batch
        tok = max(tok, int((max_isl if max_isl is not None else isl) + bs))
    return bs, tok


def engine_limits(scn: Any, model: Any, device_memory_gib: float) -> tuple[int, int, str]:
    """(max_batch_size, max_num_tokens, where from) TensorRT-LLM runs `scn` with on a GPU of `device_memory_gib`
    (NVML's total): the scenario's pair when it states both; under a load (infer.load) trtllm-serve's defaults;
    else trtllm-bench's heuristic (`bench_settings`), which sizes both from the KV room for the workload."""
    inf, par = scn.infer, scn.parallel
    if inf.max_num_seqs and inf.max_num_batched_tokens:
        return int(inf.max_num_seqs), int(inf.max_num_batched_tokens), "stated"
    if getattr(inf, "load", None) is not None:
        # a service under load runs `trtllm-serve`, whose limits without flags are BuildConfig's defaults
        # (tensorrt_llm/commands/serve.py @00209af1 get_llm_args), not trtllm-bench's heuristic
        return DEFAULT_MAX_BATCH, DEFAULT_MAX_TOKENS, "trtllm-serve defaults"
    # attention DP ("DEP": tp=1, dp=ep) is launched as `trtllm-bench --tp <GPUs> --ep <GPUs>` with
    # enable_attention_dp (perf-overview.md @00f3768, "For MoE models"): the heuristic sees tp = every
    # GPU of the copy, and the batch it sizes is each attention rank's own (max_batch_size per rank)
    adp = min(scn.dp, par.ep) if (model.is_moe and par.ep > 1) else 1
    tp = par.tp * adp
    # every TP rank holds at least one KV head (tuning.py: max(tp, kv heads)); MLA's latent is not per head, and an
    # attention-free model (Mamba: TensorRT-LLM examples/mamba) has no KV head to replicate (its KV bytes are 0)
    heads = 1.0 if model.is_mla or not model.num_kv_heads else max(tp, model.num_kv_heads) / model.num_kv_heads
    kv_tok = model.kv_cache_bytes_per_token(kv_bytes(inf.kv_cache)) * heads
    batch, tokens = bench_settings(
        weights=weight_format(inf.weights).name, params_total=model.params_total, kv_bytes_per_token=kv_tok,
        device_memory_gib=device_memory_gib, tp=tp, pp=par.pp, isl=inf.prompt_len,
        osl=inf.output_len, kv_fraction=inf.gpu_memory_utilization)
    return batch, tokens, "trtllm-bench heuristic"


# CUDA graphs (PyTorch backend). The perf-overview runs' llm_options.yml (perf-overview.md @00f3768,
# "Running the Benchmark"): cuda_graph_config {enable_padding: true, batch_sizes: these}.
PERF_OVERVIEW_GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192)


def captured_sizes(sizes: tuple[int, ...] | list[int], max_batch: int, max_num_tokens: int,
                   padding: bool = True) -> list[int]:
    """The graph batch sizes the engine captures (model_engine.py @001e6700
    `_filter_cuda_graph_batch_sizes`): sizes up to min(max batch size, max num tokens); with padding,
    one more graph at that bound when a given size lies above it."""
    bound = min(max_batch, max_num_tokens)
    out: list[int] = []
    for s in sorted(sizes):
        if s <= bound:
            out.append(s)
        else:
            if padding and (not out or out[-1] != bound):
                out.append(bound)
            break
    return out


def padded_batch(batch: float, sizes: list[int]) -> float | None:
    """Rows the decode-only step's CUDA graph runs: the smallest captured size >= batch (padding with
    dummy requests); None when the batch is above every captured size (the step runs eagerly)."""
    for s in sizes:
        if s >= batch:
            return float(s)
    return None


def prompt_step_share(batch: float, isl: float, osl: float, max_num_tokens: float) -> float:
    """Share of the decode steps that also carry whole prompts (such a step has context requests and
    runs eagerly: no CUDA graph, no padding). With every request queued at once and fixed lengths
    (trtllm-bench's offline run) a batch refills as it drains: the `batch` prompts of one turnover
    enter `max_num_tokens - batch` tokens per step beside the running decodes, over `osl` steps."""
    if batch <= 0 or osl <= 0:
        return 0.0
    room = max(float(isl), float(max_num_tokens) - batch)
    return min(1.0, batch * isl / room / osl)


# The offline run itself. `trtllm-bench throughput` queues every request of the dataset at once and reports
# Total Output Throughput = output tokens / the run's wall time (perf-overview.md @00f3768, "Running the
# Benchmark": "all requests are queued in rapid succession"), over a finite dataset: $num_requests of the page's
# table (30000 at 128/128 ... 1000 at 20000/2000), every request of the same ISL and OSL (stdev 0). With a batch
# of B the run holds ceil(N/B) waves, the first ramping up through the token budget and the last draining, so
# it does not run at the steady-state batch throughout: 3000 requests of 1000/1000 at a batch of 1550 are two
# waves, and the ramp admits floor((max_num_tokens - decodes) / ISL) prompts a step.
# What one iteration schedules (PyExecutor with the GUARANTEED_NO_EVICT capacity scheduler and no chunked
# prefill, the trtllm-bench defaults): every running generation request, then waiting context requests while a
# slot is free (max_batch_size counts both) and their whole prompt fits the tokens the decodes leave of
# max_num_tokens (tensorrt_llm/_torch/pyexecutor/scheduler.py @034fffb0900632b2aefdec1ce9a5b5cbe63d22ba,
# `PyMicroBatchScheduler.schedule`, "Generation First", then "No Chunking: Greedy allocation" until a prompt
# does not fit; it mirrors the C++ MicroBatchScheduler that `BindMicroBatchScheduler` runs). A context step yields a request's
# first token, so it needs OSL - 1 generation steps after it. The KV pool is in `max_batch` (the caller's
# min(max_batch_size, requests whose ISL + OSL the pool reserves)).


def offline_run_seconds(requests: int, isl: int, osl: int, max_batch: int, max_tokens: int,
                        step_s, extra_steps: int = 0, trace: list | None = None) -> tuple[float, int]:
    """(wall seconds, iterations) of an offline run of `requests` requests of `isl` prompt and `osl` output
    tokens each, all queued at time 0, under the scheduling rules above; `step_s(decodes, prompts)` is one
    iteration's seconds with that many generation and context requests. Requests admitted in the same
    iteration finish together, so the run is simulated cohort by cohort, and runs of identical
    generation-only iterations are taken in one jump. `extra_steps`: iterations a request stays scheduled after
    its last token. TensorRT-LLM's overlap scheduler (on by default) schedules iteration n + 1 before it has
    processed iteration n's tokens, so a request that finished in n runs once more: "The optimization
    introduces one extra decoding step" (docs/source/features/overlap-scheduler.md). `trace`, when given,
    receives (prompts admitted, iterations) for every iteration or run of identical iterations, in order."""
    waiting, t, steps = int(requests), 0.0, 0
    cohorts: list[list[int]] = []        # [generation steps left, requests] in admission order
    running = 0
    isl, osl, max_batch = max(1, int(isl)), max(1, int(osl)), max(1, int(max_batch))
    while waiting > 0 or cohorts:
        fit = (int(max_tokens) - running) // isl
        admit = min(waiting, max_batch - running, fit)
        if admit <= 0 and running == 0:
            admit = min(waiting, 1)           # a prompt above the budget still runs on its own
        if admit <= 0:                        # generation only until the next cohort finishes
            k = cohorts[0][0]
            t += k * step_s(running, 0)
            steps += k
            advance = k
            if trace is not None:
                trace.append((0, k))
        else:
            t += step_s(running, admit)
            steps += 1
            advance = 1
            if trace is not None:
                trace.append((admit, 1))
        for c in cohorts:
            c[0] -= advance
        while cohorts and cohorts[0][0] <= 0:
            running -= cohorts.pop(0)[1]
        if admit > 0:
            waiting -= admit
            if osl - 1 + extra_steps > 0:
                cohorts.append([osl - 1 + extra_steps, admit])
                running += admit
    return t, steps


# Attention DP under trtllm-bench's identical requests. What the PyTorch executor does (NVIDIA/TensorRT-LLM):
# - assignment: rank 0 drains the request queue every iteration and `_schedule_attention_dp_requests` /
#   `_balance_requests_across_ranks` (tensorrt_llm/_torch/pyexecutor/executor_request_queue.py
#   @a98a9061d72f6fd39f5d055ebdd2c6878a100e2c, a revision later than the perf-overview's v1.0; the same heap in
#   every stored revision read) hands the new requests to the ranks with the fewest active prompt tokens, no rank
#   above expected_num_active_requests = ceil((active + new) / ranks): identical requests are spread
#   ceil/floor(N / ranks), so every rank runs the same schedule of admissions;
# - lockstep: every MoE layer all-gathers and reduce-scatters over all ranks (fused_moe_cutlass.py @000a01de
#   forward_chunk), so an iteration lasts as long as its busiest rank; a rank with nothing scheduled runs a dummy
#   request; a CUDA graph replays only when every rank is generation-only, padded to the largest rank's batch
#   (tensorrt_llm/_torch/pyexecutor/cuda_graph_runner.py @7b437aaa73bf5a44b1102aee5c631074da763b8f
#   `_get_padded_batch` / `maybe_get_cuda_graph`: tp_allgather of [can_run_cuda_graph, batch_size],
#   "is_all_gen_only", new_batch_size = max over ranks; the same rule in model_engine.py before the runner was split
#   out), so the busiest rank's decode batch sets every rank's graph.
# The schedules are the same on every rank but not in the same phase: the requests reach rank 0's queue one
# `generate_async` at a time (tensorrt_llm/bench/benchmark/utils/asynchronous.py: one request per pass of the
# worker's event loop) and are handed out as they come, and thereafter a rank admits a prompt when its own
# requests finish, so a rank that started an iteration late stays late. TensorRT-LLM's tech blog 10 ("ADP
# Balance Strategy", DeepSeek V3, 8 x GB200, DP 8 + EP 8) measures that baseline: "contexts are processed
# sequentially across ranks", average balance (mean / max tokens a rank an iteration) 54.11 %; its fix
# (attention_dp_config enable_balance, timeout_iters 50, batching_wait_iters) is off by default and was not in
# the perf-overview runs' llm_options.yml. No source gives the phases, so they are taken as independent.


def phase_imbalance(trace: list, ranks: int) -> float:
    """E[max over `ranks` ranks of the prompts admitted in one iteration] / E[prompts admitted by one rank in an
    iteration], when every rank runs the same admission schedule `trace` ((prompts, iterations) pairs from
    offline_run_seconds) at an independent phase: each rank's count in a given iteration is a draw from the
    schedule's own distribution, independent of the others'. 1 when every iteration admits the same number of
    prompts; `ranks` when prompts are admitted in one iteration of many (no two ranks' prompt iterations
    coincide). For one cohort size c admitted in a share f of the iterations: (1 - (1 - f)^ranks) / f."""
    if ranks <= 1 or not trace:
        return 1.0
    weight: dict[int, float] = {}
    total = 0.0
    for admitted, n in trace:
        weight[int(admitted)] = weight.get(int(admitted), 0.0) + float(n)
        total += float(n)
    mean = sum(a * w for a, w in weight.items()) / total
    if mean <= 0:
        return 1.0
    e_max, below = 0.0, 0.0          # E[max] = sum over values x of x (F(x)^ranks - F(x-)^ranks)
    for a in sorted(weight):
        cdf = below + weight[a] / total
        e_max += a * (min(1.0, cdf) ** ranks - below ** ranks)
        below = cdf
    return max(1.0, e_max / mean)
