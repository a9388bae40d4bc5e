"""SGLang's own memory fraction and output-aware admission (sgl-project/sglang v0.5.5.post1; docs/serving-load.md,
*SGLang's admission and KV pool*). Expected values are hand arithmetic on SGLang's rules, not the code's output."""
import numpy as np
import pytest

from gpuplan import pipeline
from gpuplan.estimate.load import ConstantCost, Policy, Workload, simulate, summarize
from gpuplan.estimate.memory import sglang_mem_fraction_static

MiB = 1 << 20


def wl(arrivals, inputs, outputs):
    return Workload(np.array(arrivals, float), np.array(inputs), np.array(outputs))


# ---- --mem-fraction-static default (ServerArgs._handle_gpu_memory_settings) --------------------------------

@pytest.mark.parametrize("mib, tp, expected", [
    # H100 SXM, nvidia-smi 81559 MiB, tp 1: reserved = 512 + 8192 x 1.5 + 256 x 2 + 1/8 x 1024 = 13440 MiB
    (81559, 1, round((81559 - 13440) / 81559, 3)),       # 0.835
    # A100 80GB, 81920 MiB
    (81920, 1, round((81920 - 13440) / 81920, 3)),       # 0.836
    # H100 at tp 4: cuda_graph_max_bs 512 and 4/8 GiB: 512 + 12288 + 1024 + 512 = 14336
    (81559, 4, round((81559 - 14336) / 81559, 3)),       # 0.824
    # a 24 GiB card (below 35 GiB: chunk 2048, graphs 24): 512 + 3072 + 48 + 128 = 3760, no 10 GiB floor
    (24564, 1, round((24564 - 3760) / 24564, 3)),        # 0.847
    # H200 (143771 MiB): the 8192 / 256 row; 13440 MiB
    (143771, 1, round((143771 - 13440) / 143771, 3)),    # 0.907
])
def test_mem_fraction_static_by_hand(mib, tp, expected):
    assert sglang_mem_fraction_static(mib * MiB, tp, 1) == pytest.approx(expected, abs=1e-9)


def test_a_40_gib_card_floors_at_nothing_and_a_100_gib_one_at_10_gib():
    # 40 GiB (A100 40GB, 40960 MiB): chunk 4096, graphs 32: 512 + 6144 + 64 + 128 = 6848 (no floor below 60 GiB)
    assert sglang_mem_fraction_static(40960 * MiB, 1, 1) == pytest.approx(round((40960 - 6848) / 40960, 3))
    # 64 GiB: chunk 8192 -> 13440 > 10240, the floor does not bind; tiny chunks could not go below 10 GiB
    assert sglang_mem_fraction_static(65536 * MiB, 1, 1) == pytest.approx(round((65536 - 13440) / 65536, 3))


def _pool(engine, **infer):
    scn = {"model": "qwen3-32b", "task": "infer", "hardware": {"gpu": "a100-sxm-80gb", "count": 1},
           "infer": {"engine": engine, "weights": "bf16", "prompt_len": 1024, "output_len": 256, **infer}}
    r = pipeline.resolve(scn)
    return pipeline.memory(r).limits["kv_pool_bytes"]


def test_sglang_pool_is_its_fraction_of_the_free_memory_less_the_weights():
    # pool = fraction x (memory free before the weights) - weights: two fractions differ by their difference
    # times the same free memory, and the activation profile (the token budget) takes nothing from it
    a, b = _pool("sglang", gpu_memory_utilization=0.9), _pool("sglang", gpu_memory_utilization=0.85)
    free = (a - b) / 0.05
    assert 80 * 1024 * MiB > free > 78 * 1024 * MiB            # 80 GiB less the CUDA context (and nothing else)
    assert _pool("sglang", gpu_memory_utilization=0.9, max_num_batched_tokens=16384) == a
    assert _pool("vllm", gpu_memory_utilization=0.9, max_num_batched_tokens=16384) < \
        _pool("vllm", gpu_memory_utilization=0.9, max_num_batched_tokens=2048)
    # without the knob: SGLang's own 0.836 on an A100 80GB, the same pool as stating it
    assert _pool("sglang") == _pool("sglang", gpu_memory_utilization=0.836)
    # Qwen3-32B bf16 (61.0 GiB of weights) keeps ~5.4 GiB: ~22k tokens of 256 KiB (64 layers x 8 KV heads x 128 x 2 x 2)
    assert 20_000 < _pool("sglang") / (256 * 1024) < 23_000


# ---- admission keeps room for outputs (PrefillAdder.add_one_req) -------------------------------------------

SG = dict(engine="sglang", max_num_seqs=8, token_budget=100, block_size=1, mixed=False)


def test_second_request_waits_for_the_first_ones_output_by_hand():
    # pool of 30 tokens, A and B at t=0, each 10 prompt + 10 output tokens, 10 ms per iteration.
    # SGLang: A needs 10 + 10 = 20 < 30 -> admitted, and this round now holds 20; B needs 20 < 30 - 20? no: it
    # waits (and the scheduler stops trying until the running batch shrinks). A: prefill at .01, nine decodes,
    # done at .10; then B: first token .11, done .20.
    res = simulate(wl([0, 0], [10, 10], [10, 10]), Policy(kv_blocks=30, new_token_ratio=0.7, **SG), ConstantCost(0.01))
    assert res.first_token_s == pytest.approx([0.01, 0.11])
    assert res.finish_s == pytest.approx([0.10, 0.20])
    assert res.preemptions == 0
    # vLLM's rule (the prompt's blocks only): both prompts fit (20 <= 30) and run together from the start
    res = simulate(wl([0, 0], [10, 10], [10, 10]), Policy(kv_blocks=30, **SG), ConstantCost(0.01))
    assert res.first_token_s == pytest.approx([0.01, 0.01])


