"""vLLM's V0 engine running a batch handed to LLM.generate at once (infer.vllm_v0, estimate/vllm_v0.py; read in the
vLLM v0.6.3 source release): chunked prefill on by default above 32,768 tokens of max_model_len at 512 tokens a step,
running requests first, new prompts cut where the budget ends, steps carrying a prompt chunk run without CUDA graphs.
Expected values are worked by hand below."""
import pytest

from gpuplan import api
from gpuplan.errors import GpuplanError
from gpuplan.estimate.engine_host import VLLM_EAGER_LAYER_S
from gpuplan.estimate.vllm_v0 import chunked_prefill_budget, offline_run
from script_module import load_script

vg = load_script("scripts/validate_gathered.py")


def test_default_budget():
    # arg_utils.py: use_long_context = max_model_len > 32768; config.py: 512 tokens with chunked prefill
    assert chunked_prefill_budget(131072) == 512
    assert chunked_prefill_budget(32768) is None
    assert chunked_prefill_budget(131072, 2048) == 2048


def test_offline_run_by_hand():
    # 8 requests of 128 prompt and 4 output tokens, budget 512, 1 s a step with prompt chunks, 0.5 s without.
    # step 1: no decodes, 4 whole prompts (512 tokens): 4 first tokens.
    # step 2: 4 decodes leave 508: 3 whole prompts and 124 tokens of the 8th; 3 more first tokens.
    # step 3: 7 decodes; the 8th prompt's last 4 tokens: its first token. The first four now have 1 token left.
    # steps 4-6 decode only (0.5 s each): the first four finish at 4, requests 5-7 at 5, the 8th at 6.
    calls = []

    def step(decodes, chunks):
        calls.append((decodes, tuple(chunks)))
        return 1.0 if chunks else 0.5

    t, steps = offline_run(8, 128, 4, 256, 512, step)
    assert steps == 6
    assert t == pytest.approx(3 * 1.0 + 3 * 0.5)
    assert calls[0] == (0, ((128, 0),) * 4)
    assert calls[1] == (4, ((128, 0),) * 3 + ((124, 0),))
    assert calls[2] == (7, ((4, 124),))


def test_offline_run_respects_max_seqs():
    # max_num_seqs 2: the third request waits for a slot. 2 prompts (step 1), 2 decode-only steps finish them
    # (3 output tokens: the first at step 1), then the third prompt (step 4) and its 2 decodes: 6 steps
    t, steps = offline_run(3, 10, 3, 2, 512, lambda d, c: 1.0)
    assert (steps, t) == (6, 6.0)


def _scn(**infer):
    base = {"engine": "vllm", "weights": "fp8", "kv_cache": "bf16", "prompt_len": 128, "output_len": 128,
            "concurrency": 8}
    base.update(infer)
    return {"model": "llama-3.1-405b", "task": "infer", "hardware": {"gpu": "mi300x", "count": 8},
            "parallel": {"tp": 8}, "infer": base}


def test_v0_run_of_a_batch_of_eight():
    # Llama 3.1 405B (max_position_embeddings 131072): chunked prefill at 512. Batch of 8 at 128/128: the 8th prompt
    # finishes its chunks at step 3 (as above) and needs 127 more decode steps: 130 steps in all, 3 of them eager
    run = api.estimate(_scn(vllm_v0=True)).performance.details["v0_offline_run"]
    assert run["steps"] == 130
    assert run["max_num_batched_tokens"] == 512 and run["max_num_seqs"] == 256
    # the eager issue of a mixed step: 0.375 ms a layer (vLLM PR 1440) x 126 layers on the reference-speed host
    # or slower; OCI's host is the GPU's default datacenter host
    assert run["eager_issue_s"] >= VLLM_EAGER_LAYER_S * 126 * 0.5


def test_v1_and_short_context_have_no_v0_run():
    assert "v0_offline_run" not in api.estimate(_scn()).performance.details
    short = api.estimate(_scn(vllm_v0=True, max_model_len=32768)).performance.details
    assert "v0_offline_run" not in short       # V0's default leaves chunked prefill off at 32,768 tokens


def test_v0_is_vllm_only():
    with pytest.raises(GpuplanError):
        api.estimate(_scn(engine="sglang", vllm_v0=True))


