"""gpuplan.cliargs: number parsers with ranges, flag overlay on a scenario, environment errors, and
plot.plot_path (where --plot writes)."""
from __future__ import annotations

import argparse
import errno

import pytest

from gpuplan.cliargs import (Parser, UsageError, add_scenario_args, environment_error, real_number,
                             scenario_data_from_args, scenario_from_args, whole_number)
from gpuplan.errors import InputError
from gpuplan.plot import plot_path


@pytest.mark.parametrize("text, value", [("8", 8), ("1e3", 1000), ("2.0", 2), ("1_024", 1024), (" 16 ", 16)])
def test_whole_number_accepts(text, value):
    assert whole_number("--n", 1, 4096)(text) == value


@pytest.mark.parametrize("text", ["0", "-1", "4097", "1.5", "inf", "-inf", "nan", "1e400", "9" * 400, "0x10", "",
                                  "eight", "1e-300"])
def test_whole_number_refuses_with_flag_and_range(text):
    with pytest.raises(argparse.ArgumentTypeError) as err:
        whole_number("--n", 1, 4096, "train.n")(text)
    message = str(err.value)
    assert message.startswith("--n (train.n): expects a whole number from 1 to 4,096") and len(message) < 120


def test_real_number_ends_open_and_closed():
    headroom = real_number("--headroom", 0, 1, low_open=False, high_open=True)
    assert headroom("0") == 0.0 and headroom("0.5") == 0.5
    for text in ("1", "-0.1", "nan", "inf", "1e400"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"\[0, 1\)"):
            headroom(text)
    budget = real_number("--budget", 0, 1e15)
    assert budget("1e15") == 1e15
    with pytest.raises(argparse.ArgumentTypeError, match=r"\(0, 1e\+15\]"):
        budget("0")


def _args(argv):
    p = Parser(prog="t")
    add_scenario_args(p)
    return p.parse_args(argv)


def test_flags_overlay_a_file_and_reset_dp_when_the_count_changes():
    base = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "count": 8}, "parallel": {"dp": 8, "tp": 1},
            "train": None}
    data = scenario_data_from_args(_args(["--count", "16", "--seq-len", "1e3"]), base)
    assert data["hardware"] == {"gpu": "h100-sxm", "count": 16}
    assert data["parallel"]["dp"] is None                   # derived again from the new count
    assert data["train"] == {"seq_len": 1000}
    assert base["hardware"]["count"] == 8 and base["parallel"]["dp"] == 8   # the file's data is not changed


def test_a_flag_into_a_section_that_is_not_a_mapping_is_refused():
    with pytest.raises(InputError, match="not a mapping"):
        scenario_data_from_args(_args(["--seq-len", "128"]), {"model": "gpt2", "train": "full"})


def test_scenario_needs_a_model_and_a_gpu():
    with pytest.raises(InputError, match="names no model"):
        scenario_from_args(_args(["--gpu", "h100-sxm"]))
    with pytest.raises(InputError, match="names no GPU"):
        scenario_from_args(_args(["--model", "llama-3.1-8b"]))


def test_parser_errors_are_input_errors_naming_the_flag():
    with pytest.raises(UsageError) as err:
        _args(["--count", "nan"])
    assert err.value.what == "--count (hardware.count)" and "1 to 1,048,576" in err.value.why
    with pytest.raises(UsageError) as err:
        _args(["--seq-lenn", "4"])
    assert "--seq-len" in err.value.matches


@pytest.mark.parametrize("code, fix", [(errno.ENOENT, "created first"), (errno.EACCES, "permissions"),
                                       (errno.EISDIR, "not a folder"), (errno.ENOTDIR, "is a file")])
def test_environment_errors_name_the_path_and_the_fix(code, fix):
    err = environment_error(OSError(code, "text from the OS", "/some/path"))
    assert err.what == "/some/path" and err.why == "text from the OS." and fix in err.fix


def test_plot_path_named_file_and_derived_name(tmp_path):
    named = plot_path(tmp_path / "c.html", "serve")
    assert named.path == tmp_path / "c.html" and named.named
    derived = plot_path(str(tmp_path) + "/", "serve")
    assert derived.path == tmp_path / "serve.svg" and not derived.named
    derived.path.write_text("keep")
    with pytest.raises(InputError, match="would overwrite"):
        plot_path(tmp_path, "serve")


@pytest.mark.parametrize("name, match", [("missing/", "does not exist"), ("missing/c.svg", "does not exist"),
                                         ("c.pdf", "unknown chart format"), ("file.txt/c.svg", "is a file")])
def test_plot_path_refused_before_any_work(tmp_path, name, match):
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(InputError, match=match):
        plot_path(f"{tmp_path}/{name}", "serve")
