"""Safe input reading (issue 16): regular files only, a size limit, no hang, no alias bomb, no
duplicate keys; messages name the file and the fix and quote only a short excerpt."""
import json
import os
import threading
import time

import pytest

from gpuplan.errors import InputError
from gpuplan.inputs import MAX_INPUT_BYTES, excerpt, read_mapping_file
from gpuplan.scenario import load_scenario

# the 342-byte form of the "billion laughs" alias bomb: 9 levels of 9 aliases = 9**9 leaves
ALIAS_BOMB = "".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n',
        *(f"{b}: &{b} [{','.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi")),
    ]
)


def _fails_fast(fn, seconds=2.0):
    """Run fn in a thread; it must raise InputError within `seconds` (a hang fails the test)."""
    box = {}

    def target():
        try:
            fn()
        except BaseException as err:  # noqa: BLE001 - handed to the test thread
            box["err"] = err
    t = threading.Thread(target=target, daemon=True)
    start = time.perf_counter()
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s"
    assert isinstance(box.get("err"), InputError), box.get("err")
    return box["err"], time.perf_counter() - start


def test_alias_bomb_fails_in_milliseconds_with_a_short_message(tmp_path):
    p = tmp_path / "bomb.yaml"
    p.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB) < 420
    err, took = _fails_fast(lambda: load_scenario(p))
    assert took < 1.0
    text = str(err)
    assert "bomb.yaml" in text and "aliases" in text and "Fix:" in text
    assert len(text) < 400 and "lol" not in text


def test_recursive_alias_refused(tmp_path):
    p = tmp_path / "rec.yaml"
    p.write_text("model: &m\n  inner: *m\n")
    err, _ = _fails_fast(lambda: load_scenario(p))
    assert "refers to itself" in str(err)


def test_yaml_merge_keys_still_work(tmp_path):
    p = tmp_path / "merge.yaml"
    p.write_text("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  x: 3\n")
    assert read_mapping_file(p)["other"] == {"x": 3, "y": 2}


@pytest.mark.parametrize("text, key, where", [
    ("model: llama-3.1-8b\nhardware: {gpu: h100-sxm}\nmodel: gpt2\n", "'model'", "lines 1 and 3"),
    ("model: gpt2\nhardware: {gpu: h100-sxm, gpu: a100-sxm-80gb}\n", "'gpu'", "line 2"),
])
def test_duplicate_yaml_keys_refused(tmp_path, text, key, where):
    p = tmp_path / "dup.yaml"
    p.write_text(text)
    with pytest.raises(InputError) as err:
        load_scenario(p)
    msg = str(err.value)
    assert "dup.yaml" in msg and key in msg and where in msg and "Fix: delete one" in msg


def test_duplicate_json_keys_and_nan_refused(tmp_path):
    p = tmp_path / "dup.json"
    p.write_text('{"model": "gpt2", "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"}}')
    with pytest.raises(InputError, match="'model' twice") as err:
        load_scenario(p)
    assert "dup.json" in str(err.value) and "Fix:" in str(err.value)
    p.write_text('{"model": "gpt2", "hardware": {"gpu": "h100-sxm"}, "train": {"tokens": NaN}}')
    with pytest.raises(InputError, match="NaN"):
        load_scenario(p)


def test_fifo_scenario_does_not_hang(tmp_path):
    fifo = tmp_path / "scenario.yaml"
    os.mkfifo(fifo)
    err, _ = _fails_fast(lambda: load_scenario(fifo))
    assert "scenario.yaml" in str(err) and "not a regular file" in str(err) and "Fix:" in str(err)


def test_dev_zero_refused_at_once():
    err, took = _fails_fast(lambda: read_mapping_file("/dev/zero", "hardware profile"))
    assert took < 1.0 and "/dev/zero" in str(err) and "not a regular file" in str(err)


def test_directory_missing_and_unreadable(tmp_path):
    with pytest.raises(InputError, match="is a directory") as err:
        load_scenario(tmp_path)
    assert "Fix:" in str(err.value)
    with pytest.raises(InputError, match="does not exist"):
        load_scenario(tmp_path / "nope.yaml")
    p = tmp_path / "locked.yaml"
    p.write_text("model: gpt2\n")
    p.chmod(0)
    try:
        if os.access(p, os.R_OK):  # running as root: permissions do not apply
            pytest.skip("root reads any file")
        with pytest.raises(InputError, match="cannot be opened") as err:
            load_scenario(p)
        assert "locked.yaml" in str(err.value) and "permissions" in str(err.value)
    finally:
        p.chmod(0o600)


def test_size_limit_named(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text("model: gpt2\n# " + "x" * MAX_INPUT_BYTES + "\n")
    with pytest.raises(InputError) as err:
        load_scenario(p)
    assert "1 MiB" in str(err.value) and "big.yaml" in str(err.value)


def test_not_utf8(tmp_path):
    p = tmp_path / "latin.yaml"
    p.write_bytes(b"model: caf\xe9\n")
    with pytest.raises(InputError, match="not UTF-8"):
        load_scenario(p)


def test_syntax_error_quotes_a_short_excerpt(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("model: gpt2\nhardware: {gpu: [" + "h100-sxm, " * 2000 + "\n")
    with pytest.raises(InputError, match="not valid YAML") as err:
        load_scenario(p)
    assert len(str(err.value)) < 400


def test_huge_values_are_quoted_as_excerpts(tmp_path):
    p = tmp_path / "long.json"
    p.write_text(json.dumps({"model": "gpt2", "hardware": {"gpu": "h100-sxm"}, "train": {"seq_len": "9" * 400}}))
    with pytest.raises(InputError, match="train.seq_len") as err:
        load_scenario(p)
    assert "9" * 100 not in str(err.value) and "10,485,760" in str(err.value)


def test_excerpt_is_bounded():
    assert len(excerpt("a" * 10_000)) <= 60
    assert excerpt(10 ** 400) == "an integer with 401 digits"
    nested: list = []
    for _ in range(5):
        nested = [nested] * 100
    assert len(excerpt(nested)) <= 60


def test_invalid_and_overlong_paths():
    with pytest.raises(InputError, match="not a valid path"):
        load_scenario("bad\0name.yaml")
    with pytest.raises(InputError) as err:
        load_scenario("x" * 5000 + ".yaml")
    assert len(str(err.value)) < 500


@pytest.mark.parametrize("text, why", [
    ("a: [" + ", ".join(["1"] * 300_000) + "]\n", "more than 10,000 values"),    # ~0.9 MB of plain values
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", "levels deep"),
])
def test_huge_or_deep_yaml_refused_quickly(tmp_path, text, why):
    p = tmp_path / "huge.yaml"
    p.write_text(text)
    err, took = _fails_fast(lambda: load_scenario(p))
    assert why in str(err) and took < 1.0
