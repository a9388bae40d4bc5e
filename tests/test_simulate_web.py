"""The serving-curve endpoint runs the load simulation when the scenario has infer.load."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from gpuplan.web import create_app  # noqa: E402

INFER = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm"},
         "infer": {"weights": "fp8", "concurrency": 16}}


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(time_limit_s=60)) as c:
        yield c


def test_serving_curve_with_load(client):
    scn = {**INFER, "infer": {**INFER["infer"], "load": {"rate_per_s": 5, "requests": 300, "slo_ttft_s": 0.5}}}
    r = client.post("/api/serving-curve", json={"scenario": scn})
    assert r.status_code == 200, r.text
    load = r.json()["load"]
    assert load["requests"] == 300 and load["overloaded"] is False
    assert load["ttft_s"]["p99"] >= load["ttft_s"]["p50"]
    assert load["max_rate_meeting_slo_per_s"] > 0
    assert "load" not in client.post("/api/serving-curve", json={"scenario": INFER}).json()


@pytest.mark.parametrize("load, what", [
    ({"arrival": "trace", "trace": "/etc/passwd"}, "infer.load.trace"),
    ({"rate_per_s": 5, "requests": 1_000_000}, "infer.load.requests"),
])
def test_serving_curve_load_limits(client, load, what):
    scn = {**INFER, "infer": {**INFER["infer"], "load": load}}
    r = client.post("/api/serving-curve", json={"scenario": scn})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["what"] == what
