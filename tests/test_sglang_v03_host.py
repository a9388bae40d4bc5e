"""SGLang 0.3.0 as its scheduler loop runs (docs/serving-load.md, *SGLang 0.3.0's per-step host work*): read in the
sglang-0.3.0 sdist (PyPI sglang-0.3.0.tar.gz). Expected values come from that source and from the timing of
scripts/bench_sglang_v03_host.py on the reference host's generation (7.92 us per running request per decode pass),
not from the code under test:

* without the overlap scheduler (before v0.4) the host work of every running request adds to each step;
* CUDA graphs cover decode batches of at most 160 (model_runner.py:499-502, [1, 2, 4] + 8..160); a larger decode
  batch runs the eager forward, max(GPU, host issue) with vLLM's measured 0.375 ms a layer (its Llama is vLLM's);
* the default running-request cap: min(pool // 2, min(max(int(pool / context x 512), 2048), 5120) - 1)
  (tp_worker.py:126-133, model_runner.py:373-383)."""
import pytest

from gpuplan import pipeline
from gpuplan.estimate import engine_host as eh
from gpuplan.estimate.engine_host import engine_host, sglang_v03_max_running_requests
from gpuplan.estimate.speed import serving_model
from script_module import load_script

vg = load_script("scripts/validate_gathered.py")

SCN = {"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "a100-sxm-80gb", "count": 1},
       "infer": {"engine": "sglang", "prompt_len": 220, "output_len": 194}}


def _sv(**infer):
    r = pipeline.resolve({**SCN, "infer": {**SCN["infer"], **infer}})
    mem = pipeline.memory(r)
    return serving_model(r.scenario, r.model, r.gpu, params=r.speed_params, network=r.network, memory=mem)


def test_constants_as_measured_and_read():
    assert eh.SGLANG_V03_SEQ_S == pytest.approx(7.92e-6)
    assert eh.SGLANG_V03_GRAPH_MAX_BS == 160 == max([1, 2, 4] + [i * 8 for i in range(1, 21)])
    h = engine_host("sglang", async_scheduling=False)
    assert (h.seq_s, h.overlapped) == (pytest.approx(7.92e-6), False)
    assert h.frontend_s == eh.SGLANG.frontend_s            # the front end is SGLang's one constant
    d = engine_host("sglang")                               # the overlap scheduler (v0.4 on): unchanged
    assert (d.seq_s, d.overlapped) == (0.0, True)
    assert engine_host("sglang", async_scheduling=True) == d


def test_max_running_requests_by_hand():
    # Llama 3.1 (131,072 context), a 400k-token pool: int(400000 / 131072 x 512) = 1562 -> 2048 slots -> 2047
    assert sglang_v03_max_running_requests(400_000, 131_072) == 2047
    # a 2M-token pool: 7812 -> capped at 5120 -> 5119 (pool // 2 = 1M does not bind)
    assert sglang_v03_max_running_requests(2_000_000, 131_072) == 5119
    # a 3000-token pool: the request pool is 2048 but pool // 2 = 1500 binds
    assert sglang_v03_max_running_requests(3_000, 4_096) == 1500


def test_host_work_adds_to_the_step_and_large_batches_run_eagerly():
    sv = _sv(async_scheduling=False)
    overlap = _sv()
    assert sv.host_speed == pytest.approx(1.0)             # the A100's default host is the reference host
    for b in (64, 160, 161, 512):
        st = sv.decode_step(b, 330)
        # 7.92 us per running request after the GPU step (no overlap)
        assert st["time"] - st["gpu_time"] == pytest.approx(7.92e-6 * b, rel=1e-9)
        assert overlap.decode_step(b, 330)["time"] == pytest.approx(overlap.decode_step(b, 330)["gpu_time"])
    issue = 1.2 / 100 / 32 * 32                          # 32 layers x 0.375 ms (vLLM PR 1440)
    assert sv.decode_step(160, 330)["host"] == 0.0        # replays a captured graph
    assert sv.decode_step(161, 330)["host"] == pytest.approx(issue, rel=1e-9)
    assert sv.decode_step(161, 330)["gpu_time"] >= issue
    assert overlap.decode_step(161, 330)["host"] == 0.0


def test_default_cap_follows_the_pool():
    sv = _sv(async_scheduling=False)
    pool = sv.kv_capacity_tokens
    assert sv.max_batch == min(int(pool) // 2, min(max(int(int(pool) / 131_072 * 512), 2048), 5120) - 1)
    assert _sv(async_scheduling=False, max_num_seqs=300).max_batch == 300     # stated wins
    assert _sv().max_batch == 1024                                            # overlap: the profile's


def test_validate_gathered_routes_sglang_before_0_4():
    assert vg.sglang_before_overlap("0.3.0")
    assert not vg.sglang_before_overlap("0.4.6.post1 (sgl-kernel 0.1.0, torch 2.6.0+cu124)")
    assert not vg.sglang_before_overlap("")
    row = {"model": "llama-3.1-8b", "gpu": "a100-sxm-80gb", "gpus": "1", "engine": "sglang", "weights": "bf16",
           "kv_cache": "bf16", "prompt_len": "220", "output_len": "194", "concurrency": "5000", "tp": "",
           "max_num_seqs": "", "engine_version": "0.3.0", "source": "", "notes": ""}
    assert vg.serve_scenario(row)["infer"]["async_scheduling"] is False
    assert "async_scheduling" not in vg.serve_scenario(dict(row, engine_version="0.4.6.post1"))["infer"]
