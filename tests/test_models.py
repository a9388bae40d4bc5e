"""ModelSpec: exact parameter counts, KV cache and FLOPs, registry resolution and errors."""
import csv
import json

import pytest

from gpuplan.errors import InputError, UnknownNameError, UnsupportedError
from gpuplan.models import get_model, list_models, registry_config, spec_from_config
from gpuplan.models.registry import registry

from conftest import VALIDATION

PARAM_ROWS = list(csv.DictReader(open(VALIDATION / "params.csv", encoding="utf-8")))


@pytest.mark.parametrize("row", PARAM_ROWS, ids=[r["model"] for r in PARAM_ROWS])
def test_params_csv_exact(row):
    """Every public params.csv row: total, active, embedding and lm_head counts to the parameter."""
    m = get_model(row["hf_repo"])
    assert m.params_total == int(row["computed_total_params"])
    assert m.params_active == int(row["computed_active_params"])
    assert m.params_embedding == int(row["computed_embedding_params"])
    assert m.params_lm_head == int(row["computed_lm_head_params"])


def test_published_exact_values_with_buffers():
    """Where a published count includes stored buffers, the difference is exactly those buffers."""
    gpt2 = get_model("gpt2")
    # HF checkpoint stores a causal-mask buffer of n_positions^2 per layer
    assert gpt2.params_total + 12 * 1024 * 1024 == 137022720
    llama2 = get_model("llama-2-7b-hf")
    # Llama-2 checkpoints saved rotary inv_freq (head_dim/2 per layer)
    assert llama2.params_total + 32 * 64 == 6738417664


def test_registry_has_40_models_and_all_build():
    entries = registry()
    assert len(entries) >= 40
    for e in entries:
        m = get_model(e.name)
        assert m.params_total > 0 and m.num_layers > 0


def test_short_names_hf_ids_and_aliases_resolve_to_same_spec():
    a, b = get_model("llama-3.1-8b"), get_model("meta-llama/Llama-3.1-8B")
    assert a.params_total == b.params_total == 8030261248
    assert get_model("LLAMA-3.1-8B").params_total == a.params_total
    assert get_model("llama-2-7b").params_total == get_model("llama-2-7b-hf").params_total
    assert get_model("mixtral-8x7b").num_experts == 8


def test_kv_cache_gqa_mla_and_windows():
    assert get_model("llama-3.1-8b").kv_cache_bytes_per_token() == 2 * 32 * 8 * 128 * 2       # 128 KiB
    assert get_model("llama-3.1-70b").kv_cache_bytes_per_token() == 2 * 80 * 8 * 128 * 2
    # MLA stores one latent (kv_lora_rank + rope dim) per layer: 61 x 576 x 2 bytes
    assert get_model("deepseek-v3").kv_cache_bytes_per_token() == 61 * (512 + 64) * 2 == 70272
    # Qwen3 takes head_dim from the config (128), not hidden/heads
    q = get_model("qwen3-8b")
    assert q.head_dim == 128 and q.kv_cache_bytes_per_token() == 2 * 36 * 8 * 128 * 2
    # gpt-oss alternates sliding (128) and full layers: logical need at 4096 tokens
    g = get_model("gpt-oss-20b")
    per_layer_token = 2 * 8 * 64 * 2
    assert g.kv_cache_bytes(4096) == per_layer_token * (12 * 128 + 12 * 4096)
    assert g.kv_cache_bytes_per_token() == 24 * per_layer_token


def test_moe_active_counts():
    m = get_model("mixtral-8x7b-v0.1")
    assert m.params_total == 46702792704 and m.params_active == 12879925248
    d = get_model("deepseek-v3")
    assert d.params_active == 37552297472


def test_flops_per_token_matches_2n_plus_attention():
    m = get_model("llama-3.1-8b")
    n_matmul = m.params_total - m.params_embedding - sum(b.total for b in m.blocks if b.kind == "norm")
    attn = 2 * 32 * (128 + 128) * 32 * (2048 + 1) / 2
    assert m.flops_per_token_forward(2048) == pytest.approx(2 * n_matmul + attn)


def test_unknown_model_type_lists_supported_families():
    with pytest.raises(UnsupportedError) as err:
        spec_from_config({"model_type": "xlstm", "hidden_size": 8})      # (RWKV is read since)
    assert "llama" in str(err.value) and "xlstm" in str(err.value)


def test_bad_sizes_are_clear_errors():
    cfg = dict(registry_config(registry()[0]))
    cfg.update(model_type="llama", hidden_size=0, num_hidden_layers=2, num_attention_heads=2, vocab_size=10)
    with pytest.raises(InputError, match="hidden_size"):
        spec_from_config(cfg)
    with pytest.raises(InputError, match="model_type"):
        spec_from_config({"hidden_size": 8})


def test_unknown_name_offers_close_matches():
    with pytest.raises(UnknownNameError) as err:
        get_model("lama-3.1-8b")
    assert "llama-3.1-8b" in str(err.value)


def test_config_path_and_malformed_json(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(registry_config(registry()[0])))
    assert get_model(str(p)).params_total == get_model(registry()[0].name).params_total
    assert get_model(str(tmp_path)).params_total == get_model(str(p)).params_total
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        get_model(str(bad))
    with pytest.raises(InputError, match="does not exist"):
        get_model(str(tmp_path / "missing.json"))


def test_hub_lookup_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("GPUPLAN_OFFLINE", "1")
    with pytest.raises(UnknownNameError, match="offline"):
        get_model("someorg/some-model")


def test_list_models_search():
    # the search matches the name or the HF id (registry.list_models): Qwen/QwQ-32B is listed as qwq-32b
    assert all("qwen" in e.name or "qwen" in e.hf_id.lower() for e in list_models("qwen"))
    assert "qwq-32b" in {e.name for e in list_models("qwen")}
    assert len(list_models("qwen")) >= 10
