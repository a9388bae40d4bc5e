"""TensorRT-LLM CUDA-graph padding (estimate/trtllm_bench.py) and the prompt logits / lm_head rules of the
serving model (speed.py `_Serving`). Expected values are hand arithmetic from the cited source logic."""
from __future__ import annotations

import pytest

from gpuplan.estimate import speed
from gpuplan.estimate.trtllm_bench import (PERF_OVERVIEW_GRAPH_BATCH_SIZES, captured_sizes, padded_batch,
                                           prompt_step_share)
from gpuplan.hardware import get_gpu
from gpuplan.models import get_model
from gpuplan.scenario import scenario_from_dict

LLAMA8 = get_model("llama-3.1-8b")
PAGE = list(PERF_OVERVIEW_GRAPH_BATCH_SIZES)


def _scn(engine="trtllm", weights="fp8", isl=128, osl=2048, conc=3000, gpu="h200-sxm", graphs=True):
    inf = {"engine": engine, "weights": weights, "kv_cache": "fp8" if weights == "fp8" else "bf16",
           "prompt_len": isl, "output_len": osl, "concurrency": conc, "gpu_memory_utilization": 0.9}
    if graphs and engine == "trtllm":
        inf["cuda_graph_batch_sizes"] = PAGE
    return scenario_from_dict({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": gpu, "count": 1},
                               "infer": inf})


def _sv(scn, gpu="h200-sxm"):
    return speed.serving_model(scn, LLAMA8, get_gpu(gpu))


# ---- captured graph sizes (model_engine.py @001e6700 _filter_cuda_graph_batch_sizes) --------------

def test_captured_sizes_keep_those_under_the_bound():
    # bound = min(max batch 1024, max num tokens 2048) = 1024: every page size up to 1024 is captured
    assert captured_sizes(PAGE, 1024, 2048) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024]


def test_captured_sizes_pad_to_the_bound_when_a_size_lies_above():
    # bound 896: 1024 > 896, so with padding one more graph at 896
    assert captured_sizes(PAGE, 896, 2048)[-3:] == [384, 512, 896]
    # bound = max num tokens when it is the smaller: min(4096, 2048) = 2048
    assert captured_sizes(PAGE, 4096, 2048)[-2:] == [1024, 2048]
    # without padding the larger sizes are simply dropped
    assert captured_sizes(PAGE, 896, 2048, padding=False)[-1] == 512


def test_padded_batch_rounds_up_or_runs_eager():
    sizes = captured_sizes(PAGE, 1024, 2048)
    assert padded_batch(857, sizes) == 1024
    assert padded_batch(512, sizes) == 512
    assert padded_batch(257, sizes) == 384
    assert padded_batch(1025, sizes) is None      # above every graph: eager, no padding


def test_prompt_step_share_by_hand():
    # 857 running, 2048-token budget: 1191 tokens of room, 857 prompts of 128 tokens over 2048 steps
    assert prompt_step_share(857, 128, 2048, 2048) == pytest.approx(857 * 128 / 1191 / 2048)
    # 4096 running at 128/128 in an 8192 budget: a prompt in every step
    assert prompt_step_share(4096, 128, 128, 8192) == 1.0
    # the room never drops below one prompt
    assert prompt_step_share(100, 20000, 2000, 20096) == pytest.approx(100 * 20000 / 20000 / 2000)


# ---- padding in the decode step -----------------------------------------------------------------

def test_padded_rows_cost_linears_not_kv():
    sv = _sv(_scn())
    plain = sv.decode_step(857, 1152)
    padded = sv.decode_step(857, 1152, padded_rows=1024)
    assert padded["kv_bytes"] == plain["kv_bytes"]           # a dummy request holds one token
    assert padded["weights_bytes"] == plain["weights_bytes"]  # dense model: the same weights
    assert padded["compute"] > plain["compute"]
    assert padded["time"] >= plain["time"]


def test_stated_graphs_slow_the_decode_heavy_point_only_a_little():
    with_graphs = _sv(_scn()).point(3000)
    without = _sv(_scn(graphs=False)).point(3000)
    assert with_graphs["batch"] == without["batch"]
    assert with_graphs["output_tokens_per_s"] < without["output_tokens_per_s"]
    assert with_graphs["output_tokens_per_s"] > 0.9 * without["output_tokens_per_s"]


def test_graphs_ignored_without_cuda_graphs_or_on_other_engines():
    scn = _scn()
    off = scn.model_copy(update={"infer": scn.infer.model_copy(update={"cuda_graphs": False})})
    assert _sv(off).graph_sizes is None
    assert _sv(_scn(engine="vllm")).graph_sizes is None


# ---- prompt logits at the last position; lm_head 16-bit beside quantized linears ----------------------

def test_prompt_logits_last_position_only():
    """The prompt's lm_head cost does not grow with its length on a batched engine: the lm_head share
    of a 4096-token prompt is 4095 rows' worth smaller than when every position's logits are computed."""
    sv = _sv(_scn(engine="vllm", weights="bf16"))
    assert sv.last_token_logits

    def lin(p, last):
        sv.last_token_logits = last
        return sv._linear_time(p, prefill=True)
    head_row = (lin(2, False) - lin(1, False)) - (lin(2, True) - lin(1, True))
    assert head_row > 0
    assert lin(4096, False) - lin(4096, True) == pytest.approx(4095 * head_row, rel=1e-9)


def test_hf_keeps_every_position():
    assert not _sv(_scn(engine="hf", weights="bf16")).last_token_logits


def test_fp8_checkpoint_runs_lm_head_at_16_bit():
    gpu = get_gpu("h100-sxm")
    sv = _sv(_scn(weights="fp8", gpu="h100-sxm"), "h100-sxm")
    assert sv.compute_dtype == "fp8" and sv.head_dtype == "fp16"
    assert sv.head_peak == pytest.approx(speed.peak_flops(gpu, "fp16") * sv.clock)
    assert sv.head_peak < sv.peak_mm                      # H100: FP8 dense peak is twice the 16-bit one
    assert _sv(_scn(engine="vllm", weights="bf16", gpu="h100-sxm"), "h100-sxm").head_dtype is None
