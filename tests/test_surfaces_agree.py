"""The same question gets the same answer through every surface (issue 18's regressions): a calibration
profile changes estimate, train, serve and recommend alike; serve and estimate agree on fit and on the
batch that runs; the web answers what the CLI answers."""
import json

import pytest

from gpuplan import pipeline
from gpuplan.cli import main
from gpuplan.hardware import get_gpu

TRAIN = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--count", "8", "--task", "train", "--seq-len", "4096"]
SERVE = ["--model", "llama-3.3-70b-instruct", "--gpu", "h100-sxm", "--count", "2", "--tp", "2", "--task", "infer",
         "--weights", "bf16", "--kv-cache", "bf16", "--prompt-len", "2048", "--output-len", "512"]


@pytest.fixture
def slow_profile(tmp_path):
    gpu = get_gpu("h100-sxm")
    data = {"schema": "gpuplan.hardware-profile/1", "gpu_name": gpu.name, "gpu_id": "h100-sxm", "gpu_count": 1,
            "created": "2026-12-02T00:00:00Z", "torch_version": "2.13.0", "cuda_version": "13.0",
            "matmul_flops_per_s": {"bf16": 0.3 * gpu.peak_flops_per_s["bf16"]},
            "memory_bandwidth_bytes_per_s": 0.4 * gpu.mem_bandwidth_bytes_per_s}
    p = tmp_path / "slow.json"
    p.write_text(json.dumps(data))
    return str(p)


def _json(capsys, argv):
    rc = main([*argv, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["command"] == argv[0]
    return rc, out["result"]


def test_profile_changes_train_exactly_as_estimate(capsys, slow_profile):
    # the bug: a profile changed `estimate` (75 s -> 195 s per step) but not `train`
    _, base = _json(capsys, ["train", *TRAIN])
    _, train = _json(capsys, ["train", *TRAIN, "--profile", slow_profile])
    _, est = _json(capsys, ["estimate", *TRAIN, "--profile", slow_profile])
    assert train["performance"]["step_time_s"] > 1.5 * base["performance"]["step_time_s"]
    assert train["performance"]["step_time_s"] == est["performance"]["step_time_s"]


def test_profile_changes_serve_exactly_as_estimate(capsys, slow_profile):
    _, base = _json(capsys, ["serve", *SERVE, "--concurrency", "8"])
    _, serve = _json(capsys, ["serve", *SERVE, "--concurrency", "8", "--profile", slow_profile])
    _, est = _json(capsys, ["estimate", *SERVE, "--concurrency", "8", "--profile", slow_profile])
    assert serve["performance"]["tpot_s"] > base["performance"]["tpot_s"]
    assert serve["performance"]["tpot_s"] == est["performance"]["tpot_s"]
    row = next(r for r in serve["curve"] if r["concurrency"] == 8)
    assert row["tpot_s"] == pytest.approx(est["performance"]["tpot_s"], rel=1e-12)


def test_profile_from_environment_reaches_recommend(monkeypatch, slow_profile):
    from gpuplan.search import recommend
    part = {"model": "llama-3.1-8b", "task": "finetune", "hardware": {"count": 8},
            "train": {"method": "lora", "seq_len": 2048, "tokens": 1e8}}
    monkeypatch.setenv(pipeline.PROFILE_ENV, slow_profile)
    plan = recommend(part, gpus=["h100-sxm"], top=1, progress=False).plans[0]
    with_profile = pipeline.evaluate(plan.scenario)
    assert plan.estimate["performance"]["step_time_s"] == pytest.approx(with_profile.performance.step_time_s, rel=1e-12)
    monkeypatch.delenv(pipeline.PROFILE_ENV)
    assert with_profile.performance.step_time_s > pipeline.evaluate(plan.scenario).performance.step_time_s


@pytest.mark.parametrize("concurrency", [8, 9, 64])
def test_serve_and_estimate_agree_on_fit_and_batch(capsys, concurrency):
    # the bug: `serve` said a 70B-on-2xH100 plan fits while `estimate` said it does not, and they
    # disagreed on how many requests run at once (9 vs 8)
    rc_e, est = _json(capsys, ["estimate", *SERVE, "--concurrency", str(concurrency)])
    rc_s, serve = _json(capsys, ["serve", *SERVE, "--concurrency", str(concurrency)])
    assert rc_e == rc_s
    assert serve["memory"]["fits"] == est["memory"]["fits"]
    assert serve["performance"] == est["performance"]
    assert serve["memory"]["limits"] == est["memory"]["limits"]


def test_memory_command_matches_estimate(capsys):
    _, mem = _json(capsys, ["memory", *TRAIN])
    _, est = _json(capsys, ["estimate", *TRAIN])
    assert mem["memory"] == est["memory"]


def test_web_estimate_matches_cli(capsys):
    from fastapi.testclient import TestClient

    from gpuplan.web.app import create_app
    _, cli = _json(capsys, ["estimate", *TRAIN])
    with TestClient(create_app(isolation="thread")) as c:
        web = c.post("/api/estimate", json=cli["scenario"]).json()
    assert web["memory"] == cli["memory"]
    assert web["performance"]["step_time_s"] == pytest.approx(cli["performance"]["step_time_s"], rel=1e-12)


def test_web_launch_body_is_the_cli_launch_json(capsys):
    # `gpuplan launch --json` and POST /api/launch answer the same question: the same {engine, files, notes} body,
    # the files' headers carrying the same estimate (it printed {file: text} before 2026-12-04)
    from fastapi.testclient import TestClient

    from gpuplan.web.app import create_app
    _, est = _json(capsys, ["estimate", *SERVE])
    assert est["memory"]["fits"]
    _, cli = _json(capsys, ["launch", *SERVE, "--engine", "vllm"])
    with TestClient(create_app(isolation="thread")) as c:
        web = c.post("/api/launch", json={"scenario": est["scenario"], "engine": "vllm"}).json()
    assert set(cli) == {"engine", "files", "notes"}
    assert web == cli
    # the engine comes back by its canonical name on both surfaces, whatever case the request used
    with TestClient(create_app(isolation="thread")) as c:
        upper = c.post("/api/launch", json={"scenario": est["scenario"], "engine": "VLLM"}).json()
    _, cli_upper = _json(capsys, ["launch", *SERVE, "--engine", "VLLM"])
    assert upper["engine"] == cli_upper["engine"] == "vllm"


def test_recommended_serving_plan_is_what_estimate_says():
    # the bug: several 1-GPU replicas were charged NCCL buffers by `estimate` (8 x b200: 147.2 vs 146.9 GiB)
    # but not by the search, which evaluates one replica
    from gpuplan.search import recommend
    part = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"count": 8},
            "infer": {"prompt_len": 1024, "output_len": 256, "concurrency": 64}}
    for plan in recommend(part, gpus=["h100-sxm", "l40s"], top=3, progress=False).plans:
        again = pipeline.evaluate(plan.scenario)
        assert plan.estimate["memory"]["peak_bytes_per_gpu"] == again.memory.peak_bytes_per_gpu, plan.summary
        assert plan.estimate["performance"]["output_tokens_per_s"] == pytest.approx(
            again.performance.output_tokens_per_s, rel=1e-12)


