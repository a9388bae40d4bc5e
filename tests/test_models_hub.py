"""Hub look-ups without network: HF_HUB_OFFLINE honoured, a clear error in under 2 s, the cache used."""
import json
import socket
import time

import pytest

from gpuplan.errors import UnknownNameError
from gpuplan.models import get_model, hub
from gpuplan.models.registry import registry, registry_config

pytest.importorskip("huggingface_hub")


@pytest.fixture
def online(monkeypatch, tmp_path):
    """Hub look-ups allowed, an empty huggingface_hub cache in tmp_path."""
    import huggingface_hub.constants as c
    for var in ("GPUPLAN_OFFLINE", "HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def _timed_error(model):
    t0 = time.monotonic()
    with pytest.raises(UnknownNameError) as err:
        get_model(model)
    return time.monotonic() - t0, str(err.value)


def test_refused_endpoint_fails_fast_and_says_why(online, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")      # discard port: nothing listens
    wall, msg = _timed_error("someorg/some-model")
    assert wall < 2.0
    assert "cannot be reached" in msg and "127.0.0.1:9" in msg and "HF_HUB_OFFLINE" in msg


def test_silent_network_fails_within_the_probe_timeout(online, monkeypatch):
    # a black-holed network: the connect (and name resolution) never answers
    def hang(*args, **kwargs):
        time.sleep(30)
    monkeypatch.setattr(socket, "create_connection", hang)
    wall, msg = _timed_error("someorg/some-model")
    assert wall < 2.0
    assert "no answer from huggingface.co:443" in msg


def test_hf_hub_offline_is_honoured_with_huggingface_hub_truth_values(online, monkeypatch):
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("offline must not touch the network"))
    for value in ("1", "true", "YES", "on"):
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
        wall, msg = _timed_error("someorg/some-model")
        assert wall < 2.0 and "offline" in msg and "HF_HUB_OFFLINE" in msg
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert not hub.offline()


def test_offline_reads_the_huggingface_cache(online, monkeypatch):
    entry = registry()[0]
    snap = online / "models--someorg--cached-model" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(registry_config(entry)))
    (online / "models--someorg--cached-model" / "refs").mkdir()
    (online / "models--someorg--cached-model" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    m = get_model("someorg/cached-model")
    assert m.params_total == get_model(entry.name).params_total
    assert m.hf_id == "someorg/cached-model"


def test_proxy_is_probed_instead_of_the_endpoint(monkeypatch):
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "proxy.example:3128")
    assert hub.probe_target("https://huggingface.co") == "http://proxy.example:3128"
    monkeypatch.setenv("NO_PROXY", ".huggingface.co")
    assert hub.probe_target("https://huggingface.co") == "https://huggingface.co"
