"""Answers that read right (issue 19): units and labels that say what a number is."""
from __future__ import annotations

import pytest

from gpuplan.pipeline import evaluate
from gpuplan.report import performance_report
from gpuplan.scenario import scenario_from_dict


def _train(**parallel):
    return scenario_from_dict({"model": "llama-3.1-8b", "task": "train",
                               "hardware": {"gpu": "h100-sxm", "count": parallel.pop("count", 2)},
                               "parallel": parallel,
                               "train": {"seq_len": 2048, "micro_batch": 1, "global_batch": 8}})


def test_train_breakdown_is_per_step_throughout():
    # tp=2 on 2 GPUs: dp=1, no pipeline, no ZeRO: the only communication is TP's all-reduces, none of it
    # overlapped, so the exposed communication per step IS the TP time per step (8 micro-batches of it)
    est = evaluate(_train(tp=2))
    b = est.performance.breakdown
    assert est.performance.details["microbatches"] == 8
    assert b["comm_tp_s"] == pytest.approx(b["exposed_comm"], rel=1e-9)
    # and the parts of the step add up to the step
    parts = b["compute"] + b["exposed_comm"] + b["bubble"] + b["offload"] + b["optimizer"]
    assert parts == pytest.approx(est.performance.step_time_s, rel=1e-9)


def test_train_breakdown_header_says_per_step():
    text = performance_report(evaluate(_train(tp=2)).performance)
    assert "seconds per optimizer step" in text


# ---- memory: "to make it fit" lists alternatives, each with its own result ------------------------------

