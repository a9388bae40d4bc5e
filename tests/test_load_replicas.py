"""`infer.load` is the whole plan's load: `serve` deals it evenly to the plan's replicas (model copies) and
simulates one, as recommend sizes replicas (docs/serving-load.md). Two replicas at 10 requests/s are one replica at
5 requests/s, with the plan's throughput twice that replica's."""
import pytest

from gpuplan import pipeline


def _load(count, load):
    scn = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": count},
           "parallel": {"tp": 1}, "infer": {"engine": "vllm", "load": dict(
               {"requests": 300, "input": {"dist": "fixed", "mean": 512}, "output": {"dist": "fixed", "mean": 64},
                "seed": 0}, **load)}}
    r = pipeline.resolve(scn)
    return pipeline.serving_load(r, pipeline.memory(r), search=False)


def test_poisson_rate_is_dealt_to_the_replicas():
    two = _load(2, {"rate_per_s": 10})
    one = _load(1, {"rate_per_s": 5})
    assert two["replicas"] == 2 and two["rate_per_replica_s"] == pytest.approx(5.0)
    assert two["rate_per_s"] == pytest.approx(10.0)
    assert two["ttft_s"]["p99"] == pytest.approx(one["ttft_s"]["p99"], rel=1e-12)
    assert two["requests_per_s"] == pytest.approx(2 * one["requests_per_s"], rel=1e-12)
    assert any("2 replicas share 10 requests/s" in n for n in two["notes"])


def test_closed_clients_and_offline_requests_are_dealt_too():
    # 9 clients over 2 replicas: the busier replica's 5 are simulated; 301 offline requests: 151 each
    assert _load(2, {"arrival": "closed", "clients": 9})["tpot_s"]["p50"] == pytest.approx(
        _load(1, {"arrival": "closed", "clients": 5})["tpot_s"]["p50"], rel=1e-12)
    two, one = _load(2, {"arrival": "offline", "requests": 301}), _load(1, {"arrival": "offline", "requests": 151})
    assert two["ttft_s"]["mean"] == pytest.approx(one["ttft_s"]["mean"], rel=1e-12)
