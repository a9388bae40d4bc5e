"""Facts the NVIDIA NIM rows of serve-load.csv (NV01-NV09: Llama-3.3-70B fp8, 2 x H100, NIM 1.8.0) carry from their
sources. NIM publishes no engine settings for its TensorRT-LLM profiles, so the rows state TensorRT-LLM's C++
executor defaults (NVIDIA/TensorRT-LLM@0165bd7ac275dae69796767cdbb71ce1963506f3
cpp/include/tensorrt_llm/executor/executor.h): KvCacheConfig's free_gpu_memory_fraction "Default is 90%" and
SchedulerConfig's kGUARANTEED_NO_EVICT. The engine's build-time limits are not published and stay unset."""
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "validation" / "gathered" / "serve-load.csv"
sys.path.insert(0, str(ROOT / "scripts"))

NIM_ROWS = [f"NV0{i}" for i in range(1, 10)]
EXECUTOR_FREE_FRACTION = 0.9                      # executor.h KvCacheConfig: "Default is 90%"
EXECUTOR_CAPACITY_POLICY = "guaranteed_no_evict"  # executor.h SchedulerConfig(capacitySchedulerPolicy = kGUARANTEED_NO_EVICT)


def _rows():
    with CSV.open(newline="", encoding="utf-8") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_nim_rows_state_the_executor_defaults():
    rows = _rows()
    for rid in NIM_ROWS:
        r = rows[rid]
        assert float(r["gpu_memory_utilization"]) == EXECUTOR_FREE_FRACTION, rid
        assert r["capacity_scheduler"] == EXECUTOR_CAPACITY_POLICY, rid
        assert "executor.h" in r["notes"] and "0165bd7" in r["notes"], rid


def test_nim_rows_leave_the_unpublished_engine_limits_unset():
    # the prebuilt engine's max_batch_size / max_num_tokens are not on any page reached: no value is invented
    rows = _rows()
    for rid in NIM_ROWS:
        assert rows[rid]["max_num_seqs"] == "" and rows[rid]["max_num_batched_tokens"] == "", rid


def test_nim_rows_run_the_cpp_executor_with_the_stated_pool_share():
    # NIM 1.x's optimized profiles are pre-built TensorRT engines: the synchronous C++ executor loop, and the
    # scenario carries the row's free-memory fraction and capacity policy
    import validate_serving_load as v
    rows = _rows()
    for rid in NIM_ROWS:
        r = rows[rid]
        assert r["engine"] == "trtllm" and r["engine_version"].startswith("NIM 1.8.0"), rid
        assert not v.overlaps_host(r), rid
        infer = v.scenario(r)["infer"]
        assert infer["gpu_memory_utilization"] == EXECUTOR_FREE_FRACTION, rid
        assert infer["capacity_scheduler"] == EXECUTOR_CAPACITY_POLICY, rid
        assert "max_num_seqs" not in infer and "max_num_batched_tokens" not in infer, rid
