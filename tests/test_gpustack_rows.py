"""Facts the GPUStack performance-lab rows of serve-load.csv carry from their pages (gpustack/gpustack at
47277d79f4a5bae12a2d25e9ecbed2a2177a5f2d, docs/performance-lab/qwen3-{14b,32b}/{a100,h100}.md)."""
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "validation" / "gathered" / "serve-load.csv"
sys.path.insert(0, str(ROOT / "scripts"))


def _rows():
    with CSV.open(newline="", encoding="utf-8") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_gp10_states_the_pages_max_model_len():
    # the A100 page's ShareGPT serving script is `vllm serve Qwen/Qwen3-32B --max-model-len 32768`; the H100
    # page's is the bare `vllm serve Qwen/Qwen3-32B`
    import validate_serving_load as v
    rows = _rows()
    assert v.scenario(rows["GP10"])["infer"].get("max_model_len") == 32768
    assert "max_model_len" not in v.scenario(rows["GP13"])["infer"]


def test_random_dataset_rows_are_fixed_length_and_unscored():
    # the pages' random-dataset cases (GR rows) run fixed --random-input-len / --random-output-len: the
    # script must simulate them at fixed lengths, and they stay out of the scored medians
    import validate_serving_load as v
    gr = [r for k, r in _rows().items() if k.startswith("GR")]
    assert len(gr) == 16
    for r in gr:
        assert not r["scored"].startswith("yes")
        load = v.scenario(r)["infer"]["load"]
        assert load["input"]["dist"] == "fixed" and load["output"]["dist"] == "fixed"
        # the page's own totals: mean x requests within rounding of the stated token totals' scale
        assert float(r["input_mean_tokens"]) in (32000.0, 3995.9, 1996.3, 127.7)


def test_vllm_0110_chat_rows_parse_their_chat_template():
    # vLLM 0.11.0 parses the Jinja chat template of every chat request (estimate/engine_host.py); the pages' vLLM
    # rows are 0.11.0 on /v1/chat/completions with Qwen3's template; gpt-oss (GX) goes through harmony instead,
    # and the SGLang source's vLLM 0.6.0 rows are another version
    import validate_serving_load as v
    rows = _rows()
    parsing = {k for k, r in rows.items() if v.parses_chat_template(r)}
    assert {"GP01", "GP04", "GP07", "GP10", "GP13"} <= parsing
    assert not parsing & {"GX01", "GX02", "SG02", "GP02", "GP03", "GP05", "NV01"}
    assert v.scenario(rows["GP07"])["infer"]["chat_template_parse"] is True
    assert "chat_template_parse" not in v.scenario(rows["GX01"])["infer"]


def test_a100_128_token_burst_is_the_template_parse():
    # GR08 (unscored: 1000 random 128-token chat requests at once, 4 output tokens, Qwen3-14B on an A100, vLLM
    # 0.11.0): the page measures a mean TTFT of 19,451.5 ms. Its prompts are 128k tokens in all, a few seconds
    # of prefill; 1000 template parses of 9.81 ms hold the burst 9.81 s before the first one reaches the engine
    import validate_serving_load as v
    row = _rows()["GR08"]
    with_parse = v.predict(row)["ttft_s"]["mean"] * 1e3
    assert with_parse == __import__("pytest").approx(19451.5, rel=0.15)
