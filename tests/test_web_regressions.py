"""Regressions found by the web sweep (2026-12-04): each test names the request, the symptom and the fix."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from gpuplan.web import create_app  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(isolation="thread"), raise_server_exceptions=False) as c:
        yield c


def error_of(r, status):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert {"what", "why", "fix", "matches", "close_matches", "message"} <= set(err)
    return err


SMALL = {"model": "qwen2.5-0.5b", "task": "infer"}


@pytest.mark.parametrize("method,path,body,route", [
    # an unknown GPU anywhere: the library's fix said "run `gpuplan gpus` ... or add a row with
    # use_user_catalog()/GPUPLAN_GPUS_CSV" -- a CLI command and a server-side setting a web client cannot use
    ("get", "/api/gpus/zzz", None, "GET /api/gpus"),
    ("post", "/api/estimate", {**SMALL, "hardware": {"gpu": "zzz"}}, "GET /api/gpus"),
    ("post", "/api/recommend", {"scenario": SMALL, "gpus": ["zzz"]}, "GET /api/gpus"),
    ("post", "/api/compare", {"scenario": SMALL, "gpus": ["zzz"]}, "GET /api/gpus"),
    # an unknown field in a recommend scenario: "`gpuplan schema` lists the fields"
    ("post", "/api/recommend", {"scenario": {**SMALL, "bogus": 1}}, "GET /api/schema"),
])
def test_web_errors_point_at_web_routes_not_cli_commands(client, method, path, body, route):
    r = client.get(path) if method == "get" else client.post(path, json=body)
    err = error_of(r, 400)
    text = " ".join((err["why"], err["fix"], err["message"]))
    assert "`gpuplan gpus`" not in text and "`gpuplan schema`" not in text
    assert "GPUPLAN_GPUS_CSV" not in text and "use_user_catalog" not in text
    assert route in err["fix"] or route in err["why"]


def test_web_pointers_leave_run_locally_advice_alone():
    from gpuplan.web.jobs import error_body
    body = error_body("x", "is too big.", "or run `gpuplan recommend` locally; `gpuplan presets` lists the presets.")
    assert "`gpuplan recommend` locally" in body["error"]["fix"]
    assert "GET /api/options (presets)" in body["error"]["fix"]


def test_huge_objective_weights_rank_as_their_ratio(client):
    # {"cost": 1e308, "time": 1e308}: the weights' sum overflowed to inf, every weighted score became 0 and the
    # plans came back in cost order (rtx-3060-ti first) instead of the order {"cost": 1, "time": 1} gives;
    # search/rank.score_fn now takes shares of the largest weight before summing
    def order(weights):
        r = client.post("/api/recommend", json={"scenario": SMALL, "objective": weights, "top": 5})
        assert r.status_code == 200, r.text
        return [p["summary"] for p in r.json()["plans"]]
    assert order({"cost": 1e308, "time": 1e308}) == order({"cost": 1, "time": 1})
    assert order({"cost": 1e308, "time": 1e307}) == order({"cost": 10, "time": 1})


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded", "text/json"])
@pytest.mark.parametrize("path,body", [
    ("/api/estimate", b'{"model": "qwen2.5-0.5b", "task": "infer", "hardware": {"gpu": "l4"}}'),
    ("/api/recommend", b'{"scenario": {"model": "qwen2.5-0.5b", "task": "infer"}}'),
])
def test_json_body_sent_without_json_content_type_names_the_header(client, content_type, path, body):
    # a valid JSON body sent as curl -d sends it (application/x-www-form-urlencoded), as text/plain or with no
    # Content-Type: FastAPI hands pydantic the raw bytes and the answer was a 422 "'(top level)' Input should be a
    # valid dictionary or object to extract fields from"; now a 415 that names the header and the fix
    r = client.post(path, content=body, headers={"content-type": content_type} if content_type else {})
    err = error_of(r, 415)
    assert err["what"] == "Content-Type header" and "application/json" in err["fix"]
    assert (content_type or "missing") in err["why"]
    ok = client.post(path, content=body, headers={"content-type": "application/json"})
    assert ok.status_code == 200, ok.text


def test_415_is_documented(client):
    spec = client.get("/openapi.json").json()
    assert "415" in spec["paths"]["/api/estimate"]["post"]["responses"]


def test_slurm_with_an_inner_engine_it_cannot_wrap_says_which_it_can(client):
    # /api/launch {"engine": "slurm", "inner": "trl"} on a training scenario answered "slurm wraps a training
    # engine." (trl is one) with "pass one of them as the inner engine: Engines that can: ..."; the set comes from
    # launch/slurm.LAUNCH_SCRIPT (the engines it writes a job step for)
    scn = {"model": "qwen2.5-0.5b", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 8}}
    err = error_of(client.post("/api/launch", json={"scenario": scn, "engine": "slurm", "inner": "trl"}), 422)
    assert "wraps a training engine" not in err["why"] and "'trl'" in err["why"]
    assert err["fix"] == "pass one of torchrun, hf, deepspeed, megatron as the inner engine."
    ok = client.post("/api/launch", json={"scenario": scn, "engine": "slurm", "inner": "hf"})
    assert ok.status_code == 200, ok.text


def test_launch_task_mismatch_names_the_request_field_not_the_cli_flag(client):
    # /api/launch {"engine": "slurm"} on an inference scenario: the fix said "pass --engine for a serving engine"
    scn = {"model": "qwen2.5-0.5b", "task": "infer", "hardware": {"gpu": "l4", "count": 1}}
    err = error_of(client.post("/api/launch", json={"scenario": scn, "engine": "slurm"}), 422)
    assert "--engine" not in err["fix"] and 'set "engine" to a serving engine' in err["fix"]


def test_rl_recommend_without_hardware_names_the_request_body(client):
    # /api/recommend on examples/grpo-7b-colocated.yaml without its hardware section: the error's 'what' was
    # "scenario (dict)" (the library's default source label) and its fix pointed at `gpuplan schema`
    import yaml
    with open("examples/grpo-7b-colocated.yaml") as f:
        scn = yaml.safe_load(f)
    scn.pop("hardware")
    err = error_of(client.post("/api/recommend", json={"scenario": scn}), 400)
    assert err["what"] == "scenario in the request body" and "'hardware' is required" in err["why"]
    assert "GET /api/schema" in err["fix"]
