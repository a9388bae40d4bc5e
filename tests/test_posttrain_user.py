"""Issue 20, "works for a real user": what an ML engineer new to gpuplan trips over when planning post-training
(DPO and relatives, GRPO/PPO), each pinned by a test that failed before its fix."""
from __future__ import annotations

import re

import pytest

from gpuplan.errors import UnsupportedError
from gpuplan.launch import launch_files
from gpuplan.launch._common import ENGINE_OBJECTIVES, objective_engines
from gpuplan.scenario import load_scenario, scenario_from_dict

_DPO = {"model": "qwen2.5-0.5b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1},
        "train": {"objective": "dpo", "method": "lora", "seq_len": 1024, "micro_batch": 2, "global_batch": 16}}


def _named_engines(message: str) -> list[str]:
    m = re.search(r"use an engine that can: ([^.]*)\.|Engines that can: ([^.]*)\.", message)
    return [] if m is None else [e.strip() for e in (m.group(1) or m.group(2)).split(",")]


# ---- launch: an engine must not write a supervised script for a post-training objective ---------------------

@pytest.mark.parametrize("engine", ["hf", "torchrun", "deepspeed", "megatron", "slurm"])
@pytest.mark.parametrize("objective", ["dpo", "grpo"])
def test_supervised_engines_refuse_a_post_training_objective(engine, objective):
    # before: `gpuplan launch grpo.yaml --engine hf` wrote train_hf.py (HF Trainer, next-token loss) with the GRPO
    # estimate in its header: a user would have run SFT believing it was GRPO
    scn = load_scenario("examples/grpo-7b-colocated.yaml") if objective == "grpo" else scenario_from_dict(_DPO)
    with pytest.raises(UnsupportedError) as err:
        launch_files(scn, engine)
    text = str(err.value)
    assert f"train.objective '{objective}'" in text
    named = _named_engines(text)
    assert named and all(objective in ENGINE_OBJECTIVES[e] for e in named)


def test_engine_objective_table_matches_the_launchers():
    # the table the refusals read is the launchers' own vocabulary (verl/openrlhf estimators, LLaMA-Factory stages,
    # Axolotl's rl types), so a refusal never names an engine that would refuse the same objective
    from gpuplan.launch import axolotl, llamafactory, openrlhf, verl
    assert set(ENGINE_OBJECTIVES["verl"]) == set(verl._ESTIMATOR)
    assert set(ENGINE_OBJECTIVES["openrlhf"]) == set(openrlhf._ESTIMATOR)
    assert set(ENGINE_OBJECTIVES["llama-factory"]) == set(llamafactory._STAGE)
    assert set(ENGINE_OBJECTIVES["axolotl"]) == {"sft", *axolotl._RL}
    assert objective_engines("grpo") == ("trl", "verl", "openrlhf")
    assert objective_engines("distill") == ()


@pytest.mark.parametrize("engine", ["axolotl", "llama-factory", "unsloth", "mlx-lm"])
def test_objective_refusal_names_only_engines_that_run_it(engine):
    # before: unsloth and mlx-lm answered GRPO with "use an engine that can: trl, llama-factory, axolotl", two of
    # which refuse GRPO; axolotl and llama-factory left out openrlhf
    scn = load_scenario("examples/grpo-7b-colocated.yaml")
    with pytest.raises(UnsupportedError) as err:
        launch_files(scn, engine)
    assert _named_engines(str(err.value)) == ["trl", "verl", "openrlhf"]


def test_trl_sharding_refusal_names_the_rl_engines_that_shard():
    # the bundled GRPO example uses zero 3; TRL's launch is DDP only. before: "set parallel to dp only", no engine
    with pytest.raises(UnsupportedError) as err:
        launch_files(load_scenario("examples/grpo-7b-colocated.yaml"), "trl")
    assert _named_engines(str(err.value)) == ["verl", "openrlhf"]
    files = launch_files(load_scenario("examples/grpo-7b-colocated.yaml"), "verl")
    assert files


# ---- the training objective written at the top level -----------------------------------------------------------

@pytest.mark.parametrize("name", ["dpo", "grpo", "orpo"])
def test_top_level_training_objective_is_refused_with_its_place(name):
    # before: `objective: dpo` at the top level (the ranking objective's field) passed the schema unchecked and the
    # estimate priced SFT without a word
    from gpuplan.errors import InputError
    data = {"model": "llama-3.1-8b", "task": "finetune", "objective": name, "hardware": {"gpu": "h100-sxm"},
            "train": {"method": "lora"}}
    with pytest.raises(InputError, match="train.objective"):
        scenario_from_dict(data)


