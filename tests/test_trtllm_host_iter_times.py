"""The published per-iteration host timings of TensorRT-LLM's PyTorch executor
(src/gpuplan/estimate/data/trtllm_host_iter_times.csv; docs/speed.md 3.31): each row's per-sequence figure is its
own published milliseconds over its own published batch, and the row engine_host.TRTLLM rests on is the constant
the code uses. Expected values are the PRs' numbers, typed here by hand."""
import csv
from pathlib import Path

import pytest

from gpuplan.estimate import engine_host

CSV = Path(engine_host.__file__).parent / "data" / "trtllm_host_iter_times.csv"


def _rows():
    with open(CSV, newline="") as f:
        return list(csv.DictReader(f))


def test_every_row_cites_a_source_and_a_date():
    rows = _rows()
    assert len(rows) == 7
    for r in rows:
        assert r["source_url"].startswith("https://github.com/NVIDIA/TensorRT-LLM/pull/")
        assert r["published"][:4] in ("2025", "2026")
        assert float(r["value_ms"]) > 0 and int(r["scheduled_seqs_per_rank"]) > 0


def test_per_sequence_figures_are_the_published_ms_over_the_published_batch():
    by = {(r["source"], r["model"], r["value_ms"]): r for r in _rows()}
    # PR 10273: 44.53 ms at 1536 running sequences a rank (Llama-3.2-1B), 45.11 ms (GPT-OSS-120B, C++ scheduler),
    # 46.02 ms (GPT-OSS-120B, the PR's Python scheduler)
    assert float(by["TensorRT-LLM PR 10273", "Llama-3.2-1B", "44.53"]["per_seq_us"]) == pytest.approx(44.53e3 / 1536, abs=0.005)
    assert float(by["TensorRT-LLM PR 10273", "GPT-OSS-120B", "45.11"]["per_seq_us"]) == pytest.approx(45.11e3 / 1536, abs=0.005)
    assert float(by["TensorRT-LLM PR 10273", "GPT-OSS-120B", "46.02"]["per_seq_us"]) == pytest.approx(46.02e3 / 1536, abs=0.005)
    # PR 11983: TorchSampler host overhead 13.8 ms at batch 1000 (L40S, logprobs=0)
    assert float(by["TensorRT-LLM PR 11983", "Llama-3.2-1B-Instruct", "13.8"]["per_seq_us"]) == pytest.approx(13.8)
    # PR 15920: median sampler latency 454.28 us at 64 requests (B300)
    assert float(by["TensorRT-LLM PR 15920", "not named", "0.45428"]["per_seq_us"]) == pytest.approx(454.28 / 64, abs=0.005)
    # rows that are a small batch's whole step or an exposed bubble carry no per-sequence figure
    assert by["TensorRT-LLM PR 3914", "not named", "5.061"]["per_seq_us"] == ""
    assert by["TensorRT-LLM PR 16564", "gpt-oss-120b-fp4", "8.8"]["per_seq_us"] == ""


def test_the_shipped_constant_is_the_pr10273_row():
    r = next(r for r in _rows() if r["source"] == "TensorRT-LLM PR 10273" and r["model"] == "Llama-3.2-1B")
    assert engine_host.TRTLLM_PR10273_STEP_S == pytest.approx(float(r["value_ms"]) * 1e-3)
    assert engine_host.TRTLLM_PR10273_SEQS == int(r["scheduled_seqs_per_rank"])
    assert r["gpu"] == "gb200" and engine_host.TRTLLM_PR10273_HOST == "grace"


def test_no_row_is_of_the_v1_0_executor_at_a_large_batch():
    # The gap docs/speed.md 3.20 names: no published host_step_time of the v1.0-era executor (the perf-overview
    # rows' build, mid-2025) at a batch where per-sequence work dominates. If one is added, price it (3.31).
    early = [r for r in _rows() if r["published"] < "2025-10-01"]
    assert all(int(r["scheduled_seqs_per_rank"]) < 100 for r in early)
