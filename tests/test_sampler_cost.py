"""vLLM V1's sampler passes over one step's fp32 logits (speed.py `sampler_bytes`, docs/speed.md "Sampler"):
bytes per logit element counted by hand from vllm/v1/sample/sampler.py @3e342658 and
ops/topk_topp_sampler.py @01fa3fe7, not from the code under test."""
import pytest

from gpuplan import pipeline
from gpuplan.estimate.speed import serving_model

VOCAB = 128256            # Llama-3.1-8B's vocabulary (its config.json vocab_size)
# to(float32): read bf16 2 + write 4; argmax: read 4
GREEDY = 2 + 4 + 4
# + temperature div_ (4 + 4) + softmax (4 + 4) + exponential_ (write 4) + div_ (8 + 4) + argmax (4), minus the
# greedy argmax the random path does not run (all_random)
RANDOM = 2 + 4 + 8 + 8 + 4 + 12 + 4
LOGPROBS = 8 + 4          # log_softmax (4 + 4) + the sampled token's rank count (read 4)


def _sv(engine="vllm", **infer):
    scn = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
           "infer": {"engine": engine, "prompt_len": 200, "output_len": 800, **infer}}
    r = pipeline.resolve(scn)
    mem = pipeline.memory(r)
    return serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network, memory=mem)


@pytest.mark.parametrize("infer, per", [({"sampling": "greedy"}, GREEDY), ({}, RANDOM),
                                        ({"logprobs": True}, RANDOM + LOGPROBS),
                                        ({"sampling": "greedy", "logprobs": True}, GREEDY + LOGPROBS)])
def test_sampler_bytes_by_hand(infer, per):
    d = _sv(**infer).decode_step(256, 1000)
    assert d["sampler_bytes"] == pytest.approx(256 * VOCAB * per, rel=1e-9)   # 1.38 GB for random at 256 rows


def test_sampler_time_is_its_bytes_at_hbm_speed():
    greedy, rand = _sv(sampling="greedy"), _sv()
    a, b = greedy.decode_step(512, 1000), rand.decode_step(512, 1000)
    extra = b["time"] - a["time"]
    # 512 x 128256 x 32 B = 2.10 GB more than greedy; an H100 SXM reads at most 3.35 TB/s (datasheet), so at
    # least 0.63 ms, and a kernel sequence running at >= 50 % of it takes at most 1.25 ms
    assert 512 * VOCAB * (RANDOM - GREEDY) / 3.35e12 <= extra <= 512 * VOCAB * (RANDOM - GREEDY) / (0.5 * 3.35e12)


def test_single_sequence_unchanged_to_a_few_microseconds():
    # one row of logits: 128256 x 42 B = 5.4 MB, ~2 us of a ~6 ms step
    assert _sv().decode_step(1, 1000)["sampler"] < 5e-6


def test_other_engines_not_priced():
    assert _sv("sglang").decode_step(256, 1000)["sampler_bytes"] == 0.0
