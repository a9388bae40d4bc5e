"""Times SGLang 0.3.0's scheduler host work per decode step on this CPU (docs/serving-load.md, *SGLang 0.3.0's
per-step host work*; engine_host.SGLANG_V03_*): the real `ModelTpServer.exposed_step` of the sglang-0.3.0 source
release (PyPI sglang-0.3.0.tar.gz, srt/managers/tp_worker.py) over a stand-in model runner, plus what the
controller does with its output each pass (controller_single.py:93-105 `loop_for_forward`: `send_pyobj` of every
BatchTokenIDOut to the detokenizer, i.e. pickle.dumps at the highest protocol). Per decode pass that is:

* `forward_step` -> `get_new_prefill_batch` (nothing waiting: returns at once) -> `forward_decode_batch`:
  `check_decode_mem`, `check_for_jump_forward` (a loop over every request), `ScheduleBatch.prepare_for_decode`
  (the next-input list, its host-to-device tensor, the KV slots, `update_regex_vocab_mask`), the model runner's
  forward (the stand-in: its time is reported apart and excluded), `check_sample_results`, the penalizer
  orchestrator, `next_token_ids.tolist()`, the per-request loop (output append, `check_finished`), and
  `handle_finished_requests` (per request: `init_incremental_detokenize`'s read_ids - the request's whole output
  so far plus 5 prompt tokens, copied every step -, a meta_info dict, the BatchTokenIDOut lists; `filter_batch`);
* the streamed output's pickle (`send_pyobj`).

Tensors live on the CPU here; the KV pool has a fixed size for every batch (its `torch.nonzero` scan is per-step
GPU work, not per-sequence), so the per-sequence slope between two batches is the Python the scheduler runs per
running request. Not timed (no GPU, no flashinfer here): the CUDA-graph runner's input copies and flashinfer's
`update_flashinfer_indices` (fixed per step), the two `torch.cuda.synchronize()` around the graph replay (they
make the loop synchronous: the host work above adds to the GPU's), the tokenizer and detokenizer processes (other
cores), and at tp > 1 the gloo broadcast of the received requests every pass.

    python3 scripts/bench_sglang_v03_host.py /path/to/sglang-0.3.0 [--batches 32,512] [--steps 40] [--prompt 220]
                                             [--warm 100]

Requests as sglang.bench_serving sends them (temperature 0, ignore_eos, stream); --disable-radix-cache (ChunkCache),
the rows' launch flag. Prints, per batch, the best and median seconds of a decode pass with the stand-in's share, and
the per-sequence slope between the first and last batch.
"""
from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import time
import types

from import_stubs import Stubs  # scripts/: a neighbour

# third-party modules an sglang.srt import pulls in but the decode path never runs
_STUB = {"vllm", "flashinfer", "triton", "zmq", "outlines", "interegular", "psutil", "fastapi", "uvicorn", "uvloop",
         "rpyc", "aiohttp", "requests", "PIL", "decord", "hf_transfer", "orjson", "tiktoken", "sentencepiece",
         "xformers", "lark", "cv2"}
# sglang's own GPU modules (the model runner, CUDA-graph runner, layers) the scheduler imports but, over the
# stand-in runner, never calls
_STUB_SGL = ("sglang.srt.model_executor.model_runner", "sglang.srt.model_executor.cuda_graph_runner",
             "sglang.srt.layers", "sglang.srt.constrained.fsm_cache", "sglang.srt.constrained.jump_forward",
             "sglang.srt.hf_transformers_utils", "sglang.srt.model_config", "sglang.srt.utils", "sglang.utils")


def _cpu_factories():
    """SGLang 0.3.0 names device="cuda" in its tensor constructors: the same calls on the CPU here."""
    import torch
    for name in ("tensor", "empty", "zeros", "ones", "full", "arange", "rand", "randn", "randint"):
        real = getattr(torch, name)

        def make(real=real):
            def f(*a, **k):
                k["device"] = "cpu"
                return real(*a, **k)
            return f
        setattr(torch, name, make())


