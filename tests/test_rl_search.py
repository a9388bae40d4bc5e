"""RL placement search and what-if (issue 20): candidates counted by hand, rejections with reasons, the
reference model's memory by hand arithmetic."""
from __future__ import annotations

import re

import pytest

from gpuplan.errors import InputError
from gpuplan.models import get_model
from gpuplan.search.rl_search import recommend_rl, rl_whatif

GRPO = "examples/grpo-7b-colocated.yaml"


def test_every_placement_of_8_gpus_is_a_plan_or_a_rejection():
    rec = recommend_rl(GRPO, steps=100)
    # colocated: rollout tp 1, 2, 4, 8 (4); split r = 1..7 with tp in {1,2,4,8} dividing r:
    # 1+2+1+3+1+2+1 = 11, each synchronous and one step off-policy (22): 26 in all
    assert len(rec.plans) + len(rec.rejections) == 26
    assert all(r.why for r in rec.rejections)


def test_one_training_gpu_cannot_hold_a_7b_full_fine_tune():
    # 7.6B parameters x (4 fp32 weight + 4 grad + 8 AdamW) bytes = 122 GB > one H100
    assert get_model("qwen2.5-7b").params_total * 16 > 80e9
    rec = recommend_rl(GRPO, steps=100)
    why = {r.what: r.why for r in rec.rejections}
    assert "does not fit" in why["split 7 rollout (tp=1) + 1 training, synchronous"]


def test_plans_are_cheapest_first_and_cost_the_requested_steps():
    rec = recommend_rl(GRPO, steps=1000, allow_async=False)
    costs = [p.usd_total for p in rec.plans]
    assert costs == sorted(costs)
    assert all(p.async_steps == 0 for p in rec.plans)
    p = rec.plans[0]
    assert p.usd_total == pytest.approx(p.usd_per_hour * p.step_time_s * 1000 / 3600)


def test_refuses_a_non_rl_scenario():
    with pytest.raises(InputError):
        recommend_rl("examples/dpo-full-8b.yaml")


def test_whatif_reference_costs_its_sharded_copy():
    rows = {r["change"]: r for r in rl_whatif(GRPO)}
    ref = rows["reference=off"]
    # the frozen reference: params x 2 bytes, sharded over 8 GPUs (zero 3); the peak carries the caching
    # allocator's 5 % reserve on top of allocated bytes (DESIGN §4 runtime overhead)
    assert ref["peak_change_bytes"] == pytest.approx(-get_model("qwen2.5-7b").params_total * 2 / 8 * 1.05, rel=1e-6)
    assert ref["step_time_change"] < 0


def test_whatif_bigger_group_and_longer_responses_cost_time():
    rows = {r["change"]: r for r in rl_whatif(GRPO)}
    assert rows["group_size=16"]["step_time_change"] > 0
    assert rows["group_size=4"]["step_time_change"] < 0
    longer = next(r for k, r in rows.items() if k.startswith("response length x2"))
    assert longer["step_time_change"] > 0


def test_whatif_longer_responses_double_the_cap_as_the_shorter_ones_halve_it():
    # the example: mean 600, max_new_tokens 1024; x2 scales the whole length distribution, cap included
    changes = [r["change"] for r in rl_whatif(GRPO)]
    assert "response length x2 (mean 1200, max 2048)" in changes
    assert "response length /2 (mean 300, max 512)" in changes


def test_the_answer_does_not_depend_on_the_placement_the_scenario_starts_from():
    # the two examples describe the same GRPO workload, one colocated (engine share 0.5), one split 4 + 4
    a = recommend_rl(GRPO, steps=100)
    b = recommend_rl("examples/grpo-7b-split.yaml", steps=100)
    assert [(p.label, round(p.step_time_s, 6)) for p in a.plans] == [(p.label, round(p.step_time_s, 6)) for p in b.plans]


def test_recommend_on_an_rl_scenario_runs_the_placement_search(capsys):
    """`gpuplan recommend` on a GRPO scenario answers with placements (before: the layout search built a
    one-GPU template and failed on the split example's rollout_gpus=4); the library call names the way."""
    from gpuplan.cli import main
    from gpuplan.search import recommend
    with pytest.raises(InputError) as err:
        recommend("examples/grpo-7b-split.yaml")
    assert err.value.what == "train.objective grpo" and "rl-plan" in err.value.fix
    assert main(["recommend", "examples/grpo-7b-split.yaml"]) == 0
    out = capsys.readouterr().out
    assert "RL placements" in out and "colocated on 8 GPUs" in out
    assert re.search(r"split \d rollout \(tp=\d\) \+ \d training", out)
    assert "does not fit" in out       # rejections with their reason
