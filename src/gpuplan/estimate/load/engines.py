"""Each serving engine's scheduler as `Policy` parameters (docs/serving-load.md cites the sources).

* vllm: budget max_num_batched_tokens (8192 / 2048), cap max_num_seqs (1024 / 256), 16-token blocks,
  chunked prefill, prompt chunks mixed with decodes, KV grows (preempt the newest when full);
* sglang: budget chunked_prefill_size, cap max_running_requests, 1-token pages, chunked, prefill
  batches not mixed with decodes, admission keeps room for outputs (new_token_ratio), KV grows (retract the
  request with the fewest outputs, to the queue's tail);
* trtllm: budget max_num_tokens, cap max_batch_size, 32-token blocks, whole prompts, in-flight
  batching (mixed), prompt + output reserved at admission (GUARANTEED_NO_EVICT, the default: never
  preempts) or, with infer.capacity_scheduler max_utilization, KV grows and the newest is paused;
* llama.cpp: budget n_batch, cap the slots (-np), whole prompts, mixed, a slot's context reserved.
"""
from __future__ import annotations

from typing import Any

from ..memory import _engine_batched_tokens, engine_max_num_seqs
from .scheduler import Policy

BLOCK_TOKENS = {"vllm": 16, "sglang": 1, "trtllm": 32, "llama.cpp": 1}
LLAMA_CPP_N_BATCH = 2048        # llama-server's default logical batch (-b)
# SGLang's initial new_token_ratio: min(SGLANG_INIT_NEW_TOKEN_RATIO 0.7 x --schedule-conservativeness (default 1.0
# here: infer.schedule_conservativeness), 1) (sglang v0.5.5.post1 `srt/environ.py`, `srt/managers/scheduler.py`,
# `srt/server_args.py`)
SGLANG_INIT_NEW_TOKEN_RATIO = 0.7


def engine_policy(scn: Any, serving: Any, capacity_bytes: int) -> tuple[Policy, list[str]]:
    """The scheduler of `scn.infer.engine` for one attention replica of `serving` (speed.py _Serving),
    with the KV pool the memory engine sized (serving.kv_capacity_tokens) and, under speculative
    decoding, the mean tokens each decode step yields per sequence."""
    policy, notes = _engine_policy(scn, serving, capacity_bytes)
    host = getattr(serving, "engine_host", None)
    if host is not None and host.overlapped and policy.engine != "llama.cpp" and policy.decode_steps == 1:
        # an engine that overlaps its scheduler with the GPU picks batch n+1 as batch n starts: SGLang
        # `Scheduler.event_loop_overlap` (recv_requests -> get_next_batch_to_run -> run_batch launches, then
        # pop_and_process waits for the previous batch), TensorRT-LLM `PyExecutor._executor_loop_overlap`
        # (fetch -> schedule -> _forward_step, then the previous batch's _update_requests), vLLM's async
        # scheduling (EngineCore.step_with_batch_queue: two batches in flight). A request reaching a busy
        # engine therefore waits for the batch in flight and the one already picked: one more step to its
        # first token than a synchronous loop (docs/serving-load.md, *Overlapped schedulers*)
        from dataclasses import replace as _replace
        policy = _replace(policy, lookahead=True)
        notes.append("the scheduler overlaps the GPU: a request that arrives while a batch runs joins the batch "
                     "after the one already picked (one more step to its first token).")
    e = float(getattr(serving, "spec_tokens", 1.0) or 1.0)
    if e > 1.0:
        from dataclasses import replace
        policy = replace(policy, tokens_per_step=e)
        sp = serving.spec
        notes.append(f"speculative decoding ({sp.method}, k={serving.spec_k}, acceptance {serving.spec_a:g}): each "
                     f"decode step yields {e:.2f} tokens per sequence on average and costs the verification of "
                     f"{serving.spec_k} more positions plus the drafter.")
    return policy, notes