@pytest.mark.parametrize("version,v0", [("0.6 V0 (release not stated)", True), ("0.6.3", True), ("0.7.3", True),
                                        ("0.8.0", False), ("0.10.2", False), ("", False)])
def test_row_version(version, v0):
    assert vg.vllm_v0(version) is v0


def test_row_scored_against_the_harness_run():
    # a row whose harness hands the whole batch over at once takes the V0 run where one is priced, else the steady state
    class Perf:
        output_tokens_per_s = 100.0
        details = {"v0_offline_run": {"output_tokens_per_s": 80.0}}

    assert vg.offline_tokens_per_s({"harness": "offline"}, Perf) == 80.0
    assert vg.offline_tokens_per_s({"harness": ""}, Perf) == 100.0
    Perf.details = {}
    assert vg.offline_tokens_per_s({"harness": "offline"}, Perf) == 100.0


# --- V0's per-tensor FP8 linears on ROCm: torch._scaled_mm at the published MI300X times (rocm_fp8_gemm.py) ---------
from gpuplan import pipeline  # noqa: E402
from gpuplan.estimate import rocm_fp8_gemm as rg  # noqa: E402
from gpuplan.estimate.speed import serving_model  # noqa: E402

# Hugging Face MI300 kernels blog, "Torch time" (us): QKV 2304 x 16384, gate/up 13312 x 16384, down 16384 x 6656
QKV, GATE_UP, DOWN = (2304, 16384), (13312, 16384), (16384, 6656)


def test_measured_times_by_hand():
    assert rg.linear_seconds("mi300x", 1, *QKV) == pytest.approx(14.938e-6)
    # M = 17 (V0's padding): 1/16 of the way from M = 16 to M = 32
    assert rg.linear_seconds("mi300x", 17, *QKV) == pytest.approx((16.693 + (16.817 - 16.693) / 16) * 1e-6)
    assert rg.linear_seconds("mi300x", 256, *DOWN) == pytest.approx(35.561e-6)       # held beyond M = 32
    # the three shapes' bytes at M = 1: 37,748,736 + 218,103,808 + 109,051,904 = 364,904,448 in 123.640 us
    assert rg.stream_bytes_per_s("mi300x") == pytest.approx(364_904_448 / 123.640e-6)
    # the output projection (16384 x 2048) was not timed: 33,554,432 bytes at that rate = 11.369 us
    assert rg.linear_seconds("mi300x", 1, 16384, 2048) == pytest.approx(11.369e-6, rel=1e-4)
    assert not rg.measured("h100-sxm")


def _sv(**infer):
    r = pipeline.resolve(_scn(**infer))
    return serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network, memory=pipeline.memory(r))


def test_v0_fp8_linears_at_the_measured_times():
    # Llama 3.1 405B at TP 8, one decode row padded to 17: QKV 16.70075, gate/up 75.236 + 6.962/16 = 75.67113,
    # down 31.671 + 3.890/16 = 31.91413, output projection 11.369 us: 135.654 us a layer, 126 layers. The extra is
    # that time less the same 398,458,880 bytes a layer read at the decode memory rate.
    sv = _sv(vllm_v0=True)
    per_layer = (16.70075 + 75.67113 + 31.91413 + 11.3692) * 1e-6
    read = 398_458_880 / sv.bw
    assert sv._scaled_mm_extra(1) == pytest.approx(126 * (per_layer - read), rel=1e-4)
    # V1, and 16-bit weights, keep the packaged weight read
    assert _sv()._scaled_mm_extra(1) == 0.0
    assert _sv(vllm_v0=True, weights="bf16")._scaled_mm_extra(1) == 0.0


def test_vllm_fused_shapes_of_405b_at_tp8():
    # QKVParallelLinear: (16384 + 2 x 1024) / 8 = 2304 outputs; gate/up (2 x 53248) / 8 = 13312; o_proj and down_proj
    # split their inputs: 16384 / 8 = 2048, 53248 / 8 = 6656
    r = pipeline.resolve(_scn())
    shapes = sorted(rg.vllm_linear_shapes(r.model.blocks, 8))
    assert shapes == sorted([(126, 2304, 16384), (126, 13312, 16384), (126, 16384, 2048), (126, 16384, 6656)])
