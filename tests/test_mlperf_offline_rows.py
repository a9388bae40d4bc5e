"""The MLPerf Inference Offline rows (validation/gathered/mlperf-offline.csv) against the numbers their submissions
state. Every expected value below was read in the submission files (mlcommons/inference_results_v4.1 at
a2f5d66d17e8f75c02fd74dfe810ecca6a046696 and mlcommons/inference_results_v5.1 at
965182b03376a00fcae415c54e560e1c83937932, closed/NVIDIA: results/<system>/llama2-70b-99/Offline/performance/run_1/
mlperf_log_summary.txt, systems/<system>.json, configs/...), not computed by gpuplan."""
import csv
import re
from datetime import date
from pathlib import Path

from script_module import load_script

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "validation" / "gathered" / "mlperf-offline.csv"
V = load_script("scripts/validate_mlperf_offline.py")

V41 = "a2f5d66d17e8f75c02fd74dfe810ecca6a046696"
V51 = "965182b03376a00fcae415c54e560e1c83937932"
# id: (commit, system, accelerators_per_node, tensor_parallelism, gpu_batch_size, Samples/s, Tokens/s, scored)
SUBMISSION = {
    "MO01": (V41, "DGX-H100_H100-SXM-80GBx8_TRT", 8, 2, 896, 84.4792, 24524.9, True),
    "MO02": (V41, "H200-SXM-141GBx8_TRT", 8, 1, 806, 107.477, 31302.7, True),
    "MO03": (V41, "GH200-GraceHopper-Superchip_GH200-144GB_aarch64x1_TRT", 1, 1, 806, 13.9658, 4067.52, True),
    "MO04": (V41, "H200-SXM-141GB-CTSx1_TRT", 1, 1, 850, 15.4091, 4487.88, False),
    "MO05": (V41, "H200-SXM-141GB-CTSx8_TRT", 8, 1, 784, 119.706, 34864.2, False),
    "MO06": (V41, "H200-SXM-141GBx8_TRT_MaxQ", 8, 1, 806, 86.7369, 25262.1, False),
    "MO07": (V41, "H200-SXM-141GBx8_TRT_Triton", 8, 1, 806, 106.642, 31059.3, False),
    "MO08": (V41, "B200-SXM-180GBx1_TRT", 1, 1, None, 41.1075, 11264.4, False),
    "MO09": (V51, "B200-SXM-180GBx8_TRT", 8, 1, 2048, 371.423, 101527.0, True),
    "MO10": (V51, "GB200-NVL72_GB200-186GB_aarch64x4_TRT", 4, 1, 2048, 187.748, 51736.9, True),
}
# the systems' accelerator_model_name -> gpuplan catalog id (hardware/data/gpus.csv)
CATALOG = {"DGX-H100": "h100-sxm", "H200-SXM": "h200-sxm", "GH200": "gh200-144gb", "B200": "b200", "GB200": "gb200"}


def _rows():
    with CSV.open(newline="", encoding="utf-8") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_every_row_is_pinned_to_its_submission_commit_and_dated():
    rows = _rows()
    assert set(rows) == set(SUBMISSION)
    for rid, (commit, system, *_rest) in SUBMISSION.items():
        r = rows[rid]
        repo = "inference_results_v4.1" if commit == V41 else "inference_results_v5.1"
        assert r["source_url"] == (f"https://github.com/mlcommons/{repo}/blob/{commit}/closed/NVIDIA/results/{system}/"
                                   "llama2-70b-99/Offline/performance/run_1/mlperf_log_summary.txt")
        assert r["settings_url"].startswith(f"https://github.com/mlcommons/{repo}/blob/{commit}/closed/NVIDIA/configs/")
        assert r["system"] == system
        date.fromisoformat(r["retrieved"])
        assert re.fullmatch(r"20\d\d-\d\d \(MLPerf Inference v\d\.\d\)", r["published"])


def test_rows_carry_the_submissions_measurements():
    rows = _rows()
    for rid, (_c, _s, gpus, tp, batch, sps, tps, _scored) in SUBMISSION.items():
        r = rows[rid]
        assert float(r["measured_samples_per_s"]) == sps
        assert float(r["measured_output_tokens_per_s"]) == tps
        # output tokens per sample: the run's Tokens per second over its Samples per second
        assert abs(float(r["output_mean_tokens"]) - tps / sps) < 0.05


