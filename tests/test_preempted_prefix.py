"""vLLM V1 keeps a preempted request's blocks in its prefix cache until the free queue reuses them (read in vllm
v0.11.0, git f71952c1c: single_type_kv_cache_manager.free frees a request's blocks in reverse order onto the free
queue's tail, block_pool.get_new_blocks takes new blocks from its head and evicts the cached block it finds there,
kv_cache_manager.get_computed_blocks finds the request's surviving full blocks on re-admission; prefix caching is on
by default in V1). Hand-traced cases on a constant 10 ms iteration (Policy.keep_preempted)."""
import numpy as np
import pytest

from gpuplan import pipeline
from gpuplan.estimate.load import ConstantCost, Policy, Workload, simulate
from gpuplan.estimate.load.engines import engine_policy
from gpuplan.estimate.speed import serving_model


def _run(a_out: int, keep: bool):
    # blocks of 4 tokens, a pool of 6 blocks, 4 tokens per iteration. A (4 in) and B (12 in, 2 out) arrive at 0.
    wl = Workload(np.array([0.0, 0.0]), np.array([4, 12]), np.array([a_out, 2]))
    pol = Policy(engine="vllm", max_num_seqs=8, token_budget=4, block_size=4, kv_blocks=6, keep_preempted=keep)
    return simulate(wl, pol, ConstantCost(0.01))


def test_a_preempted_request_finds_its_blocks_again():
    # A prefills in iteration 1 (first token .01), B's prompt runs in chunks of 3 beside A's decodes (iterations
    # 2-5: first token .05). Iteration 6: A (context 8) and B (context 12) both need a new block, one is free: B,
    # the newest, is preempted: its 3 full blocks go to the free queue behind the 1 free block. A takes that one
    # block and ends with its 6th token (.06). Iteration 7: B comes back with 12 + 1 tokens; its 3 blocks are still
    # cached, so 1 token is computed and B's last token comes at .07. Without the cache B recomputes 13 tokens at
    # 4 a step: iterations 7-10, .10.
    assert _run(6, keep=False).finish_s == pytest.approx([0.06, 0.10])
    assert _run(6, keep=True).finish_s == pytest.approx([0.06, 0.07])


def test_blocks_reused_meanwhile_are_recomputed():
    # A runs to 10 tokens. After B's preemption (iteration 6) A takes the free block ahead of B's (iteration 6) and,
    # at context 12 -> 13 (iteration 10), the head of the queue: B's last block (freed first). B waits for A (its 13
    # tokens need 4 blocks beside A's 3), comes back at iteration 11 with 2 of its 3 blocks cached: 8 tokens, 5 to
    # compute: iterations 11 and 12, last token .12 (.14 when it recomputes all 13)
    assert _run(10, keep=True).finish_s == pytest.approx([0.10, 0.12])
    assert _run(10, keep=False).finish_s == pytest.approx([0.10, 0.14])


def test_vllm_v1_keeps_preempted_prefixes_v0_does_not():
    def pol(**infer):
        r = pipeline.resolve({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm"},
                              "infer": {"engine": "vllm", **infer}})
        mem = pipeline.memory(r)
        sv = serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network, memory=mem)
        return engine_policy(r.scenario, sv, int(r.gpu.usable_memory_bytes))[0]
    assert pol().keep_preempted
    assert not pol(num_scheduler_steps=10, max_model_len=4096).keep_preempted
