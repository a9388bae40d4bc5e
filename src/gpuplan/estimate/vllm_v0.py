"""vLLM's V0 engine (`vllm/engine/llm_engine.py`, the default engine before vLLM 0.8): how it runs a batch of
prompts handed to `LLM.generate` at once (docs/speed.md §3.21).

Read in the vLLM v0.6.3 source release (tag v0.6.3; PyPI vllm-0.6.3.tar.gz, sha256 03e69029ad9caceaab68d5c3833ae6fe
57c04be678ec37f29e9df6eaf178a9c5); the same rule is in 0.5.4 and 0.6.2:

* **Chunked prefill is on by default for long-context models.** `EngineArgs.create_engine_config`
  (vllm/engine/arg_utils.py): `use_long_context = max_model_len > 32768`; with `enable_chunked_prefill` unset, a
  long-context model on a "cuda" device (ROCm included: `DeviceConfig` maps `is_cuda_alike()` to "cuda") without
  sliding window, speculative decoding, LoRA or prompt adapters gets `enable_chunked_prefill = True`. With chunked
  prefill and one scheduler step, `SchedulerConfig` (vllm/config.py) sets `max_num_batched_tokens = 512` ("the
  values that have the best balance between ITL and TTFT on A100. Note it is not optimized for throughput")
  unless stated; `max_num_seqs` defaults to 256 (EngineArgs).
* **What one step schedules** (`Scheduler._schedule_chunked_prefill`, vllm/core/scheduler.py): the running
  requests first (each decoding request one token; a request still in its prompt its next chunk), then new
  prompts first come first served while fewer than max_num_seqs run, each taking
  `min(prompt tokens left, tokens left in the budget)` (`_get_num_new_tokens`: a prompt is cut wherever the budget
  ends). A request whose last prompt chunk runs samples its first token in that step.
* **A step that carries a prompt chunk runs without CUDA graphs.** `ModelInputForGPUBuilder` sets
  `decode_only = False` for any prompt sequence, and `_use_captured_graph` (vllm/worker/model_runner.py) replays a
  graph only for `decode_only` batches: the mixed step runs the model's Python forward eagerly, issuing every
  kernel from the host (engine_host.eager_issue_layer_s prices that issue).

Llama 3.1 (max_position_embeddings 131072) run with the benchmark scripts' defaults (`--max-model-len` unset)
therefore prefills a batch of prompts 512 tokens a step, fewer as the requests already prefilled start decoding,
and its last prompt starts decoding only when every earlier one has been prefilled.
"""
from __future__ import annotations

from typing import Callable, Sequence

LONG_CONTEXT_TOKENS = 32768        # arg_utils.py: use_long_context = max_model_len > 32768
CHUNKED_PREFILL_TOKENS = 512       # config.py SchedulerConfig: chunked prefill, one scheduler step
MAX_NUM_SEQS = 256                 # arg_utils.py EngineArgs.max_num_seqs


def chunked_prefill_budget(max_model_len: int, stated_tokens: int | None = None) -> int | None:
    """Tokens per step of V0's chunked prefill when its default turns it on for `max_model_len` (the stated
    max_num_batched_tokens, else 512); None when the default leaves it off (max_model_len <= 32768)."""
    if max_model_len <= LONG_CONTEXT_TOKENS:
        return None
    return int(stated_tokens) if stated_tokens else CHUNKED_PREFILL_TOKENS


StepCost = Callable[[int, Sequence[tuple[int, int]]], float]


def offline_run(requests: int, isl: int, osl: int, max_seqs: int, budget: int, step_s: StepCost) -> tuple[float, int]:
    """(wall seconds, steps) of `requests` requests of `isl` prompt and `osl` output tokens, all handed to the
    engine at time 0, under V0's chunked-prefill schedule (module docstring). `step_s(decodes, chunks)` prices one
    step: `decodes` decoding requests and the prompt chunks `(tokens, offset)` riding with them. Runs of
    decode-only steps are taken in one jump to the next request that finishes."""
    isl, osl, budget = max(1, int(isl)), max(1, int(osl)), max(1, int(budget))
    waiting = int(requests)
    prefilling: list[int] = []          # prompt tokens already run, for admitted requests still in their prompt
    decoding: list[int] = []            # output tokens still to come, for requests past their prompt
    t, steps = 0.0, 0
    while waiting or prefilling or decoding:
        room = budget - len(decoding)
        chunks: list[tuple[int, int]] = []
        for i, done in enumerate(prefilling):     # running prompts continue first, in admission order
            if room <= 0:
                break
            c = min(isl - done, room)
            chunks.append((c, done))
            prefilling[i] += c
            room -= c
        while waiting and room > 0 and len(decoding) + len(prefilling) < max_seqs:
            c = min(isl, room)
            chunks.append((c, 0))
            prefilling.append(c)
            waiting -= 1
            room -= c
        if not chunks:                  # decode-only until the next request finishes
            k = min(decoding)
            t += k * step_s(len(decoding), ())
            steps += k
            decoding = [d - k for d in decoding if d > k]
            continue
        t += step_s(len(decoding), chunks)
        steps += 1
        decoding = [d - 1 for d in decoding if d > 1]
        done = [p for p in prefilling if p >= isl]
        prefilling = [p for p in prefilling if p < isl]
        if osl > 1:                     # a finished prompt sampled its first token in this step
            decoding.extend([osl - 1] * len(done))
    return t, steps