def test_running_requests_hold_back_the_ratio_of_their_remaining_output_by_hand():
    # pool 38; A (10 + 10) at t=0; B (10 + 10) arrives at .015, seen at the iteration starting .02.
    # At .02 A has sent 2 tokens (.01 and .02), holds 10 prompt + 1 token of KV and has 8 tokens left, so the
    # pool keeps 38 - 11 = 27 free less ratio x 8 for it; the ratio has decayed by one decode batch, by
    # (init - 0.14 init) / 600. B needs 20: admitted at init 0.7 (27 - 0.699 x 8 = 21.4 > 20), refused at init
    # 1.0 (27 - 0.9986 x 8 = 19.01).
    w = wl([0, 0.015], [10, 10], [10, 10])
    fast = simulate(w, Policy(kv_blocks=38, new_token_ratio=0.7, **SG), ConstantCost(0.01))
    # B's prompt runs alone at .02-.03 (SGLang does not mix): first token .03
    assert fast.first_token_s[1] == pytest.approx(0.03)
    slow = simulate(w, Policy(kv_blocks=38, new_token_ratio=1.0, **SG), ConstantCost(0.01))
    # ratio 1.0: B waits for A (done at .10), then prefills: first token .11
    assert slow.finish_s[0] == pytest.approx(0.10)
    assert slow.first_token_s[1] == pytest.approx(0.11)


def test_a_retracted_request_goes_to_the_tail_and_recomputes():
    # pool 24, ratio 0.01 (nearly nothing held for running outputs). A (4 + 12) at t=0 and B (4 + 10) at .005
    # both get in (16 < 24; then 14 < 24 - 5 - 0.1); C (4 + 10) at .025 waits. Together A and B need
    # 16 + 14 = 30 > 24 tokens, so a decode step runs out. A waited during B's prefill batch, so both have sent
    # as many tokens and have 4-token prompts: the tie goes to the newest (B), which SGLang appends behind C,
    # so C is admitted before B's recompute.
    w = wl([0, 0.005, 0.025], [4, 4, 4], [12, 10, 10])
    res = simulate(w, Policy(kv_blocks=24, new_token_ratio=0.01, **SG), ConstantCost(0.01))
    assert res.preemptions >= 1
    assert res.finish_s[0] < res.finish_s[1]                   # A kept running
    assert res.finish_s[2] < res.finish_s[1]                   # C overtook the retracted B
    # vLLM's rule puts the preempted request back at the head: B before C
    res = simulate(w, Policy(kv_blocks=24, **SG), ConstantCost(0.01))
    assert res.preemptions >= 1
    assert res.finish_s[1] < res.finish_s[2]


def test_littles_law_with_sglang_admission():
    # a KV-bound SGLang replica (retractions, a refused head, a decaying ratio) still obeys Little's law:
    # the time-average in the system = arrival rate x mean time in the system (no front end here)
    rng = np.random.default_rng(0)
    n = 3000
    arr = np.cumsum(rng.exponential(1 / 30.0, n))
    inp = rng.integers(50, 400, n)
    out = rng.integers(20, 300, n)
    res = simulate(Workload(arr, inp, out), Policy(kv_blocks=20_000, new_token_ratio=0.7, **SG | {"max_num_seqs": 256,
                                                                                               "token_budget": 2048}),
                   ConstantCost(0.02))
    s = summarize(res)
    span = res.horizon_s
    lam = n / span
    assert s["mean_in_system"] == pytest.approx(lam * s["e2e_s"]["mean"], rel=0.02)


def _sglang_load_scenario(**infer):
    return {"model": "qwen3-32b", "task": "infer", "hardware": {"gpu": "a100-sxm-80gb", "count": 1},
            "infer": {"engine": "sglang", "weights": "bf16", "prompt_len": 200, "output_len": 200, **infer,
                      "load": {"arrival": "offline", "requests": 300, "seed": 0}}}


def test_schedule_conservativeness_sets_the_initial_ratio_and_the_launch_flag():
    from gpuplan.errors import GpuplanError
    from gpuplan.launch import launch_files
    from gpuplan.scenario import Scenario
    # SGLang: init_new_token_ratio = min(0.7 x conservativeness, 1)
    for c, ratio in ((None, 0.7), (0.5, 0.35), (2.0, 1.0), (0.0, 0.0)):
        infer = {} if c is None else {"schedule_conservativeness": c}
        r = pipeline.resolve(_sglang_load_scenario(**infer))
        out = pipeline.serving_load(r, pipeline.memory(r), search=False)
        assert out["policy"]["new_token_ratio"] == pytest.approx(ratio)
    with pytest.raises((GpuplanError, ValueError)):
        pipeline.resolve({**_sglang_load_scenario(), "infer": {"engine": "vllm", "schedule_conservativeness": 1.0}})
    # the launch file states the knob and the fraction the estimate used (SGLang's default 0.836 on an A100 80GB)
    scn = Scenario.model_validate({k: v for k, v in _sglang_load_scenario(schedule_conservativeness=0.5).items()})
    text = "\n".join(launch_files(scn, "sglang").values())
    assert "--schedule-conservativeness 0.5" in text
    assert "--mem-fraction-static 0.836" in text