def _memory_json(argv, capsys):
    import json

    from gpuplan.cli import main
    rc = main(["memory", *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)["result"]


def test_70b_qlora_on_4090s_finds_four_gpus_with_zero3(capsys):
    rc, out = _memory_json(["examples/qlora-70b-single-gpu.yaml", "--gpu", "rtx-4090"], capsys)
    assert rc == 1 and not out["memory"]["fits"]
    more = [a for a in out["to_fit"] if "ZeRO-3" in a["change"]]
    assert more and more[0]["gpus"] == 4 and more[0]["fits"]
    # its own result, checked independently: the same scenario on 4 GPUs with ZeRO-3 fits, on 2 it does not
    from gpuplan.scenario import load_scenario
    scn = load_scenario("examples/qlora-70b-single-gpu.yaml")
    four = evaluate(scn.replace(hardware={"gpu": "rtx-4090", "count": 4}, parallel={"zero": 3, "dp": None}))
    two = evaluate(scn.replace(hardware={"gpu": "rtx-4090", "count": 2}, parallel={"zero": 3, "dp": None}))
    assert four.memory.fits and not two.memory.fits
    assert more[0]["peak_bytes_per_gpu"] == four.memory.peak_bytes_per_gpu


def test_each_alternative_is_evaluated_on_its_own(capsys):
    # 8B full fine-tune, seq 4096 x 4 on one A100: each alternative applied alone to the scenario as given
    argv = ["--model", "llama-3.1-8b", "--gpu", "a100-sxm-80gb", "--task", "finetune", "--seq-len", "4096",
            "--micro-batch", "4"]
    rc, out = _memory_json(argv, capsys)
    assert rc == 1 and out["to_fit"]
    base = scenario_from_dict({"model": "llama-3.1-8b", "task": "finetune", "hardware": {"gpu": "a100-sxm-80gb"},
                               "train": {"seq_len": 4096, "micro_batch": 4}})
    for alt in out["to_fit"]:
        assert alt["fits"] and alt["peak_bytes_per_gpu"] <= alt["capacity_bytes_per_gpu"]
    combined = [a for a in out["to_fit"] if " + " in a["change"]]
    for alt in combined:                    # "a + b" is both changes applied to the scenario as given
        update: dict = {}
        for part in alt["change"].split(" + "):
            key, value = part.split("=")
            section = "train" if key in ("recompute", "master_weights", "optimizer", "method") else "parallel"
            value = {"false": False, "true": True}.get(value, value)
            update.setdefault(section, {})[key] = value
        assert evaluate(base.replace(**update)).memory.peak_bytes_per_gpu == alt["peak_bytes_per_gpu"]


def test_memory_text_says_alternatives_not_steps(capsys):
    from gpuplan.cli import main
    main(["memory", "examples/qlora-70b-single-gpu.yaml", "--gpu", "rtx-4090"])
    out = capsys.readouterr().out
    assert "any one of these" in out and "4 x rtx-4090 with ZeRO-3" in out
    assert "do not fit it as configured" not in out and "not yet" not in out


# ---- $/M tokens: input, output and blended, labelled ---------------------------------------------------

def test_token_prices_by_hand():
    from gpuplan.report import token_prices
    # $0.54 per million output tokens; each request reads 2048 tokens and writes 512: input tokens flow 4x as
    # fast, so the same hour costs 0.54 / 4 per million input tokens and 0.54 / 5 per million of both
    p = token_prices(0.54, 2048, 512)
    assert p["output"] == 0.54
    assert p["input"] == pytest.approx(0.135)
    assert p["blended"] == pytest.approx(0.108)


def test_serving_cost_table_labels_input_output_blended(capsys):
    from gpuplan.cli import main
    main(["estimate", "examples/serve-llama-70b.yaml"])
    out = capsys.readouterr().out
    for label in ("per million output tokens", "per million input tokens", "input + output (blended)"):
        assert label in out
    assert "usd_per_million_tokens" not in out


def test_training_cost_table_says_trained_tokens(capsys):
    from gpuplan.cli import main
    main(["estimate", "--model", "qwen2.5-0.5b", "--gpu", "l4", "--tokens", "1e9"])
    assert "per million trained tokens" in capsys.readouterr().out


# ---- recommend: offerings and memory cells ----------------------------------------------------------------

@pytest.mark.parametrize("peak_gib,cap_gib,shown", [
    (21.6, 22.0, "21.6/22.0"), (21.96, 22.0, "21.96/22.00"), (21.999, 22.0, "<22.00/22.00"),
    (51.1, 79.6, "51.1/79.6"), (45.0, 24.0, "45.0/24.0"),
    # exactly full and fitting: only a capped elastic reserve gets there, which the table marks
    (22.0, 22.0, "22.0*/22.0")])
def test_memory_cell_never_reads_as_full_when_there_is_headroom(peak_gib, cap_gib, shown):
    from gpuplan.search.cli import memory_cell
    from gpuplan.units import GiB
    assert memory_cell(peak_gib * GiB, cap_gib * GiB) == shown


def test_recommend_explains_a_plan_at_exactly_its_capacity(capsys):
    from gpuplan.cli import main
    from gpuplan.search.cli import FULL_NOTE
    from pathlib import Path
    main(["recommend", str(Path(__file__).resolve().parents[1] / "examples" / "recommend-finetune-8b.yaml")])
    out = capsys.readouterr().out
    marked = [line for line in out.splitlines() if "*/" in line]
    assert marked and FULL_NOTE in out     # the bundled example ranks a V100 plan whose reserve is capped


def test_recommend_says_when_a_different_offering_prices_each_count(capsys):
    from gpuplan.cli import main
    main(["recommend", "examples/recommend-finetune-8b.yaml", "--gpus", "h100-sxm", "--top", "10"])
    out = capsys.readouterr().out
    assert "$/GPU-h" in out
    notes = [line for line in out.splitlines() if "price per GPU-hour differs" in line]
    # the catalog prices 2 x H100 and 8-GPU H100 instances differently per GPU: the note names both offerings
    assert len(notes) == 1 and notes[0].count("/GPU-h at") >= 2


def test_offering_note_only_when_prices_differ():
    from types import SimpleNamespace

    from gpuplan.search.cli import offering_notes

    def plan(count, usd_h, provider):
        rent = {"usd_per_hour": usd_h, "gpus_billed": count, "provider": provider, "instance_type": f"{count}x"}
        return SimpleNamespace(estimate={"cost": {"details": {"rent": rent}}},
                               scenario=SimpleNamespace(hardware=SimpleNamespace(gpu="h100-sxm", count=count)))
    assert offering_notes([plan(2, 2.58, "a"), plan(4, 5.16, "a")]) == []            # $1.29 both
    (note,) = offering_notes([plan(2, 2.58, "a"), plan(4, 7.48, "b")])
    assert "$1.29/GPU-h at 2 GPUs (a 2x)" in note and "$1.87/GPU-h at 4 GPUs (b 4x)" in note


# ---- engines' own terms ---------------------------------------------------------------------------------

def _serve_notes(engine: str, model: str = "deepseek-v2-lite") -> list[str]:
    est = evaluate(scenario_from_dict({"model": model, "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 2},
                                       "parallel": {"tp": 2}, "infer": {"engine": engine}}))
    return list(est.memory.notes)


def test_sglang_plan_speaks_sglang():
    notes = " ".join(_serve_notes("sglang"))
    assert "mem_fraction_static=0.9" in notes and "vLLM" not in notes and "gpu_memory_utilization=" not in notes


def test_vllm_plan_keeps_its_own_term():
    notes = " ".join(_serve_notes("vllm"))
    assert "gpu_memory_utilization=0.9" in notes and "mem_fraction_static" not in notes


# ---- --plot x.png without matplotlib: refused before any work ----------------------------------------------

@pytest.mark.parametrize("command", [["train", "--model", "qwen2.5-0.5b", "--gpu", "l4"],
                                     ["serve", "--model", "qwen2.5-0.5b", "--gpu", "l4", "--task", "infer"],
                                     ["recommend", "--model", "qwen2.5-0.5b", "--task", "infer", "--gpus", "l4"]])
def test_png_without_matplotlib_fails_before_the_report(command, tmp_path, monkeypatch, capsys):
    import sys

    from gpuplan.cli import main
    monkeypatch.setitem(sys.modules, "matplotlib", None)           # as if it were not installed
    rc = main([*command, "--plot", str(tmp_path / "x.png")])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""                                      # nothing printed before the error
    assert "matplotlib" in err and "pip install '.[plot]'" in err
    assert not (tmp_path / "x.png").exists()


# ---- hints name what a user has ------------------------------------------------------------------------------

def test_missing_extra_hint_is_the_checkout_command():
    from gpuplan.errors import MissingExtraError
    err = MissingExtraError("counting on the meta device", "trace", "torch and transformers")
    assert "pip install '.[trace]'" in err.fix and "pip install torch transformers" in err.fix
    assert "gpuplan[" not in err.message


def test_unknown_field_names_a_command_not_a_design_doc():
    from gpuplan.errors import InputError
    from gpuplan.scenario import scenario_from_dict as build
    with pytest.raises(InputError) as err:
        build({"model": "qwen2.5-0.5b", "hardware": {"gpu": "l4"}, "trian": {}})
    assert "DESIGN" not in err.value.message and "`gpuplan schema`" in err.value.message


def test_meta_hint_for_an_unknown_architecture_works(tmp_path, capsys):
    """The unsupported-architecture message points at `gpuplan model CONFIG --meta`: that command must then
    answer instead of failing with the same error."""
    import json

    from gpuplan.cli import main
    config = {"model_type": "bert", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 2, "intermediate_size": 128, "max_position_embeddings": 128}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    try:
        import transformers  # noqa: F401
    except ImportError:
        # without transformers the generic path is unavailable: the error names --meta and the extra
        assert main(["model", str(path)]) == 2
        err = capsys.readouterr().err
        assert "--meta" in err and "pip install '.[trace]'" in err and "gpuplan[" not in err
        pytest.skip("transformers is not installed")
    # with transformers an unknown family is read on the meta device (models/generic.py)
    assert main(["model", str(path)]) == 0
    assert "generic:bert" in capsys.readouterr().out
    assert main(["model", str(path), "--meta", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)["result"]["meta_device"]
    # by hand, BERT with this config (BertLMHeadModel: encoder + tied-decoder bias + prediction head):
    # embeddings: words 1000*64 + positions 128*64 + token types 2*64 + LayerNorm 2*64 = 72,448
    # per layer: QKV 3*(64*64+64) + out 64*64+64 + LN 128 + up 64*128+128 + down 128*64+64 + LN 128 = 33,472
    # head: transform 64*64+64 + LN 128 + decoder bias 1000 (decoder weight tied to the embeddings) = 5,288
    # (no pooler in the LM-head model)
    assert counts["parameters"] == 72_448 + 2 * 33_472 + 5_288


# ---- the Pareto chart has ticks on both axes, even over a narrow range ---------------------------------------

@pytest.mark.parametrize("lo,hi,expected", [
    (0.9, 120, [1, 2, 5, 10, 20, 50, 100]),            # 1-2-5 steps
    (4.2, 6.7, [4.2, 5, 6.7]),                         # one step inside: the ends too
    (95, 105, [95, 100, 105]),
    (1e-3, 1e6, [1e-3, 1e-2, 0.1, 1, 10, 100, 1e3, 1e4, 1e5, 1e6]),   # too many steps: decades
])
def test_log_ticks(lo, hi, expected):
    from gpuplan.plot import log_ticks
    assert log_ticks(lo, hi) == pytest.approx(expected)


def test_recommend_pareto_svg_has_x_ticks_over_a_narrow_cost_range():
    import xml.etree.ElementTree as ET

    from gpuplan.search.cli import pareto_svg
    pts = [(4.55, 6480.0, "2 x h100", True), (6.17, 198.0, "64 x h100", True), (6.83, 87840.0, "1 x 4090", False)]
    root = ET.fromstring(pareto_svg(pts, "usd_total", "time_to_train_s"))
    ns = "{http://www.w3.org/2000/svg}"
    x_ticks = [t.text for t in root.iter(f"{ns}text") if t.get("class") == "tick-x"]
    y_ticks = [t.text for t in root.iter(f"{ns}text") if t.get("class") == "tick-y"]
    assert len(x_ticks) >= 2 and len(y_ticks) >= 2
    assert "5" in x_ticks                  # the one 1-2-5 step between $4.55 and $6.83


def test_oom_says_how_much_is_not_pytorchs():
    """The H100 fragmentation message: 79.33 GiB total, 26.16 GiB free, PyTorch reserved 11.97 + 40.69 GiB, and
    'Process 76883 has 53.16 GiB' (this process). By hand: in use 53.17 GiB, of which 0.51 GiB is not PyTorch's
    (context and libraries), and only ~0.01 GiB belongs to other processes."""
    from pathlib import Path

    from gpuplan.local.oom import explain_oom
    from gpuplan.units import GiB
    text = (Path(__file__).parent / "fixtures" / "local" / "oom" / "new_fragmentation_h100.txt").read_text()
    e = explain_oom(text)
    assert e.not_pytorch_bytes == pytest.approx((79.33 - 26.16 - 11.97 - 40.69) * GiB, abs=0.01 * GiB)
    assert e.other_bytes < 0.02 * GiB
    rendered = e.render()
    assert "not PyTorch's" in rendered and "522.24 MiB" in rendered        # 0.51 GiB
    assert "Outside this process's PyTorch reserve" not in rendered
