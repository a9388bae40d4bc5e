"""Exit codes and data safety of the CLI (issue 16): 0 ok, 1 "no plan / does not fit", 2 bad input or
environment, 3 only for bugs, 130 Ctrl-C; the --json envelope (DESIGN §3.2); launch --out and --plot
never overwrite a changed file unless asked; every plan-evaluating command goes through the pipeline."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import gpuplan
from gpuplan import pipeline
from gpuplan.cli import build_parser, main

from conftest import ROOT

SRC = ROOT / "src" / "gpuplan"
FITS_8B = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--task", "infer"]
TOO_BIG = ["--model", "llama-3.1-70b", "--gpu", "rtx-4090", "--task", "train"]


def run(args, capsys):
    rc = main(args)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def one_paragraph(err: str) -> bool:
    return err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err


# ---- the crashes of issue 16 --------------------------------------------------------------------

def test_gpus_without_filter_lists_tpu_and_apple_rows(capsys):
    rc, out, err = run(["gpus"], capsys)
    assert rc == 0 and err == ""
    tpu = next(line for line in out.splitlines() if line.startswith("tpu-v5e "))
    assert tpu.split()[-1] == "-"              # the catalog has no TDP for it: shown as '-', not a crash
    assert any(line.startswith("m4-max ") for line in out.splitlines())


@pytest.mark.parametrize("value", ["1e400", "inf", "-inf", "nan", "1.5", "0", "-1", "1e9", "9" * 400, "eight", ""])
def test_count_refused_with_flag_and_range(value, capsys):
    rc, out, err = run(["estimate", *FITS_8B, f"--count={value}"], capsys)
    assert rc == 2 and one_paragraph(err)
    assert "--count" in err and "1 to 1,048,576" in err


def test_count_in_exponent_form_is_a_whole_number(capsys):
    rc, out, _ = run(["memory", *FITS_8B, "--count", "2e0", "--json"], capsys)
    assert rc == 0 and json.loads(out)["result"]["memory"]["fits"] is True


def test_seq_len_with_400_digits_refused(capsys):
    rc, _, err = run(["memory", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--seq-len", "9" * 400], capsys)
    assert rc == 2 and one_paragraph(err) and "--seq-len" in err and "..." in err   # the input is not echoed in full


def test_recommend_micro_batch_zero_is_bad_input_not_a_bug(capsys):
    rc, _, err = run(["recommend", "--model", "llama-3.1-8b", "--task", "finetune", "--micro-batch", "0",
                      "--gpus", "h100-sxm"], capsys)
    assert rc == 2 and one_paragraph(err) and "--micro-batch" in err


@pytest.mark.parametrize("flag, value, shown", [("--top", "0", "1 to 1,000"), ("--top", "-3", "1 to 1,000"),
                                                ("--headroom", "2", "[0, 1)"), ("--headroom", "1", "[0, 1)"),
                                                ("--headroom", "nan", "[0, 1)"), ("--budget", "-5", "(0, "),
                                                ("--deadline", "inf", "(0, "), ("--max-gpus", "0", "1 to ")])
def test_recommend_ranges(flag, value, shown, capsys):
    rc, _, err = run(["recommend", "--model", "llama-3.1-8b", "--task", "finetune", "--gpus", "h100-sxm",
                      flag, value], capsys)
    assert rc == 2 and one_paragraph(err) and flag in err and shown in err


def test_owned_count_refused(capsys):
    rc, _, err = run(["recommend", "--model", "llama-3.1-8b", "--task", "finetune", "--owned", "h100-sxm=1e400"],
                     capsys)
    assert rc == 2 and one_paragraph(err) and "--owned" in err


def test_unknown_flag_has_close_matches(capsys):
    rc, _, err = run(["estimate", *FITS_8B, "--cont", "2"], capsys)
    assert rc == 2 and one_paragraph(err) and "--count" in err


def test_unknown_flag_close_matches_are_flags_of_that_command(capsys):
    # --speculative and --slo-percentile belong to `serve`: suggesting them for `estimate` leads to a second error
    rc, out, err = run(["estimate", *FITS_8B, "--objective", "dpo", "--json"], capsys)
    error = json.loads(out)["error"]
    accepted = set(build_parser("estimate")._subparsers._group_actions[0].choices["estimate"]._option_string_actions)
    assert rc == 2 and one_paragraph(err)
    assert error["close_matches"] and set(error["close_matches"]) <= accepted
    assert "gpuplan estimate --help" in error["fix"]


def test_unknown_command_has_close_matches(capsys):
    rc, out, err = run(["estmate", *FITS_8B, "--json"], capsys)
    assert rc == 2 and one_paragraph(err) and json.loads(out)["error"]["close_matches"][0] == "estimate"


# ---- exit code 1: the answer is "does not fit" / "no plan" --------------------------------------

@pytest.mark.parametrize("command", ["estimate", "memory", "train"])
def test_plan_that_does_not_fit_exits_1_with_the_answer(command, capsys):
    rc, out, err = run([command, *TOO_BIG, "--json"], capsys)
    envelope = json.loads(out)
    assert rc == 1 and envelope["command"] == command and "result" in envelope
    assert envelope["result"]["memory"]["fits"] is False


def test_plan_that_fits_exits_0(capsys):
    assert run(["estimate", *FITS_8B], capsys)[0] == 0


def test_recommend_without_a_feasible_plan_exits_1(capsys):
    rc, out, _ = run(["recommend", "--model", "llama-3.1-405b", "--task", "train", "--gpus", "rtx-4090",
                      "--max-gpus", "1"], capsys)
    assert rc == 1 and "No feasible plan" in out


def test_compare_where_nothing_fits_exits_1(capsys):
    rc, out, _ = run(["compare", "--model", "llama-3.1-405b", "--task", "train", "--count", "1",
                      "--gpus", "rtx-4090", "--json"], capsys)
    rows = json.loads(out)["result"]["rows"]
    assert rc == 1 and rows and not any(r["fits"] for r in rows)


# ---- launch: refuses plans that do not fit, and changed files -----------------------------------

def test_launch_refuses_a_plan_that_does_not_fit(tmp_path, capsys):
    out_dir = tmp_path / "run"
    rc, out, err = run(["launch", *TOO_BIG, "--engine", "torchrun", "--out", str(out_dir)], capsys)
    assert rc == 1 and "DOES NOT FIT" in err and "--force" in err and not out_dir.exists()
    rc, out, err = run(["launch", *TOO_BIG, "--engine", "torchrun", "--out", str(out_dir), "--force"], capsys)
    assert rc == 0 and "warning" in err and any(out_dir.iterdir())
    rc, out, err = run(["launch", *TOO_BIG, "--engine", "torchrun", "--json"], capsys)
    result = json.loads(out)["result"]
    assert rc == 1 and result["fits"] is False and "DOES NOT FIT" in result["message"]


def test_launch_estimate_errors_are_not_swallowed(capsys, monkeypatch):
    from gpuplan.errors import InputError

    def broken(*a, **k):
        raise InputError("network 'ib-xyz'", "is not in the catalog.", "use a catalog id.")
    monkeypatch.setattr(pipeline, "evaluate", broken)
    rc, out, err = run(["launch", *FITS_8B, "--engine", "vllm"], capsys)
    assert rc == 2 and "ib-xyz" in err and out == ""


def test_launch_out_never_overwrites_a_changed_file(tmp_path, capsys):
    out_dir = tmp_path / "run"
    args = ["launch", *FITS_8B, "--engine", "vllm", "--out", str(out_dir)]
    assert run(args, capsys)[0] == 0
    script = out_dir / "serve.sh"
    original = script.read_text()
    assert run(args, capsys)[0] == 0                  # same content again: nothing to protect
    script.write_text(original + "\n# my edit\n")
    rc, _, err = run(args, capsys)
    assert rc == 2 and one_paragraph(err) and str(script) in err and "--force" in err
    assert script.read_text().endswith("# my edit\n")
    assert run(args + ["--force"], capsys)[0] == 0
    assert script.read_text() == original


def test_launch_out_naming_a_file_is_an_environment_error(tmp_path, capsys):
    f = tmp_path / "file.txt"
    f.write_text("x")
    rc, _, err = run(["launch", *FITS_8B, "--engine", "vllm", "--out", str(f)], capsys)
    assert rc == 2 and one_paragraph(err) and "not a folder" in err


def test_permission_denied_is_an_environment_error(tmp_path, capsys, monkeypatch):
    def denied(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))
    monkeypatch.setattr(Path, "write_text", denied)
    rc, _, err = run(["launch", *FITS_8B, "--engine", "vllm", "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and one_paragraph(err) and "Permission denied" in err and "permissions" in err


# ---- environment errors --------------------------------------------------------------------------

def test_directory_as_scenario_or_profile_is_bad_input(tmp_path, capsys):
    for args in (["estimate", str(tmp_path)], ["estimate", *FITS_8B, "--profile", str(tmp_path)]):
        rc, _, err = run(args, capsys)
        assert rc == 2 and one_paragraph(err), err


def test_unreadable_scenario_is_bad_input(tmp_path, capsys, monkeypatch):
    scn = tmp_path / "s.yaml"
    scn.write_text("model: llama-3.1-8b\nhardware: {gpu: h100-sxm}\n")

    def denied(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))
    monkeypatch.setattr(Path, "read_text", denied)
    monkeypatch.setattr(Path, "read_bytes", denied)
    rc, _, err = run(["estimate", str(scn)], capsys)
    assert rc == 2 and one_paragraph(err) and "ermission" in err


# ---- plots ---------------------------------------------------------------------------------------

def test_plot_into_a_missing_folder_is_bad_input_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pipeline, "evaluate", lambda *a, **k: pytest.fail("evaluated before the path check"))
    rc, _, err = run(["serve", *FITS_8B, "--plot", str(tmp_path / "nope" / "x.svg")], capsys)
    assert rc == 2 and one_paragraph(err) and "does not exist" in err


def test_plot_named_exactly_is_overwritten_derived_never(tmp_path, capsys):
    named = tmp_path / "mine.svg"
    named.write_text("old")
    assert run(["serve", *FITS_8B, "--plot", str(named)], capsys)[0] == 0
    assert named.read_text().startswith("<?xml")                # the user named it: overwritten
    assert run(["serve", *FITS_8B, "--plot", str(tmp_path)], capsys)[0] == 0
    derived = tmp_path / "serve.svg"
    derived.write_text("my notes")
    rc, _, err = run(["serve", *FITS_8B, "--plot", str(tmp_path)], capsys)
    assert rc == 2 and one_paragraph(err) and "serve.svg" in err
    assert derived.read_text() == "my notes"


def test_write_plot_overwrite_false_refuses(tmp_path):
    from gpuplan.errors import InputError
    from gpuplan.plot import write_plot
    p = tmp_path / "c.svg"
    p.write_text("keep")
    with pytest.raises(InputError, match="overwritten"):
        write_plot(p, curve=[{"concurrency": 1, "output_tokens_per_s": 10.0, "ttft_s": 0.1, "tpot_s": 0.01}],
                   overwrite=False)
    assert p.read_text() == "keep"


# ---- Ctrl-C, bugs ---------------------------------------------------------------------------------

def test_ctrl_c_exits_130_with_one_line(capsys, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(pipeline, "evaluate", interrupted)
    rc, _, err = run(["estimate", *FITS_8B], capsys)
    assert rc == 130 and err.count("\n") == 1 and "Traceback" not in err


def test_a_true_bug_exits_3_with_one_paragraph(capsys, monkeypatch):
    monkeypatch.delenv("GPUPLAN_DEBUG", raising=False)
    monkeypatch.setattr(pipeline, "evaluate", lambda *a, **k: {}["boom"])
    rc, _, err = run(["estimate", *FITS_8B], capsys)
    assert rc == 3 and "internal error KeyError" in err and "Traceback" not in err
    rc, out, _ = run(["estimate", *FITS_8B, "--json"], capsys)
    envelope = json.loads(out)                 # scripts still get one JSON shape
    assert rc == 3 and envelope["error"]["what"] == "internal error" and "KeyError" in envelope["error"]["why"]


# ---- the JSON envelope --------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["models", "qwen"], ["model", "qwen2.5-7b"], ["gpus", "h100"], ["gpu", "h100-sxm"],
                                  ["schema"], ["estimate", *FITS_8B], ["memory", *FITS_8B], ["serve", *FITS_8B],
                                  ["whatif", *FITS_8B], ["launch", *FITS_8B, "--engine", "vllm"],
                                  ["compare", *FITS_8B[:2], "--task", "infer", "--gpus", "h100-sxm"],
                                  ["recommend", "--model", "qwen2.5-0.5b", "--task", "infer", "--gpus", "l4",
                                   "--max-gpus", "1", "--top", "2"],
                                  ["doctor", "--gpu", "h100-sxm", "--models", "qwen2.5-7b"]])
def test_every_json_output_is_the_envelope(args, capsys):
    rc, out, _ = run([*args, "--json"], capsys)
    envelope = json.loads(out)
    assert rc == 0 and envelope["command"] == args[0] and envelope["version"] == gpuplan.__version__
    assert set(envelope) == {"command", "version", "result"}


@pytest.mark.parametrize("args, match", [(["estimate", "--model", "lama-3.1-8b", "--gpu", "h100-sxm"], "llama-3.1-8b"),
                                         (["gpu", "h100"], "h100-sxm"),
                                         (["estimate", *FITS_8B, "--count", "nan"], None)])
def test_json_error_envelope(args, match, capsys):
    rc, out, err = run([*args, "--json"], capsys)
    envelope = json.loads(out)
    assert rc == 2 and set(envelope) == {"command", "version", "error"} and envelope["command"] == args[0]
    assert set(envelope["error"]) == {"what", "why", "fix", "close_matches"} and envelope["error"]["why"]
    assert match is None or match in envelope["error"]["close_matches"]
    assert one_paragraph(err)


# ---- one pipeline; no upward imports ------------------------------------------------------------

SPIED = [["estimate", *FITS_8B], ["memory", *FITS_8B], ["serve", *FITS_8B],
         ["train", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--count", "8"],
         ["whatif", *FITS_8B], ["launch", *FITS_8B, "--engine", "vllm"],
         ["doctor", "--gpu", "h100-sxm", "--models", "qwen2.5-0.5b"]]
SPIED += [["compare", *FITS_8B[:2], "--task", "infer", "--gpus", "h100-sxm"],
          ["recommend", "--model", "qwen2.5-0.5b", "--task", "infer", "--gpus", "l4", "--max-gpus", "1"]]


def _name(case) -> str:
    return (case.values[0] if hasattr(case, "values") else case)[0]


@pytest.mark.parametrize("args", SPIED, ids=[_name(a) for a in SPIED])
def test_every_plan_command_evaluates_through_the_pipeline(args, capsys, monkeypatch):
    calls = []
    real = pipeline.evaluate

    def spy(*a, **k):
        calls.append(a)
        return real(*a, **k)
    monkeypatch.setattr(pipeline, "evaluate", spy)
    rc, _, err = run(args, capsys)
    assert rc in (0, 1), err
    assert calls, f"`gpuplan {args[0]}` did not evaluate through gpuplan.pipeline.evaluate"


def test_no_subpackage_imports_the_top_level_cli():
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                depth_ok = node.level == len(rel.parts)      # a relative import that reaches gpuplan/ itself
                target = (node.module or "")
                if (node.level and target.split(".")[0] == "cli" and depth_ok) or target in ("gpuplan.cli",) or \
                        target.startswith("gpuplan.cli."):
                    offenders.append(f"{rel}:{node.lineno}")
            elif isinstance(node, ast.Import):
                offenders += [f"{rel}:{node.lineno}" for a in node.names if a.name.split(".")[:2] == ["gpuplan", "cli"]]
    assert not offenders, f"modules importing the top-level CLI (use gpuplan.cliargs): {offenders}"
