"""`gpuplan models` lists every bundled model quickly and on a core install: the models only the generic
meta-device reader knows are listed from models/meta_counts.csv (scripts/registry_meta_counts.py), which must
hold exactly those models, with the counts a fresh meta-device build gives."""
from __future__ import annotations

import importlib.util
import json

import pytest

from gpuplan.cli import main as cli_main
from gpuplan.models import registry as R
from script_module import load_script


def _core_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("torch", "transformers") else real(name, *a))


def test_models_lists_every_entry_without_transformers(monkeypatch, capsys):
    _core_install(monkeypatch)
    assert cli_main(["models", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["result"]["models"]
    assert {m["name"] for m in listed} == {e.name for e in R.registry()}
    llava = next(m for m in listed if m["name"] == "llava-1.5-7b")
    assert llava["model_type"] == "llava" and llava["params_total"] > 7e9


def test_meta_counts_hold_exactly_the_meta_read_models_with_fresh_counts():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    script = load_script("scripts/registry_meta_counts.py")
    fresh = {e.name: m for e, m in script.meta_read_entries()}
    packaged = R._meta_counts()
    assert set(packaged) == set(fresh), "run scripts/registry_meta_counts.py"
    for name, m in fresh.items():
        row = packaged[name]
        assert (int(row["params_total"]), int(row["params_active"]), row["model_type"]) == \
            (m.params_total, m.params_active, m.model_type)


def test_a_meta_read_model_on_a_core_install_names_the_extra_to_install(monkeypatch, capsys):
    _core_install(monkeypatch)
    assert cli_main(["model", "llava-1.5-7b"]) == 2
    err = capsys.readouterr().err
    assert "torch and transformers, which are not installed" in err and "pip install '.[trace]'" in err
