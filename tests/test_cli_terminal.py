"""Terminal output (issue 19): rich tables that fit the terminal with colour where it helps, plain stable text when
piped, NO_COLOR / --no-color, --quiet on every command, progress bars only on a terminal's stderr."""
from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan import term
from gpuplan.cli import build_parser, main
from gpuplan.report import table

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ROOT = Path(__file__).resolve().parents[1]
FIT_8B = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--task", "infer"]
NO_FIT = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--task", "train", "--seq-len", "2048"]


class Tty(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _plain_after():
    yield
    term.reset()


def _run_on_tty(argv, monkeypatch, columns=80, env=None):
    """Run the CLI in this process with stdout (and stderr) as a terminal of `columns` columns."""
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    out, err = Tty(), Tty()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


# ---- piped output stays plain ------------------------------------------------------------------------------

def test_plain_table_is_the_stable_text():
    # the layout tests and docs/guide.md compare: header, dashed rule, columns padded to the widest cell
    assert table([("a", "1"), ("bb", "22")], ["name", "n"]) == "name   n\n----  --\na      1\nbb    22"


def test_piped_output_has_no_escape_codes_and_no_box_drawing(capsys):
    assert main(["memory", *NO_FIT]) == 1
    out = capsys.readouterr().out
    assert not ANSI.search(out)
    assert "─" not in out and "component" in out and "----" in out


def test_piped_output_does_not_import_rich():
    code = ("import sys; from gpuplan.cli import main; main(['memory', '--model', 'llama-3.1-8b', '--gpu', "
            "'h100-sxm', '--task', 'infer']); print('RICH' if 'rich' in sys.modules else 'NO-RICH', file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert done.stderr.strip().endswith("NO-RICH"), done.stderr


# ---- on a terminal -----------------------------------------------------------------------------------------

def test_terminal_tables_fit_the_width_and_colour_the_verdict(monkeypatch):
    rc, out, _ = _run_on_tty(["compare", "--model", "llama-3.1-8b", "--task", "finetune", "--method", "lora",
                              "--gpus", "rtx-4090,h100-sxm"], monkeypatch, columns=70)
    assert rc == 0
    plain = ANSI.sub("", out)
    assert all(len(line) <= 70 for line in plain.splitlines()), max(plain.splitlines(), key=len)
    assert "─" in plain                                  # rich's rule under the header
    assert re.search(r"\x1b\[32m *yes\x1b\[0m", out)          # fits: green


def test_terminal_cells_keep_their_content_when_wrapped():
    # a narrow table wraps a long cell inside its column; joined back, the words are all there
    text = term.rich_table(["plan", "n"], [["one two three four five six seven", "7"]], "lr", width=20,
                           color=False)
    assert all(len(line) <= 20 for line in text.splitlines())
    words = " ".join(text.split())
    for w in "one two three four five six seven".split():
        assert w in words


def test_no_color_environment_and_flag_remove_colour_but_keep_the_table(monkeypatch):
    for argv, env in ((["memory", *NO_FIT], {"NO_COLOR": "1"}), (["memory", *NO_FIT, "--no-color"], {})):
        rc, out, _ = _run_on_tty(argv, monkeypatch, env=env)
        assert rc == 1
        assert not ANSI.search(out), argv
        assert "─" in out and "does NOT fit" in out


def test_an_empty_no_color_leaves_colour_on():
    # no-color.org: only a non-empty value turns colour off
    assert term.no_color_env({"NO_COLOR": ""}) is False
    assert term.no_color_env({"NO_COLOR": "yes"}) is True
    assert term.no_color_env({"TERM": "dumb"}) is True


def test_colour_marks_the_over_capacity_verdict(monkeypatch):
    _, out, _ = _run_on_tty(["memory", *NO_FIT], monkeypatch)
    assert "\x1b[1;31mdoes NOT fit" in out


def test_json_on_a_terminal_is_plain_json(monkeypatch):
    rc, out, err = _run_on_tty(["estimate", *FIT_8B, "--json"], monkeypatch)
    assert rc == 0 and json.loads(out)["command"] == "estimate"
    assert not ANSI.search(out) and err == ""


# ---- --quiet -------------------------------------------------------------------------------------------------

def test_every_command_takes_quiet_and_no_color():
    parser = build_parser("*")
    sub = next(a for a in parser._actions if hasattr(a, "choices") and a.choices)
    for name, p in sub.choices.items():
        assert {"-q", "--quiet", "--no-color"} <= set(p._option_string_actions), name


def test_quiet_keeps_the_result_and_drops_notes_and_hints(capsys):
    assert main(["memory", "--model", "llama-3.1-8b", "--task", "train"]) == 0
    full = capsys.readouterr().out.splitlines()
    assert main(["memory", "--model", "llama-3.1-8b", "--task", "train", "--quiet"]) == 0
    quiet = capsys.readouterr().out.splitlines()
    assert any(line.startswith("The peak differs") for line in full)
    assert not any(line.startswith("The peak differs") for line in quiet)
    assert [line for line in full if line.startswith("1 GPU")] == [line for line in quiet if line.startswith("1 GPU")]
    assert set(quiet) <= set(full)


def test_quiet_drops_note_lines_of_reports(capsys):
    assert main(["memory", *NO_FIT]) == 1
    full = capsys.readouterr().out
    assert main(["memory", *NO_FIT, "-q"]) == 1
    quiet = capsys.readouterr().out
    assert "note: " in full and "note: " not in quiet
    assert "Peak " in quiet and "peak per GPU" in quiet


def test_quiet_before_the_command_is_accepted(capsys):
    assert main(["-q", "gpus", "h100"]) == 0
    out = capsys.readouterr().out
    assert "h100-sxm" in out and "accelerators." not in out


def test_quiet_errors_are_still_printed(capsys):
    assert main(["estimate", "--model", "llama-3.1-8bb", "--gpu", "h100-sxm", "-q"]) == 2
    assert "error:" in capsys.readouterr().err


# ---- progress bars -------------------------------------------------------------------------------------------

def test_progress_is_off_unless_stderr_is_a_terminal():
    assert term.configure(stdout=io.StringIO(), stderr=io.StringIO()).progress is False
    assert term.configure(stdout=io.StringIO(), stderr=Tty()).progress is True
    assert term.configure(stdout=Tty(), stderr=Tty(), quiet=True).progress is False
    assert term.configure(stdout=Tty(), stderr=Tty(), as_json=True).progress is False
    assert term.configure(stdout=Tty(), stderr=Tty(), as_json=True).styled is False


def test_progress_draws_on_stderr_only_when_enabled(monkeypatch):
    err = Tty()
    monkeypatch.setattr(sys, "stderr", err)
    with term.Progress("work", 4, delay_s=0.0, enabled=False) as bar:
        bar.update(2)
    assert err.getvalue() == ""
    with term.Progress("work", 4, delay_s=0.0, enabled=True) as bar:
        bar.update(2, text="halfway")
    assert "work" in err.getvalue()


def test_progress_waits_for_its_delay(monkeypatch):
    err = Tty()
    monkeypatch.setattr(sys, "stderr", err)
    with term.Progress("slow", 4, delay_s=60.0, enabled=True) as bar:
        bar.update(1)
    assert err.getvalue() == ""


def test_recommend_without_progress_writes_nothing_to_stderr(capsys):
    from gpuplan.search import recommend
    recommend({"model": "qwen2.5-0.5b", "task": "infer"}, gpus=["l4"], top=1, progress=False)
    assert capsys.readouterr().err == ""


def test_serving_load_reports_its_runs_to_the_progress_callback():
    from gpuplan import pipeline
    r = pipeline.resolve({"model": "qwen2.5-0.5b", "task": "infer", "hardware": {"gpu": "l4"},
                          "infer": {"load": {"rate_per_s": 2.0, "requests": 200}}})
    seen: list[str] = []
    pipeline.serving_load(r, pipeline.memory(r), progress=seen.append)
    assert seen[0] == "simulating 200 requests"
    assert any(s.startswith("capacity and SLO search: probe 1 ") for s in seen)


def test_a_narrow_terminal_shrinks_the_memory_bars_instead_of_wrapping_them(monkeypatch, capsys):
    argv = ["memory", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--task", "infer"]
    assert main(argv) == 0
    plain = capsys.readouterr().out.splitlines()
    _, out, _ = _run_on_tty([*argv, "--no-color"], monkeypatch, columns=60)
    styled = out.splitlines()
    first = next(i for i, s in enumerate(styled) if s.startswith("component"))
    last = next(i for i, s in enumerate(styled) if s.startswith("peak per GPU"))
    assert all(len(line) <= 60 for line in styled[first:last + 1])
    # one line per component, as in the plain table: no bar split over two lines
    for name in ("weights", "kv_cache", "peak per GPU"):
        line = next(s for s in styled if s.startswith(name))
        assert "█" in line or "·" in line
    assert len([s for s in styled if set(s.strip()) <= {"·", "█"} and s.strip()]) == 0
    assert len(styled) == len(plain)


def test_calibrate_reports_each_benchmark_to_the_progress_callback(monkeypatch):
    # no GPU here: a stand-in torch with one GPU and no FP8 (compute capability 8.0), benchmarks stubbed out
    from types import SimpleNamespace

    from gpuplan.local import calibrate as cal
    props = SimpleNamespace(name="NVIDIA A100-SXM4-80GB", total_memory=80 * 2**30)
    cuda = SimpleNamespace(set_device=lambda i: None, current_device=lambda: 0, get_device_properties=lambda i: props,
                           get_device_capability=lambda: (8, 0), mem_get_info=lambda: (70 * 2**30, 80 * 2**30),
                           device_count=lambda: 1)
    fake_torch = SimpleNamespace(cuda=cuda, version=SimpleNamespace(cuda="12.4", hip=None), __version__="2.13.0")
    monkeypatch.setattr(cal, "require_cuda", lambda what: fake_torch)
    monkeypatch.setattr(cal, "bench_gemm", lambda torch, dtypes, shapes, iters: [])
    monkeypatch.setattr(cal, "bench_copy_bandwidth", lambda torch, nbytes: 1.5e12)
    import importlib
    monkeypatch.setattr(importlib.import_module("gpuplan.local.detect"), "detect",
                        lambda: SimpleNamespace(driver_version="550"))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    seen: list[str] = []
    cal.calibrate(quick=True, progress=seen.append)
    # bf16, fp16, tf32, fp32 over the three quick GEMM sizes, then the copy; one GPU: no collectives
    assert seen == ["GEMM bf16 (3 sizes)", "GEMM fp16 (3 sizes)", "GEMM tf32 (3 sizes)", "GEMM fp32 (3 sizes)",
                    "HBM copy bandwidth"]


def test_errors_are_red_on_a_colour_terminal_only(monkeypatch, capsys):
    rc, _, err = _run_on_tty(["estimate", "--model", "llama-3.1-8bb", "--gpu", "h100-sxm"], monkeypatch)
    assert rc == 2 and err.startswith("\x1b[1;31merror:\x1b[0m model")
    rc, _, err = _run_on_tty(["estimate", "--model", "llama-3.1-8bb", "--gpu", "h100-sxm"], monkeypatch,
                             env={"NO_COLOR": "1"})
    assert rc == 2 and err.startswith("error: model")
    monkeypatch.undo()                                   # back to pytest's captured (piped) streams
    assert main(["estimate", "--model", "llama-3.1-8bb", "--gpu", "h100-sxm"]) == 2
    assert capsys.readouterr().err.startswith("error: model")
