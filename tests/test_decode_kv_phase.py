"""The decode step's attention kernel reads the KV cache after the GEMMs, in its own phase (speed.py
`_Serving.decode_step`, docs/serving-load.md "Decode attention is its own kernel"): once the GEMMs are
compute-bound, a longer context still costs its whole KV read. Bounds from hand arithmetic and the
datasheet, not from the code under test."""
import pytest

from gpuplan import pipeline
from gpuplan.estimate.speed import serving_model

# Llama-2-70B, fp8 weights and fp8 KV, tp 2 on H100 SXM (the MLPerf v4.1 DGX-H100 replica)
SCN = {"model": "llama-2-70b-hf", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 2},
       "parallel": {"tp": 2}, "infer": {"engine": "trtllm", "weights": "fp8", "kv_cache": "fp8",
                                        "prompt_len": 300, "output_len": 290, "max_num_seqs": 1024}}
H100_BW = 3.35e12          # bytes/s, H100 SXM datasheet (HBM3): no kernel reads faster
KV_PER_TOKEN_GPU = 2 * 80 * 8 * 128 * 1 / 2   # K and V x 80 layers x 8 KV heads x 128 dims x 1 byte, over tp 2


@pytest.fixture(scope="module")
def sv():
    r = pipeline.resolve(SCN)
    mem = pipeline.memory(r)
    return serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network, memory=mem)


def test_kv_bytes_by_hand(sv):
    d = sv.decode_step(845, 445)
    assert d["kv_bytes"] == pytest.approx(845 * 445 * KV_PER_TOKEN_GPU, rel=1e-6)   # 30.8 GB per GPU


def test_long_context_pays_its_kv_read_at_a_compute_bound_batch(sv):
    # 845 sequences: the GEMMs are compute-bound (their FLOPs take longer than the weight read), so under one
    # roofline a longer context added only its attention FLOPs (well under a millisecond). As its own phase
    # the KV read of 845 x 440 more tokens — 30.5 GB per GPU — cannot take less than 30.5 GB / 3.35 TB/s
    # = 9.1 ms.
    short, long_ = sv.decode_step(845, 5), sv.decode_step(845, 445)
    assert short["compute"] > short["memory"]                  # compute-bound at this batch
    extra_kv_s = 845 * 440 * KV_PER_TOKEN_GPU / H100_BW
    assert long_["time"] - short["time"] >= extra_kv_s


def test_small_batch_is_one_memory_phase(sv):
    # at batch 1 both phases are bound by memory: the step is at least (weights + KV) / peak bandwidth, and the
    # two phases add as the bytes do (no roofline hides either)
    d = sv.decode_step(1, 445)
    assert d["time"] >= (d["weights_bytes"] + d["kv_bytes"]) / H100_BW
