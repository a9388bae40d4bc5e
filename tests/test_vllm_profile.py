"""vLLM V1's start-up memory profile and KV pool (docs/serving-load.md, *vLLM V1's KV pool*).

What vLLM v0.11.0 (git f71952c1c) keeps out of the pool, read in its source:
* vllm/v1/worker/gpu_worker.py: requested_memory = gpu_memory_utilization x the CUDA total, the snapshot taken after
  the CUDA context and NCCL exist; pool = requested - weights - the profile's torch peak increase - non-torch memory
  added since the snapshot; CUDA graphs are captured after the profile and are not subtracted.
* gpu_model_runner.profile_run: a forward over max_num_batched_tokens, then the dummy sampler over
  min(tokens, max_num_seqs) requests while the forward's hidden states are still held.
* FlashInfer's top-k/top-p path (flashinfer-python 0.3.1 sampling.py): 16-bit logits + fp32 copy + top-k masked
  fp32 logits + fp32 softmax = 14 bytes per request and vocabulary entry.
Expected values below are hand arithmetic from Qwen3-32B's config.json (hidden 5120, intermediate 25600, vocab
151936, 64 layers x 8 KV heads x 128 x 2 x 2 bytes = 262144 bytes of KV per token) and the H100 SXM's 81559 MiB.
"""
import pytest

from gpuplan.estimate.memory import _profile_run_bytes, estimate_memory
from gpuplan.hardware import get_gpu
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict

MiB = 2 ** 20


def _scn(gpu: str, seqs: int, **infer):
    return scenario_from_dict({"model": "qwen3-32b", "task": "infer", "hardware": {"gpu": gpu},
                               "infer": {"engine": "vllm", "max_num_seqs": seqs, **infer}})


def _mem(gpu: str, seqs: int, **infer):
    return estimate_memory(_scn(gpu, seqs, **infer), get_model("qwen3-32b"), get_gpu(gpu).usable_memory_bytes)


# H100 SXM with vllm serve's defaults there: 8192 batched tokens, 1024 sequences
FORWARD = 8192 * (4 * 5120 + 3 * 25600) * 2                 # 1,593,835,520
SAMPLER = 8192 * 5120 * 2 + 1024 * 151936 * 14               # 83,886,080 + 2,178,154,496 = 2,262,040,576


def test_profile_peak_is_the_flashinfer_sampler_beside_the_hidden_states():
    assert SAMPLER == 2_262_040_576 and FORWARD == 1_593_835_520
    scn = _scn("h100-sxm", 1024)
    assert _profile_run_bytes(scn, get_model("qwen3-32b"), get_gpu("h100-sxm").usable_memory_bytes, 1024) == SAMPLER


def test_pool_is_the_requested_share_less_weights_profile_and_workspaces():
    # 0.9 x (81559 - 449) MiB = 72,999 MiB = 76,544,999,424 B; less the 64 MiB of workspaces and the profile peak
    est = _mem("h100-sxm", 1024)
    expected = 76_544_999_424 - 64 * MiB - SAMPLER
    assert est.limits["kv_pool_bytes"] + est.components["weights"] == pytest.approx(expected, abs=2)


def test_cuda_graphs_do_not_shrink_the_v1_pool():
    on = _mem("h100-sxm", 1024, cuda_graphs=True).limits["kv_pool_bytes"]
    off = _mem("h100-sxm", 1024, cuda_graphs=False).limits["kv_pool_bytes"]
    assert on == off


def test_the_pool_matches_what_the_gpustack_pages_ran():
    """Published facts, not the scored rows' latencies: GPUStack's Qwen3-32B H100 page (gpustack/gpustack@10e9444a
    docs/performance-lab/qwen3-32b/h100.md, 'random 32K input') served 100 requests of 32,000 prompt tokens (+ the
    chat template) and up to 100 output tokens through vLLM 0.11 on one card, every inter-token gap a decode-only
    step (P99 ITL 46.54 ms): the pool held one whole request (>= 32,100 tokens) but never the first 8,192-token
    chunk of a second beside it (< 32,100 + 8,192). Its A100 page had to start vLLM with --max-model-len 32768
    (docs/performance-lab/qwen3-32b/a100.md): vLLM refuses to start when the pool cannot hold one max_model_len
    request (kv_cache_utils.check_enough_kv_cache_memory), so the A100 pool is < 40,960 tokens (Qwen3-32B's
    max_position_embeddings) and >= 32,768. The previous profile (24-byte sorted sampler, graphs and CUDA context
    inside the share) gave the H100 25,056 tokens: below the request it served."""
    h100 = _mem("h100-sxm", 1024).limits["kv_tokens"]
    assert 32_100 <= h100 < 32_100 + 8_192
    a100 = _mem("a100-sxm-80gb", 256, max_num_batched_tokens=2048).limits["kv_tokens"]
    assert 32_768 <= a100 < 40_960
