"""The gathered llama-bench rows (validation/gathered/llamacpp-bench.csv): every row carries its source URL,
retrieved date and settings, maps to catalog and registry ids, and enters the calibration as the protocol says
(scripts/calibrate_speed.py: CUDA rows fit stage 2, Metal prompt rows fit stage 3 and Metal generation rows are held
out, `unscored:` rows listed only), each at the llama.cpp build its source states."""
import csv
import datetime
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "validation" / "gathered" / "llamacpp-bench.csv"
sys.path.insert(0, str(ROOT / "scripts"))

SETTINGS = ("gpu_as_stated", "backend", "build", "model", "model_file", "weights", "test", "prompt_tokens",
            "gen_tokens", "flash_attn", "threads", "tokens_per_s")


def _rows():
    with CSV.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _scored(rows):
    return [r for r in rows if not r["notes"].startswith("unscored:")]


def test_every_row_names_its_source_date_and_settings():
    for r in _rows():
        # a GitHub pull request or issue: a permanent address (llama.cpp discussions are not in git)
        assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+/(pull|issues)/\d+", r["source_url"]), r["id"]
        datetime.date.fromisoformat(r["retrieved"])
        assert r["published"][:4] in ("2024", "2025", "2026"), r["id"]
        assert r["source"] and r["measured_by"], r["id"]
        for col in SETTINGS:
            assert r[col] != "", (r["id"], col)
        assert float(r["tokens_per_s"]) > 0


def test_test_names_agree_with_the_token_counts():
    # llama-bench's pp<N> processes an N-token prompt, tg<N> generates N tokens, pp<N>+tg<M> both
    for r in _rows():
        parts = dict(re.findall(r"(pp|tg)(\d+)", r["test"]))
        assert int(r["prompt_tokens"]) == int(parts.get("pp", 0)), r["id"]
        assert int(r["gen_tokens"]) == int(parts.get("tg", 0)), r["id"]


def test_scored_rows_map_to_catalog_gpus_registry_models_and_weight_formats():
    from gpuplan.dtypes import weight_format
    from gpuplan.hardware import get_gpu
    from gpuplan.models import get_model
    for r in _scored(_rows()):
        gpu = get_gpu(r["gpu"])
        assert gpu.id == r["gpu"]
        # the backend is the GPU's: Metal on Apple parts, CUDA on NVIDIA ones
        assert (gpu.family == "apple") == (r["backend"] == "Metal"), r["id"]
        assert r["backend"] in ("Metal", "CUDA")
        get_model(r["model"])
        assert weight_format(r["weights"]).family == "gguf", r["id"]


def test_apple_parts_are_the_catalog_core_counts():
    # the catalog's M1 Ultra is the 64-core GPU part and its M3 Ultra the 80-core one: the rows say so
    for r in _scored(_rows()):
        if r["gpu"] == "m1-ultra":
            assert "64-core" in r["gpu_as_stated"]
        if r["gpu"] == "m3-ultra":
            assert "80-core" in r["gpu_as_stated"]


def test_unscored_rows_give_their_reason():
    unscored = [r for r in _rows() if r["notes"].startswith("unscored:")]
    assert {r["id"] for r in unscored} >= {"LB14", "LB18", "LB20", "LB24"}
    for r in unscored:
        assert len(r["notes"]) > len("unscored: ") + 10


def test_bench_kind_reads_llama_bench_test_names():
    import calibrate_speed as cs
    assert cs.bench_kind("pp512") == ("ttft", 512, 1)
    assert cs.bench_kind("tg128") == ("tpot", 1, 128)
    assert cs.bench_kind("pp4096+tg128") is None


def test_calibration_fits_cuda_rows_and_metal_prompt_rows():
    import calibrate_speed as cs
    rows = {r.id: r for r in cs.gathered_lcpp_rows(CSV)}
    for r in _rows():
        if r["notes"].startswith("unscored:") or "+" in r["test"]:
            assert r["id"] not in rows
            continue
        want = "test" if (r["backend"] == "Metal" and r["test"].startswith("tg")) else "fit"
        assert rows[r["id"]].split == want, r["id"]
        assert rows[r["id"]].measured == float(r["tokens_per_s"])
        assert cs.LCPP_STAGE[r["source"]] == ("metal" if r["backend"] == "Metal" else "cuda")
        assert cs.ROW_STAGE[r["id"]] == cs.LCPP_STAGE[r["source"]]


