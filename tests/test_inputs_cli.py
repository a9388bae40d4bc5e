"""Bad input through the CLI: exit code 2 and one paragraph (issue 16), never a hang or exit 3."""
import os
import threading

import pytest

from gpuplan.cli import main


def _run(args, capsys, seconds=5.0):
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("rc", main(args)), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"gpuplan {' '.join(args)} still running after {seconds} s"
    cap = capsys.readouterr()
    return box["rc"], cap.out + cap.err


def test_fifo_scenario_exits_2_at_once(tmp_path, capsys):
    fifo = tmp_path / "s.yaml"
    os.mkfifo(fifo)
    rc, out = _run(["estimate", str(fifo)], capsys, seconds=2.0)
    assert rc == 2 and "not a regular file" in out and "Traceback" not in out


@pytest.mark.parametrize("args, needle", [
    (["recommend", "--model", "llama-3.1-8b", "--headroom", "2"], "min_headroom"),
    (["recommend", "--model", "llama-3.1-8b", "--micro-batch", "0"], "train.micro_batch"),
    (["estimate", "--model", "gpt2", "--gpu", "h100-sxm", "--count", "16", "--pp", "16", "--seq-len", "1024"],
     "12 layers"),
    (["estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--network", "ib-ndr400"], "ib-ndr-400"),
])
def test_absurd_flags_exit_2(args, needle, capsys):
    rc, out = _run(args, capsys)
    assert rc == 2 and needle in out and "Fix:" in out


def test_duplicate_key_file_exits_2(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text("model: llama-3.1-8b\nhardware: {gpu: h100-sxm}\nhardware: {gpu: a100-sxm-80gb}\n")
    rc, out = _run(["estimate", str(p)], capsys)
    assert rc == 2 and "'hardware' twice" in out