def test_rows_carry_the_submissions_engine_settings():
    rows = _rows()
    for rid, (commit, _s, gpus, tp, batch, *_rest) in SUBMISSION.items():
        r = rows[rid]
        assert int(r["gpus"]) == gpus and int(r["tp"]) == tp and int(r["pp"]) == 1
        assert r["max_num_seqs"] == ("" if batch is None else str(batch))
        assert r["engine"] == "trtllm" and r["trtllm_backend"] == "tensorrt"
        assert r["capacity_scheduler"] == "max_utilization" and r["kv_cache"] == "fp8"
        if commit == V41:
            # configs/llama2-70b/__init__.py max_num_tokens 4096; Offline/__init__.py kvcache_free_gpu_mem_frac 0.90,
            # use_fp8; llm_core.cc sets no context chunking
            assert (int(r["max_num_tokens"]), float(r["gpu_memory_utilization"])) == (4096, 0.9)
            assert r["weights"] == "fp8" and r["chunked_context"] == "no"
        else:
            # configs/<system>/Offline/llama2-70b.py: max_num_tokens 3584, kvcache_free_gpu_mem_frac 0.95,
            # precision fp4, enable_chunked_context True
            assert (int(r["max_num_tokens"]), float(r["gpu_memory_utilization"])) == (3584, 0.95)
            assert r["weights"] == "nvfp4" and r["chunked_context"] == "yes"


def test_gpu_ids_are_catalog_ids_and_match_the_system():
    from gpuplan.hardware import get_gpu
    rows = _rows()
    for rid, r in rows.items():
        assert get_gpu(r["gpu"]).id == r["gpu"]
        system = r["system"]
        key = next(k for k in sorted(CATALOG, key=len, reverse=True) if k in system)
        assert r["gpu"] == CATALOG[key], rid


def test_scored_rows_and_the_reasons_for_the_others():
    rows = _rows()
    for rid, (*_rest, scored) in SUBMISSION.items():
        r = rows[rid]
        assert r["scored"] == ("yes" if scored else "no")
        assert ("NOT SCORED: " in r["notes"]) == (not scored)


def test_input_mean_is_the_cited_dataset_mean():
    # the processed OpenOrca set's input tokens sum to 5,463,976 over its 24,576 samples (digest-pinned extraction
    # in FlashLab-MBZUAI/HBFSim, cited in the row): 5463976 / 24576 = 222.33 by hand
    for r in _rows().values():
        assert float(r["input_mean_tokens"]) == 222.3
        assert "5,463,976" in r["lengths_basis"] and "24,576" in r["lengths_basis"]
        assert "96cf1b37cd60e8fabb77967a591cf60edb8d1f23" in r["lengths_basis"]


def test_replicas_split_the_system():
    rows = _rows()
    assert V.replicas(rows["MO01"]) == 4      # 8 GPUs as tp 2
    assert V.replicas(rows["MO09"]) == 8
    assert V.replicas(rows["MO10"]) == 4


def test_simulated_scenario_is_the_offline_run_of_the_cpp_executor():
    # MLPerf Offline: every sample queued at t = 0; NVIDIA's harnesses call TensorRT engines through the C++ executor
    # in the loadgen's process (v4.1 main_llm.cc; v5.1 llmlib trtllm_executor_core.py), no HTTP front end, no overlap
    rows = _rows()
    for rid in ("MO01", "MO09"):
        r = rows[rid]
        scn = V.vsl.scenario(V.as_load_row(r))
        inf = scn["infer"]
        assert inf["load"]["arrival"] == "offline"
        assert inf["trtllm_backend"] == "tensorrt" and inf["front_end"] is False and inf["async_scheduling"] is False
        assert inf["max_num_seqs"] == int(r["max_num_seqs"])
        assert inf["max_num_batched_tokens"] == int(r["max_num_tokens"])
        assert inf["capacity_scheduler"] == "max_utilization"
        assert inf["gpu_memory_utilization"] == float(r["gpu_memory_utilization"])
        assert (inf["weights"], inf["kv_cache"]) == (r["weights"], "fp8")
        assert scn["parallel"]["tp"] == int(r["tp"])