def test_packaged_factors_were_fitted_on_the_cuda_rows_and_the_metal_prompt_rows():
    from gpuplan.estimate import speed
    fit_rows = set(speed.load_efficiency()["provenance"]["fit_rows"])
    cuda = {r["id"] for r in _scored(_rows()) if r["backend"] == "CUDA"}
    metal_pp = {r["id"] for r in _scored(_rows()) if r["backend"] == "Metal" and r["test"].startswith("pp")}
    metal_tg = {r["id"] for r in _rows() if r["backend"] == "Metal" and not r["test"].startswith("pp")}
    assert cuda <= fit_rows
    assert metal_pp <= fit_rows
    assert not metal_tg & fit_rows


@pytest.mark.parametrize("build,published,want", [
    ("4d3726278 (7315)", "2025-12-10", 7315), ("32d9f7d9 (1786)", "2024-01-07", 1786),
    # no number stated: dated before 557410b8 (2024-03-26, build 2540) -> a build before output skipping
    ("PR #4766 head on 2024-01-10 (hash not printed in the comment)", "2024-01-10", 2539),
    ("master on 2025-03-06 (hash not printed in the review)", "2025-03-06", None)])
def test_rows_run_at_the_build_their_source_states(build, published, want):
    import calibrate_speed as cs
    assert cs.lcpp_build(build, published) == want


@pytest.mark.parametrize("rid,value", [("LB01", 11048.22), ("LB07", 127.43), ("LB11", 162.30), ("LB17", 242.56),
                                       ("LB28", 3237.78), ("LB30", 2986.43)])
def test_rows_hold_the_published_numbers(rid, value):
    # PR #4766 (RTX 4090, F16 pp 512), PR #4812 (RTX 3090 Ti, Q4_0 tg 128), beowulf-ai-cluster #17 (M3 Ultra,
    # Llama 3.3 70B Q4_K_M pp512), ai-benchmarks #48 (M1 Ultra, TinyLlama Q4_K_M tg128), PR #10238 (M2 Ultra, Llama
    # 3.2 3B F16 and Q4_0 pp512, the master column), as printed there
    assert float({r["id"]: r for r in _rows()}[rid]["tokens_per_s"]) == value


def test_cuda_and_metal_factors_rest_on_at_least_three_sources():
    # the three-source rule (DESIGN.md §5): the llama.cpp CUDA stage fits GPU-Benchmarks and three llama-bench
    # sources; the Metal stage fits PR #3084, GPU-Benchmarks' Apple prompt rows and the three gathered Metal sources
    # (docs/speed.md §3.32; PR #3084 alone until 2026-12-04)
    import calibrate_speed as cs
    import make_uncertainty as mu
    vdir = ROOT / "validation" / "public"
    rows = cs.train_rows(vdir / "train-throughput.csv") + cs.infer_rows(vdir / "inference.csv")
    rows += cs.gathered_lcpp_rows(CSV)
    fit_sources = {}
    for r in rows:
        if r.split == "fit":
            fit_sources.setdefault(cs.source_key(r.source), set()).add(r.id)
    assert len(mu.stage_sources("llama.cpp CUDA", fit_sources)) == 4
    assert mu.stage_sources("llama.cpp Metal", fit_sources) == [
        "GPU-Benchmarks-on-LLM-Inference (llama.cpp)", "geerlingguy/ai-benchmarks #48 (M1 Ultra)",
        "geerlingguy/beowulf-ai-cluster #17 (M3 Ultra)", "llama.cpp Metal PR #3084",
        "llama.cpp PR #10238 (ggerganov M2 Ultra)"]
    # and no fitted factor anywhere rests on fewer than three (TensorRT-LLM's last one is counted since 2026-12-04,
    # docs/speed.md §3.33): a factor added on one source fails here
    for path, stage in cs.FITTED:
        assert len(mu.stage_sources(stage, fit_sources)) >= 3, path