def _import_sglang(src: str):
    sys.meta_path.insert(0, Stubs(_STUB, _STUB_SGL))
    sys.path.insert(0, src)
    pkg = types.ModuleType("sglang")       # skip sglang/__init__ (the frontend language and its API)
    pkg.__path__ = [src + "/sglang"]
    sys.modules["sglang"] = pkg
    _cpu_factories()


def run(src: str, batches: list[int], steps: int, prompt: int, warm: int, max_tokens: int,
        vocab: int = 128256) -> list[dict]:
    _import_sglang(src)
    import torch
    torch.set_num_threads(1)       # tiny tensors: no OpenMP team (on a shared machine it spins)
    from sglang.global_config import global_config
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.managers.policy_scheduler import PolicyScheduler
    from sglang.srt.managers.tp_worker import ModelTpServer
    from sglang.srt.mem_cache.chunk_cache import ChunkCache
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.sampling.sampling_params import SamplingParams

    eos = 128009
    out = []
    pool_tokens = max(batches) * (prompt + warm + steps + 16) + 4096     # one size for every batch
    for batch in batches:
        ctx = prompt + warm + steps + 64
        stand_in = {"s": 0.0}

        class Runner:          # the model runner's forward: its outputs as the CUDA graph's buffers hold them
            is_generation = True

            def forward(self, b, mode):
                t0 = time.perf_counter()
                n = len(b.reqs)
                ids = torch.arange(n, dtype=torch.int64) % 7 + 1000        # never eos: nothing finishes early
                res = (types.SimpleNamespace(success=torch.ones(n, dtype=torch.bool), probs=None,
                                             batch_next_token_ids=ids),
                       types.SimpleNamespace(next_token_logprobs=None))
                stand_in["s"] += time.perf_counter() - t0
                return res

        srv = object.__new__(ModelTpServer)
        runner = Runner()
        runner.req_to_token_pool = ReqToTokenPool(batch + 8, ctx + 8)
        # the KV pool's per-token buffers are the GPU's: one layer of 1 head x 1 dim keeps the allocator real
        runner.token_to_kv_pool = MHATokenToKVPool(pool_tokens, torch.float16, 1, 1, 1)
        srv.model_runner = runner
        srv.model_config = types.SimpleNamespace(vocab_size=vocab, context_len=ctx)
        srv.tp_rank, srv.tp_size, srv.dp_size = 0, 1, 1
        srv.schedule_policy, srv.disable_regex_jump_forward = "fcfs", False
        srv.tokenizer = types.SimpleNamespace(eos_token_id=eos)
        srv.max_total_num_tokens = pool_tokens
        srv.max_prefill_tokens = 16384              # server_args.py:55
        srv.max_running_requests = batch
        srv.max_req_input_len = ctx - 1
        srv.req_to_token_pool, srv.token_to_kv_pool = runner.req_to_token_pool, runner.token_to_kv_pool
        srv.tree_cache = ChunkCache(srv.req_to_token_pool, srv.token_to_kv_pool)   # --disable-radix-cache
        srv.tree_cache_metrics = {"total": 0, "hit": 0}
        srv.scheduler = PolicyScheduler("fcfs", srv.tree_cache)
        srv.waiting_queue, srv.running_batch, srv.out_pyobjs = [], None, []
        srv.decode_forward_ct, srv.stream_interval = 0, 1                      # server_args.py: stream_interval 1
        srv.num_generated_tokens, srv.last_stats_tic = 0, time.time()
        srv.chunked_prefill_size, srv.current_inflight_req, srv.is_mixed_chunk = 8192, None, False
        srv.jump_forward_cache = None
        srv.min_new_token_ratio = global_config.base_min_new_token_ratio
        srv.new_token_ratio = srv.min_new_token_ratio
        srv.new_token_ratio_decay = global_config.new_token_ratio_decay
        srv.print_decode_stats = lambda: None      # a log line every 40 decode passes: not per step
        reqs = []
        for i in range(batch):
            sp = SamplingParams(max_new_tokens=max_tokens, temperature=0.0, ignore_eos=True)
            sp.normalize(None)
            reqs.append(TokenizedGenerateReqInput(str(i), None, list(range(3, 3 + prompt)), None, None, None, sp,
                                                  False, -1, 0, True))
        sent = {"bytes": 0, "pickle": 0.0, "finished": 0.0}
        real_finished = srv.handle_finished_requests

        def timed_finished(b):
            t0 = time.perf_counter()
            real_finished(b)
            sent["finished"] += time.perf_counter() - t0
        srv.handle_finished_requests = timed_finished

        def controller_pass(recv):        # ControllerSingle.loop_for_forward, one pass (tp 1)
            for obj in srv.exposed_step(recv):
                t0 = time.perf_counter()
                sent["bytes"] += len(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL))   # zmq send_pyobj
                sent["pickle"] += time.perf_counter() - t0

        controller_pass(reqs)
        while srv.waiting_queue or srv.current_inflight_req is not None:
            controller_pass([])
        assert srv.running_batch is not None and len(srv.running_batch.reqs) == batch
        for _ in range(warm):
            controller_pass([])
        times, stand, fin, pick = [], [], [], []
        for _ in range(steps):
            stand_in["s"], sent["bytes"], sent["pickle"], sent["finished"] = 0.0, 0, 0.0, 0.0
            t0 = time.perf_counter()
            controller_pass([])
            times.append(time.perf_counter() - t0)
            stand.append(stand_in["s"])
            fin.append(sent["finished"])
            pick.append(sent["pickle"])
        assert len(srv.running_batch.reqs) == batch
        out.append({"batch": batch, "best_s": min(times), "median_s": statistics.median(times),
                    "stand_in_best_s": min(stand), "sent_bytes": sent["bytes"], "output_len": warm + steps,
                    "finished_best_s": min(fin), "pickle_best_s": min(pick)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="an unpacked sglang 0.3.0 source release (the directory holding sglang/)")
    ap.add_argument("--batches", default="32,512", help="running requests to time, comma-separated")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--prompt", type=int, default=220)
    ap.add_argument("--warm", type=int, default=97, help="decode passes before the timed ones (output length)")
    ap.add_argument("--max-tokens", type=int, default=4000)
    a = ap.parse_args(argv)
    rows = run(a.src, [int(x) for x in a.batches.split(",")], a.steps, a.prompt, a.warm, a.max_tokens)
    for r in rows:
        print(f"batch {r['batch']:5d}: pass best {r['best_s'] * 1e3:8.3f} ms  median {r['median_s'] * 1e3:8.3f} ms  "
              f"(stand-in runner best {r['stand_in_best_s'] * 1e3:.3f} ms)  per request "
              f"{(r['best_s'] - r['stand_in_best_s']) / r['batch'] * 1e6:.2f} us; {r['sent_bytes']} bytes pickled "
              f"to the detokenizer (output length ~{r['output_len']}); of the pass: handle_finished_requests best "
              f"{r['finished_best_s'] * 1e3:.3f} ms, pickle best {r['pickle_best_s'] * 1e3:.3f} ms")
    if len(rows) >= 2:
        a0, a1 = rows[0], rows[-1]
        eng = [r["best_s"] - r["stand_in_best_s"] for r in (a0, a1)]
        slope = (eng[1] - eng[0]) / (a1["batch"] - a0["batch"])
        print(f"slope (scheduler pass, best, stand-in excluded): {slope * 1e6:.2f} us per running request per step; "
              f"intercept {(eng[0] - slope * a0['batch']) * 1e3:.3f} ms")
        for k, what in (("finished_best_s", "handle_finished_requests"), ("pickle_best_s", "send_pyobj's pickle")):
            print(f"slope ({what}, best): {(a1[k] - a0[k]) / (a1['batch'] - a0['batch']) * 1e6:.2f} us per running "
                  "request per step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
