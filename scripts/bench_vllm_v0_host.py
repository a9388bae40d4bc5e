"""Times vLLM V0's host work per decode step on this CPU (docs/posttrain.md, *vLLM V0's per-sequence host work*;
engine_host.vllm_v0_host): the real `LLMEngine.step` of a vLLM 0.6.x (or 0.5.x) source tree - `Scheduler.schedule`
(chunked-prefill scheduler, block manager v2) and `_process_model_outputs` (SingleStepOutputProcessor: token append,
stop check, n > 1 forking, freeing; a RequestOutput when a group finishes, the offline LLM class's FINAL_ONLY) -
over an executor that, by default, returns the SamplerOutput the V0 sampler builds (one SequenceOutput with its
{token: Logprob} per sample: logprobs=0, detokenize off, as verl's rollout asks). With --prepare the executor also
runs the worker's ModelInputForGPUBuilder (ROCm flash-attention metadata, tensors on the CPU); with --sampler it runs
V0's SamplingMetadata.prepare and Sampler on CPU logits --vocab wide (two widths separate the CPU's tensor work, the
GPU's on a GPU, from the per-sequence Python). Nothing here builds vLLM: only its Python modules are imported from
the unpacked source release whose path is given (GPU-kernel modules it never calls are stubbed). A vLLM 0.5.x tree
(e.g. the vllm-0.5.4 wheel unpacked; docs/speed.md §3.35) runs too: its step has no async output processor and builds a
RequestOutput for every group each step; --serving-defaults gives its scheduler for an 8K-context model.

    python3 scripts/bench_vllm_v0_host.py /path/to/vllm-0.6.3 [--n 1] [--batches 64,1024] [--steps 40]
                                          [--prepare] [--sampler --vocab 64]

Prints, per batch, the best and median seconds of a decode step, the executor's and the scheduler's share, and the
per-sequence slopes between the first and last batch (engine side, executor, --prepare).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import types

from import_stubs import Stubs  # scripts/: a neighbour

# third-party modules a vLLM import pulls in but the scheduler / output path never runs
_STUB = {"gguf", "prometheus_client", "prometheus_fastapi_instrumentator", "outlines", "lm_format_enforcer",
         "xformers", "vllm_flash_attn", "triton", "ray", "openai", "fastapi", "uvicorn", "partial_json_parser",
         "mistral_common", "zmq", "cv2", "librosa", "soundfile", "tiktoken", "sentencepiece",
         "compressed_tensors", "einops", "cpuinfo", "gpustat", "psutil", "aiohttp", "interegular", "lark", "nvidia"}


# vLLM's own GPU-kernel modules the input builder's module imports but never calls here (LoRA's Triton kernels,
# the model loader)
_STUB_VLLM = ("vllm.lora.punica", "vllm.lora.layers", "vllm.lora.models", "vllm.lora.worker_manager",
              "vllm.triton_utils", "vllm.model_executor.model_loader", "vllm.model_executor.models",
              "vllm.attention.ops.prefix_prefill")


# vLLM 0.5.x's compiled-extension wrapper: vllm/_core_ext.py @v0.5.4 reads torch.classes._core_C.ScalarType at import,
# which only its built _core_C library registers (imported through vllm.utils -> vllm._custom_ops, never called here)
_STUB_VLLM_05 = ("vllm._core_ext",)


def _import_vllm(src: str):
    with open(src + "/vllm/engine/llm_engine.py", encoding="utf-8") as fh:
        v05 = "class SchedulerContext" not in fh.read()      # 0.6.0 added it (async output processing)
    sys.meta_path.insert(0, Stubs(_STUB, _STUB_VLLM + (_STUB_VLLM_05 if v05 else ())))
    sys.path.insert(0, src)
    pkg = types.ModuleType("vllm")          # skip vllm/__init__ (it imports the GPU engine's entry points)
    pkg.__path__ = [src + "/vllm"]
    sys.modules["vllm"] = pkg


def run(src: str, n: int, batches: list[int], steps: int, prompt: int, max_tokens: int,
        warm: int = 0, sampler: bool = False, vocab: int = 512, prepare: bool = False,
        serving_defaults: bool = False) -> list[dict]:
    _import_vllm(src)
    from vllm.config import CacheConfig, SchedulerConfig
    from vllm.core.scheduler import Scheduler
    import vllm.engine.llm_engine as llm_engine
    from vllm.engine.llm_engine import LLMEngine
    from vllm.engine.output_processor.interfaces import SequenceGroupOutputProcessor
    from vllm.engine.output_processor.stop_checker import StopChecker
    from vllm.sampling_params import SamplingParams
    # vLLM 0.5.x (before 0.6.0): no SchedulerContext / async output processing, SamplerOutput in vllm.sequence, no
    # RequestOutputKind (LLMEngine.step builds a RequestOutput for every scheduled group, every step)
    v05 = not hasattr(llm_engine, "SchedulerContext")
    if v05:
        from vllm.sequence import SamplerOutput
    else:
        from vllm.engine.llm_engine import SchedulerContext, SchedulerOutputState
        from vllm.model_executor.layers.sampler import SamplerOutput
        from vllm.sampling_params import RequestOutputKind
    from vllm.sequence import CompletionSequenceGroupOutput, Logprob, Sequence, SequenceGroup, SequenceOutput
    from vllm.utils import Counter

    eos = 10 ** 6        # never sampled (the stand-in and --sampler tokens lie below it): no sequence stops early
    max_len = prompt + max_tokens
    out = []
    for batch in batches:
        groups = max(1, batch // n)
        # verl's rollout engine: chunked prefill on, max_num_batched_tokens 8192, max_num_seqs 1024
        if serving_defaults:
            # EngineArgs defaults at vLLM 0.5.4 for a model of 8192 context (benchmark_throughput.py, Llama-3-8B):
            # use_v2_block_manager False (vllm/engine/arg_utils.py:58 @v0.5.4), chunked prefill off below 32K context
            # (arg_utils.py:748-773), max_num_batched_tokens max(max_model_len, 2048) = 8192, max_num_seqs 256 (or the
            # batch here, to time larger ones)
            sc = SchedulerConfig(8192, max(256, groups * n), max_len, use_v2_block_manager=False,
                                 enable_chunked_prefill=False)
        else:
            sc = SchedulerConfig(8192, max(1024, groups * n), max_len, use_v2_block_manager=True,
                                 enable_chunked_prefill=True)
        cc = CacheConfig(16, 0.9, 0, "auto")
        cc.num_gpu_blocks, cc.num_cpu_blocks = groups * n * (-(-max_len // 16)) + 64, 0
        sched = Scheduler(sc, cc, None, 1) if v05 else Scheduler(sc, cc, None, 1, None)
        stand_in = {"s": 0.0, "prepare": 0.0}

        if sampler:
            import torch
            torch.set_num_threads(1)    # tiny tensors: no OpenMP team (on a shared machine it spins)
            from vllm.model_executor.layers.sampler import Sampler
            import vllm.model_executor.sampling_metadata as smod
            from vllm.model_executor.sampling_metadata import SamplingMetadata
            if not v05:
                from vllm.model_executor.sampling_metadata import SamplingMetadataCache
            smod.is_pin_memory_available = lambda: False    # CPU tensors here (no pinned allocator)
            v0_sampler, sm_cache = Sampler(), (None if v05 else SamplingMetadataCache())

        if prepare:
            import numpy as np
            import torch
            # rocm_flash_attn.py reads the GPU's architecture at import: an MI300X's (gfx942)
            torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(gcnArchName="gfx942:sramecc+")
            from vllm.attention.backends.rocm_flash_attn import ROCmFlashAttentionBackend
            from vllm.worker.model_runner import ModelInputForGPUBuilder, ModelInputForGPUWithSamplingMetadata
            # the attributes of GPUModelRunnerBase the builder reads (vllm/worker/model_runner.py @v0.6.3), for verl's
            # rollout: enforce_eager, block 16, no LoRA / prompt adapters / multi-modal input, tensors on the CPU here
            runner = types.SimpleNamespace(
                _model_input_cls=ModelInputForGPUWithSamplingMetadata, attn_backend=ROCmFlashAttentionBackend,
                scheduler_config=sc, sliding_window=None, block_size=16, lora_config=None,
                prompt_adapter_config=None, multi_modal_input_mapper=None, inter_data_cache={},
                model_config=types.SimpleNamespace(enforce_eager=True, is_encoder_decoder_model=False),
                max_seq_len_to_capture=8192, max_batchsize_to_capture=256, model_is_mrope=False, device="cpu",
                pin_memory=False, graph_block_tables=np.zeros((256, -(-max_len // 16)), dtype=np.int32))

        class Executor:
            def execute_model(self, execute_model_req):
                t0 = time.perf_counter()
                if prepare:     # ModelRunner._prepare_model_input_tensors: the builder over every group, then build()
                    builder = ModelInputForGPUBuilder(runner, execute_model_req.finished_requests_ids)
                    for md in execute_model_req.seq_group_metadata_list:
                        builder.add_seq_group(md)
                    if hasattr(builder, "reset_cached_inter_data"):    # 0.6.x caches its per-group data
                        builder.reset_cached_inter_data()
                    builder.build()
                    stand_in["prepare"] += time.perf_counter() - t0
                if sampler:     # the V0 sampler itself on small CPU logits: its per-sequence Python is the point
                    mds = execute_model_req.seq_group_metadata_list
                    seq_lens, query_lens = [], []
                    for md in mds:
                        for sd in md.seq_data.values():
                            q = md.token_chunk_size if md.is_prompt else 1
                            seq_lens.append(sd.get_num_computed_tokens() + q)
                            query_lens.append(q)
                    meta = (SamplingMetadata.prepare(mds, seq_lens, query_lens, "cpu", False, None) if v05 else
                            SamplingMetadata.prepare(mds, seq_lens, query_lens, "cpu", False, None, sm_cache))
                    logits = torch.randn(meta.selected_token_indices.numel(), vocab)   # rows compute_logits keeps
                    res = [v0_sampler(logits, meta)]
                    if sm_cache is not None:
                        sm_cache.reset()
                    stand_in["s"] += time.perf_counter() - t0
                    return res
                outs = []
                for md in execute_model_req.seq_group_metadata_list:
                    if not md.do_sample:
                        outs.append(CompletionSequenceGroupOutput([], None))
                        continue
                    ids = list(md.seq_data.keys())
                    parents = ids * md.sampling_params.n if md.is_prompt else ids
                    outs.append(CompletionSequenceGroupOutput(
                        [SequenceOutput(p, 1000 + (p % 7), {1000 + (p % 7): Logprob(-1.5, 1)}) for p in parents], None))
                res = [SamplerOutput(outputs=outs)]
                stand_in["s"] += time.perf_counter() - t0
                return res

            def stop_remote_worker_execution_loop(self):
                pass

            def shutdown(self):
                pass

        eng = object.__new__(LLMEngine)
        eng.scheduler_config, eng.parallel_config = sc, types.SimpleNamespace(pipeline_parallel_size=1)
        eng.model_config = types.SimpleNamespace(embedding_mode=False)
        eng.speculative_config = None
        eng.scheduler = [sched]
        if not v05:
            eng.cached_scheduler_outputs = [SchedulerOutputState()]
            eng.scheduler_contexts = [SchedulerContext(multi_step_stream_outputs=False)]
        eng.model_executor, eng.async_callbacks = Executor(), []
        eng.use_cached_outputs, eng.process_request_outputs_callback = False, None
        eng.log_stats, eng.tracer = False, None
        tok = lambda seq: None  # noqa: E731  (detokenize off: the stop checker never asks)
        seq_id = Counter()      # one counter for prompts and the children n > 1 forks (LLMEngine.seq_counter)
        eng.output_processor = SequenceGroupOutputProcessor.create_output_processor(
            sc, None, eng.scheduler, seq_id, tok, StopChecker(max_len, tok))
        params = SamplingParams(n=n, temperature=1.0, top_p=1.0, logprobs=0, max_tokens=max_tokens,
                                detokenize=False)
        # the offline LLM class asks for the final output only (vllm/entrypoints/llm.py
        # _validate_and_add_requests: sp.output_kind = FINAL_ONLY, v0.6.3), so no RequestOutput per running step
        # (0.5.x has no output kinds: its step makes a RequestOutput for every scheduled group, llm_engine.py:836-843
        # @v0.5.4, which the offline LLM class drops unless finished)
        if not v05:
            params.output_kind = RequestOutputKind.FINAL_ONLY
        for g in range(groups):
            inputs = {"type": "token", "prompt_token_ids": list(range(3, 3 + prompt)), "prompt": None}
            seq = Sequence(next(seq_id), inputs, 16, eos)
            sched.add_seq_group(SequenceGroup(str(g), [seq], time.time(), sampling_params=params.clone()))
        # prefill every prompt (chunked steps), then time decode steps of the whole batch
        while sched.waiting or any(sg.is_prefill() for sg in sched.running):
            eng.step()
        for _ in range(warm):
            eng.step()
        split = {"schedule": 0.0}
        real_schedule = sched.schedule

        def timed_schedule():
            t0 = time.perf_counter()
            r = real_schedule()
            split["schedule"] += time.perf_counter() - t0
            return r
        sched.schedule = timed_schedule
        times, stand, sch, prep = [], [], [], []
        for _ in range(steps):
            stand_in["s"] = stand_in["prepare"] = split["schedule"] = 0.0
            t0 = time.perf_counter()
            eng.step()
            times.append(time.perf_counter() - t0)
            stand.append(stand_in["s"])
            sch.append(split["schedule"])
            prep.append(stand_in["prepare"])
        running = sum(sg.num_seqs() for sg in sched.running)
        out.append({"batch": running, "n": n, "best_s": min(times), "median_s": statistics.median(times),
                    "stand_in_best_s": min(stand), "stand_in_median_s": statistics.median(stand),
                    "schedule_best_s": min(sch), "output_len": warm + steps, "prepare_best_s": min(prep)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="an unpacked vLLM 0.6.x source release (the directory holding vllm/)")
    ap.add_argument("--n", type=int, default=1, help="SamplingParams.n (samples per prompt)")
    ap.add_argument("--batches", default="64,256,1024", help="running sequences to time, comma-separated")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--prompt", type=int, default=82)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--warm", type=int, default=0, help="decode steps run before the timed ones (output length)")
    ap.add_argument("--sampler", action="store_true", help="the executor runs V0's SamplingMetadata.prepare and "
                    "Sampler on small CPU logits (its time is reported as the executor's)")
    ap.add_argument("--prepare", action="store_true", help="the executor also runs V0's ModelInputForGPUBuilder "
                    "(ROCm flash-attention metadata) over the step's groups; reported apart")
    ap.add_argument("--vocab", type=int, default=512, help="logits width for --sampler (two widths separate the "
                    "tensor work from the per-sequence Python)")
    ap.add_argument("--serving-defaults", action="store_true", help="the scheduler vLLM 0.5.x's EngineArgs build for "
                    "an 8K-context model (block manager v1, no chunked prefill, 8192 tokens, 256 sequences) instead "
                    "of verl's (block manager v2, chunked prefill, 1024 sequences)")
    a = ap.parse_args(argv)
    rows = run(a.src, a.n, [int(x) for x in a.batches.split(",")], a.steps, a.prompt, a.max_tokens, a.warm,
               a.sampler, a.vocab, a.prepare, a.serving_defaults)
    for r in rows:
        print(f"n={r['n']} batch {r['batch']:5d}: step best {r['best_s'] * 1e3:8.3f} ms  median "
              f"{r['median_s'] * 1e3:8.3f} ms  (stand-in executor best {r['stand_in_best_s'] * 1e3:.3f} ms)  "
              f"per sequence {(r['best_s'] - r['stand_in_best_s']) / r['batch'] * 1e6:.2f} us, of which "
              f"Scheduler.schedule {r['schedule_best_s'] / r['batch'] * 1e6:.2f} us (best steps, output length "
              f"~{r['output_len']})")
    if len(rows) >= 2:
        a0, a1 = rows[0], rows[-1]
        engine = [r["best_s"] - r["stand_in_best_s"] for r in (a0, a1)]
        slope = (engine[1] - engine[0]) / (a1["batch"] - a0["batch"])
        print(f"slope (engine side, best, stand-in excluded): {slope * 1e6:.2f} us per running sequence per step")
        ex = (a1["stand_in_best_s"] - a0["stand_in_best_s"]) / (a1["batch"] - a0["batch"])
        print(f"slope (executor: stand-in or --sampler, best): {ex * 1e6:.2f} us per running sequence per step")
        pr = (a1["prepare_best_s"] - a0["prepare_best_s"]) / (a1["batch"] - a0["batch"])
        if pr:
            print(f"slope (--prepare, best, inside the executor's): {pr * 1e6:.2f} us per running sequence per step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