def test_independent_serving_replicas_hold_no_nccl_buffers():
    one = pipeline.evaluate({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1}})
    eight = pipeline.evaluate({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 8}})
    tp2 = pipeline.evaluate({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 2},
                             "parallel": {"tp": 2}})
    assert eight.memory.components["runtime_overhead"] == one.memory.components["runtime_overhead"]

    def fixed_part(est):     # runtime overhead less the allocator's 5 % reserve of the transient allocations
        c = est.memory.components   # (weights and the KV pool are single blocks: no reserve, docs/model.md)
        return c["runtime_overhead"] - 0.05 * sum(v for k, v in c.items()
                                                  if k not in ("runtime_overhead", "weights", "kv_cache"))
    # a tensor-parallel replica talks to its peer: NCCL's 256 MiB of channel buffers (docs/model.md)
    assert fixed_part(tp2) - fixed_part(one) == pytest.approx(256 * 2**20, abs=2**20)


@pytest.mark.parametrize("path,body", [
    ("/api/estimate", {"model": "qwen2.5-0.5b", "task": "infer", "hardware": {"gpu": "l4"}}),
    ("/api/serving-curve", {"scenario": {"model": "qwen2.5-0.5b", "task": "infer", "hardware": {"gpu": "l4"}},
                            "concurrencies": [1, 4]}),
    ("/api/launch", {"scenario": {"model": "qwen2.5-0.5b", "task": "infer", "hardware": {"gpu": "l4"}},
                     "engine": "vllm"}),
    ("/api/recommend", {"scenario": {"model": "qwen2.5-0.5b", "task": "infer"}, "gpus": ["l4"], "top": 1}),
    ("/api/compare", {"scenario": {"model": "qwen2.5-0.5b", "task": "infer"}, "gpus": ["l4", "a10g"]}),
])
def test_every_web_plan_endpoint_evaluates_through_the_pipeline(path, body, monkeypatch):
    from fastapi.testclient import TestClient

    from gpuplan.web.app import create_app
    calls = []
    real = pipeline.evaluate

    def spy(*a, **k):
        calls.append(a)
        return real(*a, **k)
    monkeypatch.setattr(pipeline, "evaluate", spy)
    with TestClient(create_app(isolation="thread")) as c:     # in-process, so the spy is seen
        calls.clear()                                         # only what the request itself evaluates
        r = c.post(path, json=body)
    assert r.status_code == 200, r.text[:300]
    assert calls, f"{path} did not evaluate through gpuplan.pipeline.evaluate"


@pytest.mark.parametrize("constraints,status,needle", [
    ({"owned": {"h100-sxmm": 2}}, 400, "h100-sxm"),          # same close matches as a scenario file
    ({"providers": ["lambdaa"]}, 400, "lambda"),
    ({"budget_usd": 0}, 422, "budget_usd"),
    ({"deadline_days": -1}, 422, "deadline_days"),
    ({"min_headroom": 2}, 422, "min_headroom"),
])
def test_web_constraints_are_the_scenario_constraints(constraints, status, needle):
    """One Constraints model: the web body refuses what a scenario file's `constraints:` refuses."""
    from fastapi.testclient import TestClient

    from gpuplan.errors import InputError
    from gpuplan.scenario import Constraints
    from gpuplan.web.app import create_app
    with pytest.raises((InputError, ValueError)):
        Constraints.model_validate(constraints)
    with TestClient(create_app(isolation="thread")) as c:
        r = c.post("/api/recommend", json={"scenario": {"model": "qwen2.5-0.5b", "task": "infer"}, "gpus": ["l4"],
                                           "constraints": constraints})
    assert r.status_code == status, r.text[:300]
    assert needle in r.text
