"""A load tester's warm-up (infer.load.warmup_requests): the first requests sent are served like any other
but left out of the statistics, as genai-perf / AIPerf `--warmup-request-count` leave them out. Hand-computed
cases on a constant step cost, the scenario check, and the reason the NIM rows of serve-load.csv are scored
without their first round (their published means cannot contain it)."""
import csv
from pathlib import Path

import numpy as np
import pytest

from gpuplan import pipeline
from gpuplan.errors import GpuplanError
from gpuplan.estimate.load import ConstantCost, Policy, Workload, measured, simulate, summarize
from gpuplan.scenario import scenario_from_dict

CSV = Path(__file__).resolve().parents[1] / "validation" / "gathered" / "serve-load.csv"

# whole prompts of 600 tokens in a budget of 1000: one prompt per 10 ms iteration; one output token each (a
# request ends with the iteration that computes its prompt)
POL = Policy(engine="trtllm", max_num_seqs=8, token_budget=1000, block_size=4, chunked_prefill=False, mixed=True)


def _three_then_one():
    # three requests at t=0 (a cold start), one more at 1 s into an idle engine
    wl = Workload(np.array([0.0, 0.0, 0.0, 1.0]), np.array([600] * 4), np.array([1] * 4))
    return simulate(wl, POL, ConstantCost(0.01))


def test_cold_start_by_hand():
    m = summarize(_three_then_one())
    # first tokens at 10, 20, 30 ms (one prompt per iteration) and 10 ms after the late arrival
    assert m["ttft_s"]["mean"] == pytest.approx((0.010 + 0.020 + 0.030 + 0.010) / 4)
    assert m["requests"] == 4


@pytest.mark.parametrize("warmup, ttft_mean, n", [(1, (0.020 + 0.030 + 0.010) / 3, 3),
                                                 (2, (0.030 + 0.010) / 2, 2),
                                                 (3, 0.010, 1)])
def test_warmup_drops_the_first_sent(warmup, ttft_mean, n):
    m = summarize(_three_then_one(), warmup=warmup)
    assert m["ttft_s"]["mean"] == pytest.approx(ttft_mean)
    assert m["requests"] == n


def test_throughput_spans_the_measured_requests():
    # warm-up 3: the one measured request arrives at 1.0 s and ends at 1.01 s -> 1 request in 10 ms
    m = summarize(_three_then_one(), warmup=3)
    assert m["requests_per_s"] == pytest.approx(1 / 0.010)


def test_closed_loop_first_round_is_the_first_clients_sent():
    # a closed loop of 2 clients: requests 0 and 1 are sent at t=0, the others as answers end
    wl = Workload(np.full(6, np.nan), np.array([600] * 6), np.array([1] * 6), clients=2)
    res = simulate(wl, POL, ConstantCost(0.01))
    keep = measured(res, 2)
    assert list(np.flatnonzero(~keep)) == [0, 1]
    assert np.all(res.arrival_s[~keep] == 0.0)


def test_warmup_leaving_nothing_is_refused():
    with pytest.raises(ValueError):
        measured(_three_then_one(), 4)
    with pytest.raises(Exception, match="warmup_requests"):
        scenario_from_dict({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
                            "infer": {"engine": "vllm", "load": {"arrival": "closed", "clients": 4, "requests": 8,
                                                                 "warmup_requests": 8}}})


def test_scenario_warmup_changes_only_the_statistics():
    base = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
            "infer": {"engine": "trtllm", "prompt_len": 2000, "output_len": 50,
                      "load": {"arrival": "closed", "clients": 8, "requests": 64}}}

    def run(w):
        scn = {**base, "infer": {**base["infer"], "load": {**base["infer"]["load"], "warmup_requests": w}}}
        r = pipeline.resolve(scn)
        return pipeline.serving_load(r, pipeline.memory(r), search=False)
    cold, warm = run(0), run(8)
    assert cold["requests"] == 64 and warm["requests"] == 56
    # the cold start queues 8 prompts behind each other: it raises the mean TTFT
    assert warm["ttft_s"]["mean"] < cold["ttft_s"]["mean"]
    assert any("warm-up" in n for n in warm["notes"])


def _rows():
    with CSV.open(newline="", encoding="utf-8") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_nim_means_cannot_contain_a_cold_start():
    """NIM's closed loops (5000-token prompts, 500 outputs): N clients start together, and prompts that long
    are compute-bound, so the k-th of the N first prompts waits for k prefills however the engine batches
    them. With p the one-client TTFT less the front end (both measured / sourced: 406.77 ms, TensorRT-LLM's
    15.46 ms) and every later request paying at least the one-client TTFT, a run of R = 10 x N requests that
    includes the cold start has a mean TTFT of at least (N f + p N(N+1)/2 + (R - N)(p + f)) / R. At 25 and 50
    clients that bound (876 / 1365 ms) is above the published means (689 / 835 ms), so the rows' measurement
    excludes the first round; serve-load.csv says so with warmup_requests = clients, for every NIM row."""
    rows = _rows()
    one = float(rows["NV01"]["ttft_ms"])
    f = 40.10 - 24.64                       # TensorRT-LLM's front end (engine_host.py, PR 10156)
    p = one - f
    contradicted = []
    for rid, row in rows.items():
        if not rid.startswith("NV") or row["input_mean_tokens"] != rows["NV01"]["input_mean_tokens"]:
            continue
        n = int(row["clients"])
        r = int(row["requests"])
        bound = (n * f + p * n * (n + 1) / 2 + (r - n) * (p + f)) / r
        if bound > float(row["ttft_ms"]):
            contradicted.append(rid)
        assert int(row["warmup_requests"] or 0) == n, rid
    assert contradicted == ["NV03", "NV04"]
    assert (25 * f + p * 25 * 26 / 2 + 225 * one) / 250 == pytest.approx(876.0, abs=1.0)