def _engine_policy(scn: Any, serving: Any, capacity_bytes: int) -> tuple[Policy, list[str]]:
    inf = scn.infer
    load = inf.load
    eng = inf.engine
    notes: list[str] = []
    if eng not in BLOCK_TOKENS:
        raise ValueError(f"the serving simulator models vllm, sglang, trtllm and llama.cpp, not {eng!r}")
    bs = BLOCK_TOKENS[eng]
    pool_tokens = serving.kv_capacity_tokens / serving.adp
    kv_blocks = int(pool_tokens // bs) if pool_tokens != float("inf") else 1 << 40
    hit = float(getattr(load, "prefix_cache_hit", 0.0) or 0.0) if load is not None else 0.0
    steps = int(getattr(inf, "num_scheduler_steps", 1) or 1)
    if eng == "vllm" and steps > 1:
        return _vllm_v0_multi_step(scn, engine_max_num_seqs(scn, capacity_bytes, 1 << 30),
                                   _engine_batched_tokens(scn, capacity_bytes), steps, bs, kv_blocks, hit, notes)
    if eng == "vllm":
        seqs = engine_max_num_seqs(scn, capacity_bytes, 1 << 30)
        budget = _engine_batched_tokens(scn, capacity_bytes)
        if budget < seqs:   # vLLM refuses to start with max_num_batched_tokens < max_num_seqs
            notes.append(f"max_num_batched_tokens {budget} < max_num_seqs {seqs}: vLLM requires at least as many "
                         f"tokens per step as running requests; simulated with {seqs}.")
            budget = seqs
        # V1 enables prefix caching by default (EngineArgs: enable_prefix_caching None -> True for generative
        # models, vllm v0.11.0): a preempted request finds its blocks again while they are still cached; V0 leaves
        # it off (EngineArgs.enable_prefix_caching: bool = False, vllm/engine/arg_utils.py @v0.6.3), so a request
        # it preempts (recompute) runs its whole prefix again
        v0 = bool(getattr(inf, "vllm_v0", False))
        return Policy("vllm", seqs, budget, bs, kv_blocks, True, True, False, hit, keep_preempted=not v0), notes
    cap = int(inf.max_num_seqs or serving.eng["max_batch"])
    if eng == "sglang":
        budget = int(inf.max_num_batched_tokens or serving.eng["prefill_chunk_tokens"] or 8192)
        # output-aware admission and retraction (scheduler.TokenRatio, read in SGLang v0.5.5.post1): a request starts
        # only if the pool keeps room for its whole output and 0.7 x (decaying) the running requests' outputs
        c = inf.schedule_conservativeness
        ratio = min(SGLANG_INIT_NEW_TOKEN_RATIO * (1.0 if c is None else c), 1.0)
        return Policy("sglang", cap, max(budget, 1), bs, kv_blocks, True, False, False, hit,
                      new_token_ratio=ratio), notes
    if eng == "trtllm":
        # the pair `serve` and the launch files use (speed.trtllm_limits: both stated, else trtllm-bench's
        # heuristic); trtllm-serve run without either flag has BuildConfig's 2048 / 8192 — state them for that
        cap, budget = serving.max_batch, int(serving.max_step_tokens)
        if hit:
            notes.append("TensorRT-LLM KV-cache reuse is modelled like prefix caching (the same hit rate).")
        # capacityScheduler.cpp: GuaranteedNoEvictScheduler starts a request only if the pool holds the blocks
        # to drive it to completion; MaxUtilizationScheduler starts it when its next step fits and, when a
        # started request cannot be allocated, pauses the last started one (frees its blocks) and retries
        no_evict = (getattr(inf, "capacity_scheduler", None) or "guaranteed_no_evict") == "guaranteed_no_evict"
        if not no_evict:
            notes.append("TensorRT-LLM MAX_UTILIZATION: KV grows with each request; when the pool is full the "
                         "newest started request is paused and recomputed later.")
        return Policy("trtllm", cap, budget, bs, kv_blocks, False, True, no_evict, hit), notes
    budget = int(inf.max_num_batched_tokens or LLAMA_CPP_N_BATCH)
    if hit:
        notes.append("llama.cpp reuses a slot's cached prompt prefix; modelled as the same hit rate.")
    return Policy("llama.cpp", cap, budget, bs, kv_blocks, False, True, True, hit), notes


def _vllm_v0_multi_step(scn: Any, seqs: int, budget: int, steps: int, bs: int, kv_blocks: int, hit: float,
                        notes: list[str]) -> tuple[Policy, list[str]]:
    """vLLM V0 with multi-step scheduling (`--num-scheduler-steps N`, from vLLM 0.5.5 until V0 was removed; read at tag v0.6.0):

    * vllm/engine/arg_utils.py sets num_lookahead_slots = max(num_lookahead_slots, N - 1), and
      vllm/core/scheduler.py `_get_num_lookahead_slots` gives a prefill batch 0 lookahead slots: a decode batch
      is scheduled for N steps (`seq_group.init_multi_step(num_lookahead_slots + 1)`), a prompt batch for one;
    * vllm/engine/llm_engine.py `step` calls the scheduler only when the cached batch has no steps left
      (`_has_remaining_steps`), so a request that arrives during a decode run waits for it to end, and
      processes the outputs (stop checks, streamed tokens) only after the run's last step: a request's
      tokens reach the client in bursts at the run's end, and a request that stops inside a run stays in
      the batch until then;
    * the V0 default scheduler (`_schedule_default`, no chunked prefill with multi-step in v0.6.0) runs waiting
      prompts first, whole, in their own prompt-only batch (decodes wait), within max_num_batched_tokens =
      max(max_model_len, 2048) and max_num_seqs 256 by default (estimate.memory's engine defaults);
    * with V0's async output processor (on by default: vllm/config.py:352-393 `verify_async_output_proc` turns it
      off only for pipeline parallelism, non-CUDA devices, Ray SPMD workers, enforce_eager and speculative decoding,
      which multi-step refuses anyway, arg_utils.py:911-914) each step's sampled tokens are pythonized and run
      through `_process_model_outputs` beside the next step (multi_step_model_runner.py:264-288); there a request
      that finished in that step is handed to the stream at once (llm_engine.py:1337-1357: `finished_now`, then
      `process_request_outputs_callback`, which AsyncLLMEngine sets, async_llm_engine.py:623-626), while the other
      requests' outputs are created only at the run's last step (llm_engine.py:1352-1357, "For multi-step, do not
      create outputs each iteration"). The finished request keeps its place in the batch until the run ends
      (`_has_remaining_steps`: every group of the run has the same remaining steps). Read in the vllm-0.6.0 wheel."""
    inf = scn.infer
    async_out = bool(inf.cuda_graphs) and int(getattr(scn.parallel, "pp", 1) or 1) == 1
    if not inf.max_num_batched_tokens and not inf.max_model_len:
        notes.append("vLLM V0 multi-step: max_num_batched_tokens = max(max_model_len, 2048); max_model_len is not "
                     "set, so 2048 tokens of prompts per prompt batch are simulated.")
    notes.append(f"vLLM V0 multi-step scheduling: each decode batch runs {steps} steps before the scheduler runs "
                 "again; prompts run whole in their own batches between runs; tokens stream at each run's end"
                 + (", except a request's last, sent when the step that computed it is processed."
                    if async_out else "."))
    return Policy("vllm", seqs, max(budget, 1), bs, kv_blocks, False, False, False, hit,
                  decode_steps=steps, stream_finish_in_run=async_out), notes
