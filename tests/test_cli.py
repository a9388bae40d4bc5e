"""CLI: every command answers bad input with one paragraph and exit code 2, never a traceback."""
import json
import subprocess
import sys

import pytest

import gpuplan
from gpuplan.cli import main

from conftest import ROOT


def run(args, capsys):
    rc = main(args)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.mark.parametrize("args, needle", [
    (["estimate", "missing.yaml"], "does not exist"),
    (["model", "nonexistent-model-xyz"], "not a bundled model"),
    (["gpu", "H100"], "Close matches"),                     # ambiguous: lists the candidates
    (["gpu", "h9000"], "h9000"),
    (["estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--count", "0"], "hardware.count"),
    (["estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--seq-len", "-5"], "train.seq_len"),
    (["estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "3", "--count", "4"], "tp"),
    (["estimate", "--model", "llama-3.1-8b"], "names no GPU"),
    (["memory", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--task", "infer", "--weights", "int3"], "int3"),
    (["estimate", "--model", "llama-3.1-8b", "--gpu", "a100-sxm-80gb", "--precision", "fp8"], "FP8"),
    (["launch", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "llama.cpp"], "llama.cpp"),
])
def test_bad_input_is_one_paragraph(args, needle, capsys):
    rc, out, err = run(args, capsys)
    assert rc == 2
    assert err.startswith("error: ") and needle.lower() in err.lower()
    assert "Traceback" not in err and err.count("\n") == 1


def test_malformed_files(tmp_path, capsys):
    bad_json = tmp_path / "s.json"
    bad_json.write_text('{"model": "llama-3.1-8b", ')
    rc, _, err = run(["estimate", str(bad_json)], capsys)
    assert rc == 2 and "not valid JSON" in err
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "xlstm", "hidden_size": 8}))   # (Mamba, RWKV are read now)
    rc, _, err = run(["model", str(cfg)], capsys)
    assert rc == 2 and "xlstm" in err and "llama" in err      # names the supported families


def test_json_contract_keys(capsys):
    rc, out, _ = run(["estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--task", "infer", "--json"], capsys)
    envelope = json.loads(out)
    assert rc == 0 and envelope["command"] == "estimate" and envelope["version"] == gpuplan.__version__
    d = envelope["result"]
    assert set(d["memory"]["components"]) == {"weights", "gradients", "optimizer_states", "activations", "logits",
                                              "kv_cache", "temporary", "runtime_overhead"}
    assert sum(d["memory"]["components"].values()) == d["memory"]["peak_bytes_per_gpu"]
    assert d["performance"]["step_time_s"] is None and d["performance"]["tpot_s"] > 0   # null, never a fake 0
    assert set(d["cost"]) >= {"usd_per_hour", "usd_total", "usd_per_million_tokens"}


def test_model_json_contract(capsys):
    rc, out, _ = run(["model", "deepseek-v3", "--json"], capsys)
    d = json.loads(out)["result"]
    for key in ("params_total", "params_active", "params_embedding", "num_layers", "hidden_size",
                "kv_cache_bytes_per_token", "flops_per_token_forward"):
        assert key in d
    assert d["kv_cache_bytes_per_token"] == 70272


def test_gpus_json_lists_50_sourced_rows(capsys):
    rc, out, _ = run(["gpus", "--json"], capsys)
    rows = json.loads(out)["result"]["gpus"]
    assert rc == 0 and len(rows) >= 50
    assert all(r["source_url"] and r["retrieved"] for r in rows)


def test_console_script_starts_and_shows_help():
    out = subprocess.run([sys.executable, "-m", "gpuplan.cli", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and "recommend" in out.stdout and "estimate" in out.stdout


def test_tracked_file_guard_detects_a_write(tmp_path):
    """conftest fails the session when a test wrote a tracked file; its comparison must see a write."""
    from conftest import changed_files, tracked_snapshot
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "docs").mkdir()
    for name in ("a.png", "b.png"):
        (tmp_path / "docs" / name).write_bytes(b"x")
    subprocess.run(["git", "-C", str(tmp_path), "add", "docs"], check=True)
    before = tracked_snapshot(tmp_path)
    assert set(before) == {"docs/a.png", "docs/b.png"}
    (tmp_path / "docs" / "b.png").write_bytes(b"xy")
    after = tracked_snapshot(tmp_path)
    assert changed_files(before, after) == ["docs/b.png"]
    assert changed_files(before, after, allowed=("docs/",)) == []


def test_estimate_of_a_load_scenario_says_where_its_load_is_simulated(capsys):
    # estimate prints the steady state at infer.concurrency; the file's infer.load (10 requests/s) is what
    # `serve` simulates and `recommend` sizes for: without a word, its $/M tokens (at concurrency 1) reads as
    # contradicting recommend's
    rc, out, _ = run(["estimate", "examples/serve-load-llama-70b.yaml"], capsys)
    assert rc == 0 and "infer.load" in out and "gpuplan serve" in out and "concurrency 1" in out
    rc, out, _ = run(["estimate", "examples/serve-llama-70b.yaml"], capsys)
    assert rc == 0 and "infer.load" not in out


@pytest.mark.parametrize("args, needles", [
    (["serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm"], ("vllm", "1 x (1024 + 256) tokens", "1x h100-sxm")),
    (["train", "--model", "qwen2.5-7b", "--gpu", "a100-sxm-80gb", "--count", "8"],
     ("full, bf16, adamw, seq 2048", "8x a100-sxm-80gb")),
])
def test_train_and_serve_say_which_plan_their_numbers_are_for(args, needles, capsys):
    # a flag-only `serve`/`train` fills engine, lengths, concurrency, method... from defaults: the answer must
    # name them (as estimate and explain do) so the numbers can be read
    main(args)
    first = capsys.readouterr().out.splitlines()[0]
    assert all(n in first for n in needles), first


@pytest.mark.parametrize("args, match", [(["gpus", "rtx5090"], "rtx-5090"), (["models", "llama3"], "llama-3-8b")])
def test_a_listing_filter_that_matches_nothing_offers_close_matches(args, match, capsys):
    # "rtx5090" (no hyphen) lists nothing: the user is told which names are close instead of an empty table
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "nothing matches" in out and match in out


def test_gpu_card_says_which_memory_plans_use(capsys):
    # the nominal "80 GB" (80e9 bytes) reads below the usable 85.5e9 bytes nvidia-smi reports: the card says so
    assert main(["gpu", "h100-sxm"]) == 0
    out = capsys.readouterr().out
    assert "memory_bytes is the vendor's nominal \"80 GB\"" in out and "usable_memory_bytes (79.647 GiB" in out