def test_recommend_objective_flag_with_a_training_objective_says_where_it_goes():
    from gpuplan.errors import InputError
    from gpuplan.search.rank import parse_objective
    with pytest.raises(InputError, match="train.objective"):
        parse_objective("grpo")
    assert parse_objective("cheapest") == ("cheapest", {})


# ---- a field at the wrong nesting level ---------------------------------------------------------------------------

@pytest.mark.parametrize("data, where", [
    ({"train": {"objective": "grpo"}, "rl": {"group_size": 8}}, "train.rl"),                 # rl block at the top
    ({"train": {"objective": "grpo"}, "hardware": {"rl": {"group_size": 8}}}, "train.rl"),    # under hardware
    ({"train": {"objective": "grpo", "group_size": 8}}, "train.rl.group_size"),               # rl field under train
])
def test_misplaced_field_names_where_it_belongs(data, where):
    # before: "'rl' is not a scenario field (check the spelling)" for a correctly spelled key one level off, and
    # close matches such as "optimizer, compile" for train.group_size
    from gpuplan.errors import InputError
    base = {"model": "qwen2.5-7b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 8}}
    merged = {**base, **data, "hardware": {**base["hardware"], **data.get("hardware", {})}}
    with pytest.raises(InputError) as err:
        scenario_from_dict(merged)
    text = str(err.value)
    assert f"belongs at {where}" in text and "check the spelling" not in text
    assert "optimizer" not in text


def test_misspelled_field_still_gets_close_matches():
    from gpuplan.errors import InputError
    with pytest.raises(InputError) as err:
        scenario_from_dict({"model": "qwen2.5-7b", "task": "finetune", "hardware": {"gpu": "h100-sxm"},
                            "train": {"seqlen": 512}})
    assert "check the spelling" in str(err.value) and "seq_len" in str(err.value)


# ---- "what fits" for an RL scenario -----------------------------------------------------------------------------

def test_rl_fit_limits_name_the_generated_length_not_the_unread_seq_len():
    # before: `gpuplan memory examples/grpo-7b-colocated.yaml` printed "max_seq_len = 131,072": train.seq_len is
    # not read by an RL step (its sequences are rl.prompt_len + the response), so that was the search's upper bound
    from gpuplan.estimate.fit import fit_limits
    from gpuplan.pipeline import evaluate
    scn = load_scenario("examples/grpo-7b-colocated.yaml")
    a, b = evaluate(scn.replace(train={"seq_len": 512})), evaluate(scn.replace(train={"seq_len": 65536}))
    assert a.memory.peak_bytes_per_gpu == b.memory.peak_bytes_per_gpu      # seq_len is not an RL knob
    est = evaluate(scn)
    limits = fit_limits(est.scenario, est.model, est.gpu.usable_memory_bytes)
    assert "max_seq_len" not in limits
    n = limits["max_new_tokens"]
    assert n is not None and scn.train.rl.max_new_tokens <= n < est.model.max_position - scn.train.rl.prompt_len

    def peak(m):
        rl = {**scn.train.rl.model_dump(exclude_unset=True), "max_new_tokens": m}
        return evaluate(scn.replace(train={"rl": rl}))
    assert peak(n).memory.fits and not peak(2 * n).memory.fits


# ---- an RL scenario without its rl block; a sequence past the context -----------------------------------------

def test_rl_without_rl_block_says_it_priced_the_defaults():
    # before: objective grpo with no train.rl was priced on 64 prompts x 8 x 1,024 new tokens without a word
    from gpuplan.pipeline import evaluate
    bare = {"model": "qwen2.5-0.5b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 8},
            "parallel": {"zero": 3}, "train": {"objective": "grpo"}}
    said = [w for w in evaluate(bare).warnings if "train.rl is not given" in w]
    assert len(said) == 1 and "64 prompts x group 8" in said[0] and "max_new_tokens 1024" in said[0]
    given = {**bare, "train": {"objective": "grpo", "rl": {"group_size": 4}}}
    assert not [w for w in evaluate(given).warnings if "train.rl is not given" in w]


def test_rl_sequence_past_the_context_names_the_longest_max_new_tokens():
    from gpuplan.pipeline import evaluate
    scn = {"model": "qwen2.5-0.5b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 8},
           "parallel": {"zero": 3}, "train": {"objective": "grpo", "rl": {
               "prompt_len": 30000, "max_new_tokens": 8000, "mean_response_len": 600}}}
    said = [w for w in evaluate(scn).warnings if "exceeds" in w]
    # Qwen2.5-0.5B's config: max_position_embeddings 32,768 -> at most 32,768 - 30,000 = 2,768 new tokens
    assert said and "set rl.max_new_tokens <= 2,768" in said[0]


# ---- whatif / "to make it fit" for an RL step --------------------------------------------------------------------

def test_rl_whatif_offers_the_rollout_knobs_not_seq_len():
    # before: `gpuplan whatif` on a GRPO scenario listed "seq_len=1024 ... saves 0.0 GiB" (an RL step does not read
    # train.seq_len) and none of the RL step's own knobs
    from gpuplan.pipeline import evaluate
    from gpuplan.techniques import techniques_for
    scn = load_scenario("examples/grpo-7b-colocated.yaml")
    by_name = {t.name: t for t in techniques_for(scn)}
    assert not [n for n in by_name if n.startswith("seq_len")]
    assert {"rl.offload_train_states=true", "rl.gpu_memory_utilization=0.4", "rl.max_new_tokens=512"} <= set(by_name)
    base = evaluate(scn).memory.phases["rollout"]
    # each applies to the scenario as given (the rl block is kept whole: Scenario.replace merges one level)
    cut = scn.replace(**by_name["rl.max_new_tokens=512"].changes).train.rl
    assert (cut.max_new_tokens, cut.mean_response_len, cut.group_size) == (512, 512, 8)
    off = evaluate(scn.replace(**by_name["rl.offload_train_states=true"].changes)).memory.phases["rollout"]
    low = evaluate(scn.replace(**by_name["rl.gpu_memory_utilization=0.4"].changes)).memory.phases["rollout"]
    assert off < base and low < base


# ---- recommend / compare for an RL job ---------------------------------------------------------------------------

def test_recommend_on_rl_refuses_flags_it_would_not_apply(capsys):
    # before: `gpuplan recommend grpo.yaml --gpus h100-sxm,l40s --budget 500 --deadline 1` printed placements on the
    # file's H100s alone, cheapest for 1,000 steps, with the GPU list, budget and deadline silently dropped
    from gpuplan.cli import main
    code = main(["recommend", "examples/grpo-7b-colocated.yaml", "--gpus", "h100-sxm,l40s", "--budget", "500",
                 "--deadline", "1", "--json"])
    import json
    err = json.loads(capsys.readouterr().out)["error"]
    assert code == 2 and "--gpus" in err["what"] and "--budget" in err["what"] and "--deadline" in err["what"]
    assert "gpuplan compare" in err["fix"]
    assert main(["recommend", "examples/grpo-7b-colocated.yaml", "--top", "2", "--json"]) == 0


def test_recommend_on_rl_without_a_gpu_does_not_send_the_user_back_to_recommend(capsys, tmp_path):
    # before: "names no GPU ... or let `gpuplan recommend` choose the GPUs" - printed by gpuplan recommend itself
    import json

    from gpuplan.cli import main
    f = tmp_path / "grpo.yaml"
    f.write_text("model: qwen2.5-0.5b\ntask: finetune\ntrain: {objective: grpo}\n")
    assert main(["recommend", str(f), "--json"]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert "let `gpuplan recommend`" not in err["fix"] and "gpuplan compare" in err["fix"]


def test_compare_on_rl_prices_each_gpus_cheapest_placement(capsys):
    # before: `gpuplan compare grpo.yaml --gpus ...` refused every RL scenario ("the layout search does not
    # enumerate" placements), so GPU types could not be weighed for GRPO at all
    import json

    from gpuplan.cli import main
    from gpuplan.search.rl_search import recommend_rl
    assert main(["compare", "examples/grpo-7b-colocated.yaml", "--gpus", "h100-sxm,a100-sxm-80gb", "--steps", "200",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["result"]["rows"]
    assert [r["gpu"] for r in rows] == ["h100-sxm", "a100-sxm-80gb"]
    scn = load_scenario("examples/grpo-7b-colocated.yaml")
    for r in rows:       # the same answer as rl-plan's search on that GPU
        best = recommend_rl(scn.replace(hardware={"gpu": r["gpu"]}), steps=200).plans[0]
        assert r["fits"] and r["plan"] == best.label and r["usd_total"] == pytest.approx(best.usd_total)
        assert r["usd_total"] == pytest.approx(r["usd_per_hour"] * r["step_time_s"] * 200 / 3600)


def test_estimate_of_a_plan_that_does_not_fit_says_so_under_its_cost(capsys):
    # before: `gpuplan estimate` of a KTO step that needs 89 GiB on a 45 GiB L40S ended with its step time and $ per
    # million tokens and no word on where to go from there
    from gpuplan.cli import main
    scn = "examples/dpo-lora-8b.yaml"
    assert main(["estimate", scn, "--gpu", "l40s", "--micro-batch", "8"]) == 1
    out = capsys.readouterr().out
    assert "Does NOT fit: the time and cost above" in out and "`gpuplan memory`" in out
    assert main(["estimate", scn]) == 0
    assert "Does NOT fit" not in capsys.readouterr().out


def test_training_objective_can_be_set_from_the_command_line(capsys):
    # before: no flag set train.objective (`--objective` is recommend's ranking), so a quick
    # `gpuplan memory --model ... --method qlora` could only answer for SFT
    import json

    from gpuplan.cli import main
    args = ["memory", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--task", "finetune", "--method", "qlora",
            "--recompute", "full", "--json"]
    main(args)
    sft = json.loads(capsys.readouterr().out)["result"]["memory"]["peak_bytes_per_gpu"]
    main(args + ["--train-objective", "dpo"])
    dpo = json.loads(capsys.readouterr().out)["result"]["memory"]
    assert dpo["peak_bytes_per_gpu"] > sft and any("dpo" in n for n in dpo["notes"])


def _grpo_8b_a100_40(tmp_path):
    f = tmp_path / "grpo-a100-40.yaml"
    f.write_text("model: llama-3.1-8b\ntask: finetune\nhardware: {gpu: a100-sxm-40gb, count: 8}\nparallel: {zero: 3}\n"
                 "train:\n  objective: grpo\n  micro_batch: 4\n  rl: {prompts_per_step: 64, group_size: 8, "
                 "prompt_len: 1024, max_new_tokens: 4096, mean_response_len: 2000, gpu_memory_utilization: 0.6}\n")
    return str(f)


def test_rl_plan_with_no_fitting_placement_says_what_to_change(capsys, tmp_path):
    # before: Llama-3.1-8B GRPO (4,096 new tokens, micro_batch 4) on 8 A100-40GB listed 26 rejections ("183.0 GiB
    # on every GPU in phase backward > 40.0 GiB") and stopped: the phase was named, no change was
    import json

    from gpuplan.cli import main
    f = _grpo_8b_a100_40(tmp_path)
    assert main(["rl-plan", f]) == 1
    out = capsys.readouterr().out
    assert "phase backward" in out and "No placement fits" in out and "To make it fit" in out
    assert "`gpuplan recommend` searches GPUs" not in out and "gpuplan compare" in out
    assert main(["rl-plan", f, "--json"]) == 1
    res = json.loads(capsys.readouterr().out)["result"]
    assert res["plans"] == [] and res["to_fit"] and all(a["fits"] for a in res["to_fit"] if "+" not in a["change"])
    from gpuplan.pipeline import evaluate
    from gpuplan.scenario import load_scenario
    first = res["to_fit"][0]
    assert first["fits"] and first["peak_bytes_per_gpu"] <= evaluate(load_scenario(f)).memory.capacity_bytes_per_gpu


def _pref(objective, **train):
    return scenario_from_dict({**_DPO, "train": {**_DPO["train"], "objective": objective, **train}})


@pytest.mark.parametrize("name", ["grpo-z3", "grpo-split", "grpo-qlora", "dpo-full-z3", "dpo-qlora", "kto"])
def test_an_engine_a_refusal_names_does_not_refuse_for_the_same_reason(name):
    # before: verl and OpenRLHF answered GRPO with QLoRA "use an engine that can: trl", whose launcher refuses QLoRA
    # too; verl's split refusal named TRL but not OpenRLHF, which writes the split placement
    from gpuplan.errors import GpuplanError
    from gpuplan.launch import TRAIN_ENGINES
    grpo = load_scenario("examples/grpo-7b-colocated.yaml")
    scn = {"grpo-z3": grpo, "grpo-split": load_scenario("examples/grpo-7b-split.yaml"),
           "grpo-qlora": grpo.replace(train={"method": "qlora"}), "dpo-full-z3": load_scenario("examples/dpo-full-8b.yaml"),
           "dpo-qlora": _pref("dpo", method="qlora"), "kto": _pref("kto")}[name]

    def refusal(engine):
        try:
            launch_files(scn, engine)
        except GpuplanError as err:
            return err
        return None
    for engine in TRAIN_ENGINES:
        err = refusal(engine)
        if err is None:
            continue
        for other in _named_engines(str(err)):
            again = refusal(other)
            assert again is None or again.what.split(": ", 1)[-1] != err.what.split(": ", 1)[-1], (engine, other)
    if name == "grpo-split":
        assert "openrlhf" in _named_engines(str(refusal("verl"))) and refusal("openrlhf") is None
    if name == "grpo-qlora":
        assert all(_named_engines(str(refusal(e))) == [] for e in ("trl", "verl", "openrlhf"))


# ---- RL settings that contradict each other name the fix --------------------------------------------------------

@pytest.mark.parametrize("rl, parallel, needles", [
    ({"placement": "split", "rollout_gpus": 3, "rollout_tp": 2}, {"zero": 3},
     ["set rollout_gpus to a multiple of 2", "rollout_tp to one of 1, 3"]),
    ({"rollout_tp": 3}, {"zero": 3}, ["set rollout_tp to one of 1, 2, 4, 8"]),
    ({"placement": "split", "rollout_gpus": 3}, {"zero": 3, "tp": 2}, ["8 - rollout_gpus 3", "set rollout_gpus"]),
    ({"mean_response_len": 2000}, {"zero": 3}, ["raise max_new_tokens to at least 2000"]),
])
def test_contradictory_rl_settings_say_what_to_set(rl, parallel, needles):
    # before: "train.rl.rollout_tp = 2 does not divide the 3 rollout GPUs", "mean_response_len = 2000 exceeds
    # max_new_tokens = 1024": the contradiction, not the way out
    from gpuplan.errors import InputError
    data = {"model": "qwen2.5-7b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 8},
            "parallel": parallel, "train": {"objective": "grpo", "rl": rl}}
    with pytest.raises(InputError) as err:
        scenario_from_dict(data)
    for needle in needles:
        assert needle in str(err.value)


def test_plan_line_of_an_rl_step_shows_its_lengths_not_seq_len():
    # before: `gpuplan explain grpo.yaml memory.peak` / `gpuplan train` headed the answer "seq 2048" (train.seq_len,
    # which an RL step does not read) and did not name the objective
    from gpuplan.explain import describe
    from gpuplan.pipeline import evaluate
    line = describe(evaluate(load_scenario("examples/grpo-7b-colocated.yaml")))
    assert "seq 2048" not in line and "grpo" in line
    assert "64 prompts x 8, prompt 512 + up to 1024 new tokens" in line
    assert "dpo, lora" in describe(evaluate(load_scenario("examples/dpo-lora-8b.yaml")))


def test_memory_without_a_gpu_for_rl_explains_its_wide_ranges(capsys):
    # before: "... seq 2048 ..." and "The peak differs a little between GPUs (runtime overheads)" under ranges such as
    # "164.40 GiB - 306.42 GiB" (the colocated engine takes a share of each GPU), and it sent the user to recommend
    from gpuplan.cli import main
    assert main(["memory", "--model", "qwen2.5-0.5b", "--task", "finetune", "--train-objective", "grpo"]) == 0
    out = capsys.readouterr().out
    assert "seq 2048" not in out and "differs a little" not in out
    assert "gpu_memory_utilization = 0.5 of each GPU" in out and "gpuplan compare" in out


def test_off_policy_placements_say_they_change_the_algorithm(capsys):
    # before: rl-plan and recommend ranked "split 2 rollout + 6 training, 1 step off-policy" first with nothing
    # saying that training on the previous weights' responses is another algorithm, not only another time
    import json

    from gpuplan.cli import main
    assert main(["rl-plan", "examples/grpo-7b-colocated.yaml", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "1 step off-policy" in out and "a change to the algorithm" in out and "--sync-only" in out
    assert main(["compare", "examples/grpo-7b-colocated.yaml", "--gpus", "h100-sxm", "--sync-only", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["result"]["rows"]
    assert rows[0]["fits"] and "off-policy" not in rows[0]["plan"]


def test_rl_block_without_an_objective_says_the_objective_defaulted():
    # before: "train.rl is set but train.objective is sft" for a file that never wrote an objective
    from gpuplan.errors import InputError
    base = {"model": "qwen2.5-7b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 8}}
    with pytest.raises(InputError) as err:
        scenario_from_dict({**base, "train": {"rl": {"group_size": 4}}})
    assert "no objective was given" in str(err.value) and "set train.objective: grpo" in str(err.value)
    with pytest.raises(InputError) as err:
        scenario_from_dict({**base, "train": {"objective": "dpo", "rl": {"group_size": 4}}})
    assert "no objective was given" not in str(err.value) and "remove train.rl" in str(err.value)


def test_whatif_of_full_dpo_offers_a_precomputed_reference():
    # before: whatif / "to make it fit" for a full-parameter DPO never offered dropping the frozen reference copy
    # (TRL precompute_ref_log_probs), the one memory knob specific to DPO
    from gpuplan.pipeline import evaluate
    from gpuplan.techniques import techniques_for
    scn = load_scenario("examples/dpo-full-8b.yaml")
    tech = {t.name: t for t in techniques_for(scn)}["reference=precomputed"]
    a, b = evaluate(scn).memory, evaluate(scn.replace(**tech.changes)).memory
    # Llama 3.1 8B: 8,030,261,248 parameters x 4 bytes (fp32 copy beside fp32 master weights) / 8 FSDP shards
    assert a.components["weights"] - b.components["weights"] == 8_030_261_248 * 4 // 8
    assert "reference=precomputed" not in {t.name for t in techniques_for(load_scenario("examples/dpo-lora-8b.yaml"))}


def test_launch_fit_fix_names_a_change_the_engine_writes(tmp_path):
    # before: `gpuplan launch grpo-qwen3-30b-a3b.yaml --engine verl` (94.9 GiB of 79.6) answered "it fits with
    # master_weights=false" - verl's FSDP actor keeps fp32 parameters, and the verl files ignored the field
    import argparse

    from gpuplan.launch.cli import fit_fix
    from gpuplan.pipeline import evaluate
    scn = scenario_from_dict({"model": "qwen3-30b-a3b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 8},
                              "parallel": {"zero": 3}, "train": {"objective": "grpo", "micro_batch": 2,
                              "recompute": "full", "rl": {"max_new_tokens": 2048, "mean_response_len": 1000,
                                                           "rollout_tp": 2}}})
    mem = evaluate(scn).memory
    assert not mem.fits
    for engine in ("verl", "openrlhf"):
        fix = fit_fix(scn, mem.to_json(), engine)
        change = fix.removeprefix("it fits with ").split(",")[0].split(" ")[0]
        assert "master_weights" not in change and "adamw-8bit" not in change, (engine, fix)
        from gpuplan.techniques import techniques_for
        tech = {t.name: t for t in techniques_for(scn)}[change]
        fixed = scn.replace(**tech.changes)
        assert evaluate(fixed).memory.fits and launch_files(fixed, engine)


@pytest.mark.parametrize("engine, change, what", [
    ("verl", {"master_weights": False}, "train.master_weights false"),
    ("openrlhf", {"master_weights": False}, "train.master_weights false"),
    ("openrlhf", {"optimizer": "adamw-8bit"}, "train.optimizer 'adamw-8bit'"),
])
def test_rl_engines_refuse_settings_their_files_would_ignore(engine, change, what):
    # before: verl and OpenRLHF wrote fp32-master AdamW runs under an estimate of 16-bit states or 8-bit AdamW
    scn = load_scenario("examples/grpo-7b-colocated.yaml").replace(train=change)
    with pytest.raises(UnsupportedError, match=re.escape(what)):
        launch_files(scn, engine)


def test_web_recommend_with_no_fitting_placement_gives_the_same_to_fit(capsys, tmp_path):
    # one pipeline: POST /api/recommend on the same scenario carries the CLI's `to_fit` list (rl_search.to_fit)
    import json

    import yaml
    from fastapi.testclient import TestClient

    from gpuplan.cli import main
    from gpuplan.web import create_app
    f = _grpo_8b_a100_40(tmp_path)
    assert main(["recommend", f, "--json"]) == 1
    cli = json.loads(capsys.readouterr().out)["result"]
    with TestClient(create_app(isolation="thread")) as c:
        web = c.post("/api/recommend", json={"scenario": yaml.safe_load(open(f, encoding="utf-8"))})
    assert web.status_code == 200 and cli["plans"] == [] and cli["to_fit"]
    assert web.json()["to_fit"] == cli["to_fit"]
