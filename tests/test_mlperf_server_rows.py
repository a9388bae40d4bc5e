"""The MLPerf Inference v4.1 Server rows of serve-load.csv (ML01 DGX-H100, ML02 H200) against the numbers their
submission states (mlcommons/inference_results_v4.1 at a2f5d66d17e8f75c02fd74dfe810ecca6a046696, closed/NVIDIA).
Every expected value below was read in those files, not computed by gpuplan; the citations name the file."""
import csv
from pathlib import Path

from script_module import load_script

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "validation" / "gathered" / "serve-load.csv"
V = load_script("scripts/validate_serving_load.py")

# (results/<system>/<benchmark>/Server/performance/run_1/mlperf_log_summary.txt and mlperf_log_detail.txt;
#  configs/llama2-70b/Server/__init__.py; configs/llama2-70b/Offline/__init__.py; Offline/.../mlperf_log_summary.txt)
SUBMISSION = {
    "ML01": dict(gpus=8, tensor_parallelism=2, gpu_batch_size=1024, offline_gpu_batch_size=896,
                 scheduled_samples_per_s=75.10, completed_samples_per_s=74.42, completed_tokens_per_s=21605.79,
                 generated_query_count=196608, mean_first_token_ns=275926440, mean_tpot_ns=154960329,
                 offline_samples_per_s=84.4792),
    "ML02": dict(gpus=8, tensor_parallelism=1, gpu_batch_size=896, offline_gpu_batch_size=806,
                 scheduled_samples_per_s=101.25, completed_samples_per_s=100.35, completed_tokens_per_s=29228.22,
                 generated_query_count=245760, mean_first_token_ns=198269106, mean_tpot_ns=123263268,
                 offline_samples_per_s=107.477),
}


def _rows():
    with CSV.open(newline="", encoding="utf-8") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_rows_carry_the_submissions_measurements():
    rows = _rows()
    for rid, sub in SUBMISSION.items():
        r = rows[rid]
        # loadgen reports the mean first-token latency and the mean per-query TPOT (results.cc: the per-sample
        # (latency - first token) / (tokens - 1), summed and divided by the sample count)
        assert r["statistic"] == "mean"
        assert float(r["ttft_ms"]) == round(sub["mean_first_token_ns"] / 1e6, 2)
        assert float(r["tpot_ms"]) == round(sub["mean_tpot_ns"] / 1e6, 2)
        assert float(r["rate_per_s"]) == sub["scheduled_samples_per_s"]
        assert float(r["requests_per_s"]) == sub["completed_samples_per_s"]
        assert float(r["offline_requests_per_s"]) == sub["offline_samples_per_s"]
        # output tokens per query: the run's completed tokens/s over its completed samples/s
        assert abs(float(r["output_mean_tokens"]) - sub["completed_tokens_per_s"] / sub["completed_samples_per_s"]) < 0.05
        # MLPerf's llama2-70b Server latency constraints: TTFT p99 2 s, TPOT p99 200 ms (summary: ttft_latency /
        # tpot_latency in ns)
        assert (float(r["slo_ttft_p99_ms"]), float(r["slo_tpot_p99_ms"])) == (2000.0, 200.0)


def test_rows_carry_the_submissions_engine_settings():
    rows = _rows()
    for rid, sub in SUBMISSION.items():
        r = rows[rid]
        assert int(r["gpus"]) == sub["gpus"] and int(r["tp"]) == sub["tensor_parallelism"]
        assert int(r["max_num_seqs"]) == sub["gpu_batch_size"]
        assert int(r["offline_max_num_seqs"]) == sub["offline_gpu_batch_size"]
        # configs/llama2-70b/__init__.py max_num_tokens 4096; main_llm.cc --trtllm_batch_sched_policy default
        # max_util (code/llama2-70b/tensorrt/harness.py does not pass it); README.md quantises with
        # --kv_cache_dtype fp8; Server/__init__.py kvcache_free_gpu_mem_frac 0.90
        assert int(r["max_num_batched_tokens"]) == 4096
        assert r["capacity_scheduler"] == "max_utilization"
        assert r["kv_cache"] == "fp8" and r["weights"] == "fp8"
        assert float(r["gpu_memory_utilization"]) == 0.9


def test_requests_are_the_whole_run_split_over_the_replicas():
    # mlperf_log_detail.txt generated_query_count: every query of the run enters the means, and the harness's
    # load balancer (llm_server.cc, traffic_distribution_policy 2) spreads them over the replicas
    rows = _rows()
    for rid, sub in SUBMISSION.items():
        n = V.replicas(rows[rid])
        assert n == sub["gpus"] // sub["tensor_parallelism"]
        assert int(rows[rid]["requests"]) * n == sub["generated_query_count"]


def test_simulated_scenario_is_the_in_process_cpp_harness():
    # the C++ harness calls the engine in-process (no HTTP front end), through the C++ executor loop (synchronous:
    # no overlap scheduler), with Poisson arrivals at one replica's share of the scheduled rate
    rows = _rows()
    for rid, sub in SUBMISSION.items():
        scn = V.scenario(rows[rid])
        inf = scn["infer"]
        assert inf["front_end"] is False
        assert inf["async_scheduling"] is False
        assert inf["engine"] == "trtllm" and scn["parallel"]["tp"] == sub["tensor_parallelism"]
        load = inf["load"]
        assert load["arrival"] == "poisson"
        n = sub["gpus"] // sub["tensor_parallelism"]
        assert abs(load["rate_per_s"] - sub["scheduled_samples_per_s"] / n) < 1e-9
        assert load["slo_percentile"] == 99


def test_step_at_the_measured_batch_uses_littles_law_by_hand():
    # ML01: 74.42 / 4 completed samples/s per replica x (0.27593 s + (290.3 - 1) x 0.15496 s) = 839.2 running
    batch, priced, tpot = V.step_at_measured_batch(_rows()["ML01"])
    assert abs(batch - 74.42 / 4 * (0.27593 + 289.3 * 0.15496)) < 0.5
    assert abs(tpot - 0.15496) < 1e-12
    assert priced > 0
