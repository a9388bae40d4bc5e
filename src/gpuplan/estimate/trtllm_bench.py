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
    if raw_bs < 256:
        bs = max(64, _round_up(raw_bs, 32))
    elif raw_bs < 1024:
        bs = _round_up(raw_bs, 128)
    else:
        bs = _round_up(raw_bs, 256)
    if raw_tok < 4096:
        tok = max(2048, _round_up(raw_tok, 256))
    elif raw_tok < 8192:
        tok = _round_up(raw_tok, 512)
    else:
        tok = _round_up(raw_tok, 1024)
    return bs, tok


def bench_settings(*, weights: str, params_total: float, kv_bytes_per_token: float, device_memory_gib: float,
                   tp: int, pp: int, isl: float, osl: float, kv_fraction: float,
                   max_isl: float | None = None, chunked_prefill: bool = False) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) trtllm-bench picks for this model, layout and dataset.

    `kv_bytes_per_token`: one token of one sequence over all attention layers, each TP rank holding at
    least one KV head (whole model, not per GPU)."""
    wb = _TUNED_WEIGHT_BYTES.get(weights)
    if wb is None:
        return DEFAULT_MAX_BATCH, DEFAULT_MAX_TOKENS
    gib = 1024.0 ** 3
    available = device_memory_gib * tp * pp - params_total * wb / gib
    per_request = kv_bytes_per_token / gib * (isl + osl)
    requests = max(0.0, available * kv_fraction / per_request) if per_request > 0 else float(_BATCH_CAP)
    bs, tok = finetune(requests, isl, osl, pp)
    if not chunked_prefill:   # the whole longest prompt must fit one step beside a full batch
        tok = max(tok, int((max_isl if max_isl is not None else isl) + bs))
    return bs, tok
