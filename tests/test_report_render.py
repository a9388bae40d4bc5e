"""Plain-text report rendering: tables, every memory component, units in headers/values, cost and
performance tables. Inputs are hand-built results; expected strings are written out by hand."""
from __future__ import annotations

import json
from types import SimpleNamespace

from gpuplan.estimate.results import MEMORY_COMPONENTS, CostEstimate, MemoryEstimate, PerformanceEstimate
from gpuplan.report import bar, cost_report, dumps, estimate_report, gib, memory_report, performance_report, table

GiB = 2 ** 30

# 76 GiB peak on an 80 GiB card; shares of the peak written out by hand
COMPONENTS = {"weights": 16 * GiB, "gradients": 16 * GiB, "optimizer_states": 32 * GiB, "activations": 8 * GiB,
              "logits": 2 * GiB, "kv_cache": 1 * GiB, "temporary": GiB // 2, "runtime_overhead": GiB // 2}
PEAK = 76 * GiB


def _mem(peak=PEAK, cap=80 * GiB, components=None, **kw):
    return MemoryEstimate(peak_bytes_per_gpu=peak, capacity_bytes_per_gpu=cap,
                          components=dict(COMPONENTS if components is None else components), phase="backward", **kw)


def _row(text: str, first_cell: str) -> str:
    hits = [line for line in text.splitlines() if line.startswith(first_cell + " ")]
    assert len(hits) == 1, f"expected one row '{first_cell}' in:\n{text}"
    return hits[0]


# ----------------------------------------------------------------------------- table / helpers

def test_table_layout_by_hand():
    out = table([("a", 1), ("bbb", 22), ("cc", None)], ["name", "n"])
    assert out.splitlines() == ["name   n", "----  --", "a      1", "bbb   22", "cc     -"]


def test_table_left_align_and_no_trailing_spaces():
    out = table([("x", "y")], ["first", "second"], "ll")
    assert out.splitlines() == ["first  second", "-----  ------", "x      y"]
    assert all(line == line.rstrip() for line in out.splitlines())


def test_bar_and_gib_and_dumps():
    assert bar(0.5, 10) == "█████·····"
    assert bar(-1.0, 4) == "····"
    assert bar(1.5, 4) == "████ !"
    assert bar(1.0, 4) == "████"
    assert gib(3 * GiB) == "3.0"
    assert json.loads(dumps({"a": 1, "b": object.__name__})) == {"a": 1, "b": "object"}


# ----------------------------------------------------------------------------- memory

def test_memory_table_has_every_component_in_order_with_units():
    out = memory_report(_mem())
    lines = out.splitlines()
    assert lines[0].split() == ["component", "bytes", "share", "of", "capacity"]
    names = [line.split()[0] for line in lines[2:2 + len(MEMORY_COMPONENTS)]]
    assert names == list(MEMORY_COMPONENTS)
    for key, value in COMPONENTS.items():
        row = _row(out, key)
        assert f"{value / GiB:,.2f} GiB" in row
    assert "21.1 %" in _row(out, "weights")          # 16 / 76
    assert "42.1 %" in _row(out, "optimizer_states")  # 32 / 76
    assert "0.7 %" in _row(out, "temporary")          # 0.5 / 76 = 0.66 %
    peak = _row(out, "peak per GPU")
    assert "76.00 GiB" in peak and "100.0 %" in peak


def test_memory_bars_scale_with_capacity():
    out = memory_report(_mem())
    # 16 / 80 of a 24-wide bar = 4.8 -> 5 blocks; the peak 76 / 80 x 24 = 22.8 -> 23 blocks
    assert _row(out, "weights").endswith("█" * 5 + "·" * 19)
    assert _row(out, "peak per GPU").endswith("█" * 23 + "·")


def test_memory_verdict_fits_and_headroom():
    out = memory_report(_mem(), title="Memory")
    assert out.splitlines()[0] == "Memory"
    assert "Peak 76.00 GiB at backward; capacity 80.00 GiB: fits (headroom 4.00 GiB)." in out


def test_memory_verdict_does_not_fit():
    comps = {"weights": 60 * GiB, "activations": 30 * GiB}
    out = memory_report(_mem(peak=90 * GiB, components=comps))
    assert "capacity 80.00 GiB: does NOT fit (headroom -10.00 GiB)." in out
    assert _row(out, "peak per GPU").endswith("█" * 24 + " !")
    assert "66.7 %" in _row(out, "weights") and "33.3 %" in _row(out, "activations")


def test_memory_cpu_limits_and_notes():
    out = memory_report(_mem(cpu_bytes=12 * GiB, limits={"max_micro_batch": 4, "kv_tokens": 120000,
                                                          "kv_bytes": 2 * GiB, "max_seq_len": None},
                             notes=("offload on", "second note")))
    assert "Host (CPU) memory needed: 12.00 GiB." in out
    assert "Limits: max_micro_batch=4, kv_tokens=120.00k, kv_bytes=2.00 GiB, max_seq_len=-" in out
    assert "note: offload on" in out and "note: second note" in out


def test_memory_without_cpu_or_limits_prints_neither():
    out = memory_report(_mem())
    assert "Host (CPU)" not in out and "Limits:" not in out and "note:" not in out


# ----------------------------------------------------------------------------- performance

def test_performance_table_units_and_breakdown():
    perf = PerformanceEstimate(step_time_s=2.5, tokens_per_s_per_gpu=12500.0, mfu=0.4123, hfu=0.5,
                               time_to_train_s=3 * 86400.0, breakdown={"compute": 2.0, "communication": 0.5},
                               notes=("calibrated",))
    out = performance_report(perf)
    assert out.splitlines()[0].split() == ["metric", "value"]
    assert "2.50 s" in _row(out, "step_time_s")
    assert "12.50k" in _row(out, "tokens_per_s_per_gpu")
    assert "41.2 %" in _row(out, "mfu") and "50.0 %" in _row(out, "hfu")
    assert "3.0 days" in _row(out, "time_to_train_s")
    assert "ttft_s" not in out and "tpot_s" not in out       # serving metrics absent for training
    assert "time goes to" in out and "seconds" in out
    assert "2.00 s" in _row(out, "compute") and "500.0 ms" in _row(out, "communication")
    assert out.endswith("note: calibrated")


def test_performance_serving_metrics():
    perf = PerformanceEstimate(ttft_s=0.25, tpot_s=0.0004, output_tokens_per_s=2_500_000.0)
    out = performance_report(perf)
    assert "250.0 ms" in _row(out, "ttft_s")
    assert "400 µs" in _row(out, "tpot_s")
    assert "2.50M" in _row(out, "output_tokens_per_s")
    assert "time goes to" not in out


# ----------------------------------------------------------------------------- cost

def test_cost_table_dollars_and_missing_values():
    out = cost_report(CostEstimate(usd_per_hour=23.92, usd_total=1234567.891, usd_per_million_tokens=None,
                                   basis="on-demand, runpod"))
    lines = out.splitlines()
    assert lines[0].split() == ["cost", "USD"]
    assert _row(out, "usd_per_hour").endswith("$23.92")
    assert _row(out, "usd_total").endswith("$1,234,567.89")
    assert _row(out, "usd_per_million_tokens").endswith("-")
    assert lines[-1] == "basis: on-demand, runpod"


def test_cost_table_without_basis_has_no_basis_line():
    out = cost_report(CostEstimate(usd_per_hour=None))
    assert "basis:" not in out
    assert len(out.splitlines()) == 5          # header, rule, three rows


# ----------------------------------------------------------------------------- whole estimate

def test_estimate_report_joins_every_section():
    est = SimpleNamespace(
        scenario=SimpleNamespace(task="train", dp=2, hardware=SimpleNamespace(count=8),
                                 parallel=SimpleNamespace(tp=4, pp=1, zero=1, replicas=1)),
        model=SimpleNamespace(name="llama-3.1-8b", params_total=8.03e9),
        gpu=SimpleNamespace(id="h100-sxm"),
        memory=_mem(),
        performance=PerformanceEstimate(step_time_s=1.0),
        cost=CostEstimate(usd_per_hour=16.0, basis="user"),
        warnings=("tight memory",),
    )
    out = estimate_report(est)
    assert out.splitlines()[0] == ("llama-3.1-8b (8.03B params) · task train · 8x h100-sxm · "
                                   "dp=2 tp=4 pp=1 zero=1")
    for header in ("component", "metric", "cost"):
        assert any(line.split()[:1] == [header] for line in out.splitlines())
    assert "$16.00" in out and "basis: user" in out
    assert out.splitlines()[-1] == "warning: tight memory"
