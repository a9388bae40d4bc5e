"""Golden test: the memory engine against published measurements (validation/memory.csv).

Tolerances (stated once, not tuned per row):
* issue 4 target: median absolute relative error over all scored rows <= 10 %.
* per row, litgpt (both tables): 20 %. Every setting that matters is in the source's own script/yaml
  (dtype, LoRA targets/rank, optimizer, micro-batch, sequence length = longest sample or the yaml cap) and
  the number is max_memory_allocated, which the engine reports as peak - runtime_overhead.
* per row, torchtune: 30 %. The README tables do not give per-GPU settings, unpacked runs depend on the
  longest batch seen, and the 2024-04 numbers are averages over runs.
* OOM rows: the whole estimated peak must exceed the GPU's usable memory; M005 (ZeRO-1, 6.2B on 64 V100)
  must fit; ZeRO Figure 1 model states must match the paper's formula within 1 %.
* rule-of-thumb rows (LLaMA-Factory) are only loose bounds: within a factor of 2.
Rows that fail are engine findings, listed in docs/validation-memory.md. Known, explained gaps are
marked `xfail(strict=True)` in KNOWN_GAPS with the reason: the assertion still runs, a gap that closes
turns the test red until its entry is removed, and the tolerance itself never moves.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "validation"))
sys.path.insert(0, str(ROOT / "scripts"))

import memory_cases  # noqa: E402
import validate_memory as vm  # noqa: E402

ROW_TOLERANCE = {"litgpt-resource": 0.20, "litgpt-confighub": 0.20, "torchtune": 0.30}

_TT_PEAK = ("torchtune's 2024 README does not say which peak it quotes (README history names reserved, "
            "nvidia-smi and max_memory_allocated in turn, a95c6b931 / 10354ac54), and maintainers could not "
            "reproduce its 24.1 GB (pytorch/torchtune#961: 20.2 GB allocated, reserved similar, at 2048 tokens)")
KNOWN_GAPS = {
    "M013": "A6000 row is 14-18 GiB above the same recipe on a 4090: the run's settings differ from the recipe",
    "M015": "A6000 row is 14-18 GiB above the same recipe on a 4090: the run's settings differ from the recipe",
    "M019": "the README says batch 2 where the 405B QLoRA config says batch 1 (source inconsistency)",
    "M029": "QLoRA with every torchtune flag (compile, chunked loss, activation offloading) over-estimated by 37 %; "
             "the offload model keeps two layers on the GPU, the run apparently fewer",
    "M030": _TT_PEAK, "M032": _TT_PEAK, "M034": _TT_PEAK, "M036": _TT_PEAK,
    "M037": _TT_PEAK,
    "M076": "estimate falls 1-3 GB under the card; the caching allocator's reserve at this size is larger than 5 %",
    "M104": "estimate falls 1-3 GB under the card; the caching allocator's reserve at this size is larger than 5 %",
}


def _params(ids):
    return [pytest.param(i, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[i])) if i in KNOWN_GAPS else i
            for i in ids]


@pytest.fixture(scope="module")
def results():
    return {r.case.id: r for r in vm.run_all()}


CASES = memory_cases.build_cases()
SCORED_IDS = [c.id for c in CASES if c.skip is None and c.suspect is None and c.expect == "value"]
OOM_IDS = [c.id for c in CASES if c.skip is None and c.expect == "oom"]
FORMULA_IDS = [c.id for c in CASES if c.expect == "formula"]
FIT_IDS = [c.id for c in CASES if c.expect == "fit"]


def test_every_scoreable_row_has_a_cited_case():
    rows = memory_cases.load_rows()
    ids = {c.id for c in CASES}
    assert {r for r, v in rows.items() if v["kind"].startswith("measured")} <= ids
    for c in CASES:
        assert c.cites, c.id
        if c.skip is None:
            assert c.scenario is not None and c.gpu, c.id


def test_no_case_errors(results):
    errors = {k: r.error for k, r in results.items() if r.error}
    assert not errors


def test_median_relative_error_within_10_percent(results):
    errs = [abs(results[i].rel_error) for i in SCORED_IDS]
    assert len(errs) >= 60
    med = statistics.median(errs)
    assert med <= 0.10, f"median |error| {med:.1%} over {len(errs)} rows (issue 4 target 10 %)"


@pytest.mark.parametrize("rid", _params(SCORED_IDS))
def test_row_within_source_tolerance(results, rid):
    r = results[rid]
    tol = ROW_TOLERANCE[r.case.source]
    assert abs(r.rel_error) <= tol, (f"{rid}: estimate {r.estimate_bytes / 1e9:.2f} GB vs measured "
                                     f"{r.case.measured_bytes / 1e9:.2f} GB ({r.rel_error:+.1%}, tolerance {tol:.0%})")


@pytest.mark.parametrize("rid", _params(OOM_IDS))
def test_oom_rows_do_not_fit(results, rid):
    r = results[rid]
    assert r.peak_bytes > r.capacity_bytes, f"{rid}: estimated peak {r.peak_bytes / 1e9:.2f} GB fits in " \
                                            f"{r.capacity_bytes / 1e9:.2f} GB but the source ran out of memory"


@pytest.mark.parametrize("rid", FIT_IDS)
def test_fit_rows_fit(results, rid):
    r = results[rid]
    assert r.peak_bytes <= r.capacity_bytes


@pytest.mark.parametrize("rid", FORMULA_IDS)
def test_zero_model_states_match_paper_formula(results, rid):
    r = results[rid]
    formula = memory_cases.zero_formula_bytes(r.case)
    assert r.estimate_bytes == pytest.approx(formula, rel=0.01)
    # and the paper's printed (rounded) value for a ~7.5B model
    assert r.estimate_bytes == pytest.approx(r.case.measured_bytes, rel=0.05)


# LLaMA-Factory README rule of thumb (estimates, not measurements): loose bounds only.
RULES = [  # row, model, method, master weights, rule value GB
    ("M160", "llama-2-7b-hf", "full", True, 120),
    ("M164", "llama-2-7b-hf", "full", False, 60),
    ("M168", "llama-2-7b-hf", "lora", False, 16),
    ("M176", "llama-2-7b-hf", "qlora", False, 6),
    ("M171", "llama-2-70b-hf", "lora", False, 160),
    ("M179", "llama-2-70b-hf", "qlora", False, 48),
]


@pytest.mark.parametrize("rid,model,method,master,rule_gb", RULES)
def test_rule_of_thumb_rows_are_loose_bounds(rid, model, method, master, rule_gb):
    from gpuplan.estimate.memory import estimate_memory
    from gpuplan.models import get_model
    from gpuplan.scenario import scenario_from_dict
    scn = scenario_from_dict(dict(model=model, task="finetune", hardware=dict(gpu="h200", count=1),
                                  train=dict(method=method, master_weights=master, seq_len=512, micro_batch=1)))
    est = estimate_memory(scn, get_model(model), 10**13).peak_bytes_per_gpu / 1e9
    assert rule_gb / 2 <= est <= rule_gb * 2, f"{rid}: {est:.1f} GB vs rule of thumb {rule_gb} GB"
