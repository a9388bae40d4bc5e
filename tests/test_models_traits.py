"""ModelSpec traits: read from each family's config.json in models/, and the only thing estimators read.

Expected values are taken from the bundled config.json texts (src/gpuplan/models/configs) and from
the transformers modelling code they describe, written out by hand here, not computed by gpuplan.
"""
import ast
import json
import re
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from gpuplan.errors import InputError
from gpuplan.models import get_model, spec_from_config
from gpuplan.models.spec import SUPPORTED_MODEL_TYPES
from gpuplan.models.traits import (ACTIVATIONS, ATTENTION_KINDS, MLP_KINDS, NORM_DTYPES, NORM_PLACEMENTS,
                                   POSITIONS, QK_NORMS, WINDOW_PATTERNS, Dropout, Traits)

SRC = Path(__file__).resolve().parents[1] / "src" / "gpuplan"
CONFIGS = SRC / "models" / "configs"

# ---- per-family trait tables (hand-checked against the config.json files) -------------------------

# name: (norm_placement, norm_dtype, qk_norm, fused_qkv, activation, mlp, attention, position, parallel_block)
STRUCTURE = {
    "llama-3.1-8b": ("pre", "fp32_upcast", "none", False, "silu", "swiglu", "gqa", "rope", False),
    "llama-2-7b-hf": ("pre", "fp32_upcast", "none", False, "silu", "swiglu", "mha", "rope", False),
    "gemma-2-9b-it": ("sandwich", "fp32", "none", False, "gelu_pytorch_tanh", "geglu", "gqa", "rope", False),
    "gemma-3-1b-it": ("sandwich", "fp32", "per_head", False, "gelu_pytorch_tanh", "geglu", "mqa", "rope", False),
    "gemma-3-4b-it": ("sandwich", "fp32", "per_head", False, "gelu_pytorch_tanh", "geglu", "gqa", "rope", False),
    "falcon-7b-instruct": ("pre", "native", "none", True, "gelu", "plain", "mqa", "rope", True),
    "falcon-40b": ("pre", "native", "none", True, "gelu", "plain", "gqa", "rope", True),
    "gpt2": ("pre", "native", "none", True, "gelu_new", "plain", "mha", "learned", False),
    "gpt-neox-20b": ("pre", "native", "none", True, "gelu_fast", "plain", "mha", "rope", True),
    "qwen3-8b": ("pre", "fp32_upcast", "per_head", False, "silu", "swiglu", "gqa", "rope", False),
    "qwen2.5-7b": ("pre", "fp32_upcast", "none", False, "silu", "swiglu", "gqa", "rope", False),
    "olmo-2-1124-7b": ("post", "fp32_upcast", "full", False, "silu", "swiglu", "mha", "rope", False),
    "phi-3-mini-4k-instruct": ("pre", "fp32_upcast", "none", True, "silu", "swiglu", "mha", "rope", False),
    "deepseek-v3": ("pre", "fp32_upcast", "none", False, "silu", "swiglu", "mla", "rope", False),
    "mixtral-8x7b-v0.1": ("pre", "fp32_upcast", "none", False, "silu", "swiglu", "gqa", "rope", False),
    "gpt-oss-20b": ("pre", "fp32_upcast", "none", False, "silu", "swiglu", "gqa", "rope", False),
}


@pytest.mark.parametrize("name", sorted(STRUCTURE))
def test_structure_traits_per_family(name):
    t = get_model(name).traits
    got = (t.norm_placement, t.norm_dtype, t.qk_norm, t.fused_qkv, t.activation, t.mlp, t.attention, t.position,
           t.parallel_block)
    assert got == STRUCTURE[name]


# name: (final soft-cap, attention soft-cap, dropout (attention, residual, embedding))
NUMBERS = {
    "gemma-2-9b-it": (30.0, 50.0, (0.0, 0.0, 0.0)),     # "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0
    "gemma-2-2b-it": (30.0, 50.0, (0.0, 0.0, 0.0)),
    "gemma-3-1b-it": (None, None, (0.0, 0.0, 0.0)),     # both null in the Gemma-3 config
    "gpt2": (None, None, (0.1, 0.1, 0.1)),              # attn_pdrop, resid_pdrop, embd_pdrop 0.1
    "gpt2-xl": (None, None, (0.1, 0.1, 0.1)),
    "falcon-7b-instruct": (None, None, (0.0, 0.0, 0.0)),  # attention_dropout / hidden_dropout 0.0
    "phi-3-mini-4k-instruct": (None, None, (0.0, 0.0, 0.0)),
    "llama-3.1-8b": (None, None, (0.0, 0.0, 0.0)),
}


@pytest.mark.parametrize("name", sorted(NUMBERS))
def test_softcap_and_dropout_traits(name):
    t = get_model(name).traits
    final, attn, (pa, pr, pe) = NUMBERS[name]
    assert t.final_logit_softcap == final
    assert t.attn_logit_softcap == attn
    assert (t.dropout.attention, t.dropout.residual, t.dropout.embedding) == (pa, pr, pe)


# name: (sliding_window, window_pattern, number of sliding layers, num_layers)
WINDOWS = {
    "gemma-2-9b-it": (4096, "alternate", 21, 42),      # even layers of 42 slide over 4096 tokens
    "gemma-3-1b-it": (512, "every_nth", 26 - 4, 26),    # every 6th layer (6, 12, 18, 24) is global
    "gpt-oss-20b": (128, "layer_types", 12, 24),        # layer_types alternates sliding/full
    "mistral-7b-v0.1": (4096, "all", 32, 32),           # MistralConfig default sliding_window 4096
    "phi-3-mini-4k-instruct": (2047, "all", 32, 32),
    "qwen2.5-7b": (None, "none", 0, 28),                # use_sliding_window false
    "llama-3.1-8b": (None, "none", 0, 32),
}


@pytest.mark.parametrize("name", sorted(WINDOWS))
def test_window_traits(name):
    m = get_model(name)
    size, pattern, sliding, layers = WINDOWS[name]
    assert (m.traits.sliding_window, m.traits.window_pattern) == (size, pattern)
    assert m.num_layers == layers
    assert sum(1 for w in m.layer_windows if w) == sliding


def test_gemma3_global_layers_are_every_sixth():
    m = get_model("gemma-3-1b-it")
    assert [i for i, w in enumerate(m.layer_windows) if w is None] == [5, 11, 17, 23]


# name: (experts, top-k, shared experts, dense layer indices, router in fp32)
MOE = {
    "deepseek-v3": (256, 8, 1, (0, 1, 2), True),        # first_k_dense_replace 3, n_shared_experts 1
    "deepseek-v2-lite": (64, 6, 2, (0,), True),         # first_k_dense_replace 1, n_shared_experts 2
    "qwen3-30b-a3b": (128, 8, 0, (), False),            # mlp_only_layers [], decoder_sparse_step 1
    "mixtral-8x7b-v0.1": (8, 2, 0, (), False),
    "gpt-oss-20b": (32, 4, 0, (), False),
    "llama-3.1-8b": (0, 0, 0, (), False),
}


@pytest.mark.parametrize("name", sorted(MOE))
def test_moe_routing_traits(name):
    m = get_model(name)
    experts, k, shared, dense, fp32 = MOE[name]
    assert (m.num_experts, m.experts_per_tok) == (experts, k)
    assert m.traits.moe_shared_experts == shared
    assert m.traits.moe_dense_layers == dense
    assert m.traits.router_fp32 is fp32
    if experts:
        assert m.num_moe_layers == m.num_layers - len(dense)


def test_falcon7b_is_parallel_mqa_expanded_for_sdpa_like_40b():
    f7, f40 = get_model("falcon-7b-instruct"), get_model("falcon-40b")
    assert f7.num_kv_heads == 1 and f7.num_heads == 71
    # transformers 5.25's FalconAttention goes through the shared SDPA interface (enable_gqa, no mask): no
    # un-expanded single K/V head, so no math path
    assert f7.traits.attention == "mqa" and f7.traits.parallel_block and not f7.traits.sdpa_broadcast_kv
    # new_decoder_architecture: 8 KV groups, expanded before SDPA
    assert f40.num_kv_heads == 8 and f40.traits.attention == "gqa" and not f40.traits.sdpa_broadcast_kv


def test_rope_and_bias_traits():
    assert get_model("llama-3.1-8b").traits.rope_theta == 500000.0
    assert get_model("llama-3.1-8b").traits.rope_scaling == "llama3"
    assert get_model("deepseek-v3").traits.rope_scaling == "yarn"        # uses the old "type" key
    assert get_model("gpt-oss-20b").traits.rope_scaling == "yarn"        # uses "rope_type"
    assert get_model("llama-2-7b-hf").traits.rope_theta == 10000.0       # key absent: LlamaConfig default
    assert get_model("gpt2").traits.rope_theta is None                   # learned positions
    q = get_model("qwen2.5-7b").traits                                   # Qwen2: q/k/v biases only
    assert q.attention_bias and not q.mlp_bias
    assert not get_model("llama-3.1-8b").traits.attention_bias
    assert get_model("gpt-oss-20b").traits.attention_bias                # "attention_bias": true


def test_mla_dimensions():
    v3, lite = get_model("deepseek-v3"), get_model("deepseek-v2-lite")
    assert (v3.q_lora_rank, v3.kv_lora_rank, v3.qk_rope_head_dim, v3.qk_nope_head_dim) == (1536, 512, 64, 128)
    assert lite.q_lora_rank == 0                                         # "q_lora_rank": null
    assert lite.qk_nope_head_dim == 128


def test_every_bundled_model_has_traits_in_the_vocabulary():
    from gpuplan.models import list_models
    for e in list_models():
        t = get_model(e.name).traits
        assert t.norm_placement in NORM_PLACEMENTS and t.norm_dtype in NORM_DTYPES and t.qk_norm in QK_NORMS
        assert t.activation in ACTIVATIONS and t.mlp in MLP_KINDS and t.attention in ATTENTION_KINDS
        assert t.position in POSITIONS and t.window_pattern in WINDOW_PATTERNS
        assert t.gated_mlp == get_model(e.name).gated_mlp, e.name


# ---- reading rules and errors ----------------------------------------------------------------

def _cfg(name):
    return json.loads((CONFIGS / name).read_text(encoding="utf-8"))


def test_gpt2_without_activation_or_dropout_keys_reads_plain_gelu_no_dropout():
    c = {k: v for k, v in _cfg("openai-community__gpt2.json").items()
         if k not in ("activation_function", "resid_pdrop", "embd_pdrop", "attn_pdrop")}
    t = spec_from_config(c).traits
    assert t.activation == "gelu"
    assert t.dropout == Dropout()


def test_dropout_probability_changes_only_dropout():
    c = _cfg("openai-community__gpt2.json")
    t = spec_from_config({**c, "resid_pdrop": 0.0, "embd_pdrop": 0.2}).traits
    assert (t.dropout.residual, t.dropout.embedding, t.dropout.attention) == (0.0, 0.2, 0.1)


def test_neox_hidden_dropout_applies_to_residual_and_embedding():
    c = _cfg("EleutherAI__gpt-neox-20b.json")
    t = spec_from_config({**c, "hidden_dropout": 0.1}).traits
    assert t.dropout.residual == 0.1 and t.dropout.embedding == 0.1


def test_gemma2_softcap_defaults_follow_transformers_when_keys_are_missing():
    c = {k: v for k, v in _cfg("google__gemma-2-2b-it.json").items() if "softcapping" not in k}
    t = spec_from_config(c).traits
    assert (t.final_logit_softcap, t.attn_logit_softcap) == (30.0, 50.0)    # Gemma2Config defaults
    t0 = spec_from_config({**c, "final_logit_softcapping": None}).traits
    assert t0.final_logit_softcap is None


def test_activation_aliases_and_unknown_activation():
    c = _cfg("EleutherAI__gpt-neox-20b.json")
    assert spec_from_config({**c, "hidden_act": "swish"}).traits.activation == "silu"
    with pytest.raises(InputError) as err:
        spec_from_config({**c, "hidden_act": "gelu_nwe"})
    assert "gelu_nwe" in str(err.value) and "gelu_new" in err.value.matches


def test_reglu_and_swiglu_from_activation():
    c = _cfg("meta-llama__Llama-3.2-1B-Instruct.json")
    assert spec_from_config({**c, "hidden_act": "relu"}).traits.mlp == "reglu"
    assert spec_from_config(c).traits.mlp == "swiglu"


def test_qwen_top_layers_window_pattern():
    c = _cfg("Qwen__Qwen2.5-0.5B.json")   # 24 layers, max_window_layers 24
    m = spec_from_config({**c, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20})
    assert m.traits.window_pattern == "top_layers" and m.traits.sliding_window == 4096
    assert [i for i, w in enumerate(m.layer_windows) if w] == [20, 21, 22, 23]


def test_qwen3_moe_mlp_only_layers_are_dense():
    c = _cfg("Qwen__Qwen3-30B-A3B.json")
    m = spec_from_config({**c, "mlp_only_layers": [0, 47]})
    assert m.traits.moe_dense_layers == (0, 47) and m.num_moe_layers == 46


def test_traits_are_frozen_and_validated():
    t = get_model("gpt2").traits
    with pytest.raises(FrozenInstanceError):
        t.activation = "silu"                              # type: ignore[misc]
    with pytest.raises(ValueError, match="activation"):
        Traits(activation="gelu_nwe")
    with pytest.raises(ValueError, match="norm_placement"):
        Traits(norm_placement="middle")
    with pytest.raises(ValueError, match="probability"):
        Dropout(residual=1.0)
    with pytest.raises(ValueError, match="probability"):
        Dropout(attention=-0.1)
    with pytest.raises(ValueError, match="soft"):
        Traits(final_logit_softcap=0.0)
    with pytest.raises(ValueError, match="sliding_window"):
        Traits(sliding_window=128)                         # a size needs a pattern


def test_to_dict_lists_traits():
    d = get_model("gemma-2-2b-it").to_dict()
    assert d["traits"]["final_logit_softcap"] == 30.0
    assert d["traits"]["dropout"] == {"attention": 0.0, "residual": 0.0, "embedding": 0.0,
                                        "activation": 0.0}
    assert d["traits"]["window_pattern"] == "alternate"
    json.dumps(d)                                          # JSON-serialisable


# ---- the estimators read traits: a family change is visible only through a trait -------------

def test_memory_reads_softcap_trait_not_the_config():
    from dataclasses import replace

    from gpuplan.estimate.memory import estimate_memory
    from gpuplan.scenario import scenario_from_dict
    m = get_model("gemma-2-2b-it")
    scn = scenario_from_dict({"model": "gemma-2-2b-it", "task": "finetune", "hardware": {"gpu": "h100-sxm"},
                              "train": {"method": "lora", "seq_len": 4096, "micro_batch": 4, "global_batch": 4}})
    no_cap = replace(m, traits=replace(m.traits, final_logit_softcap=None))
    with_cap = estimate_memory(scn, m, 80 * 2**30)
    without = estimate_memory(scn, no_cap, 80 * 2**30)
    assert with_cap.phase == without.phase == "backward"
    # the saved tanh output: 2 bytes x vocab 256000 x 4 x 4096 tokens
    assert with_cap.components["logits"] - without.components["logits"] == 2 * 256000 * 4 * 4096


def test_megatron_args_read_traits():
    from gpuplan.launch.megatron import model_args
    from types import SimpleNamespace
    args = " ".join(model_args(SimpleNamespace(spec=get_model("llama-3.1-8b"))))
    assert "--rotary-base 500000" in args and "--use-rope-scaling" in args and "--disable-bias-linear" in args
    q = model_args(SimpleNamespace(spec=get_model("qwen2.5-7b")))
    assert "--disable-bias-linear" in q and "--add-qkv-bias" in q
    neox = model_args(SimpleNamespace(spec=get_model("gpt-neox-20b")))
    assert "--disable-bias-linear" not in neox and "--normalization" in neox


# ---- the layer rule: no raw config keys or family names in estimate/ ------------------------

_FAMILY_WORDS = {"gemma", "deepseek", "qwen", "phi", "olmo", "falcon", "llama", "mistral", "gpt", "RefinedWeb",
                 "RefinedWebModel", "gemma3", "qwen2_moe", "mistral3"}
_OWN_WORDS = {"bias"}      # also gpuplan's own vocabulary (Block kind, peft's LoRA option)


def _hf_keys() -> set[str]:
    keys: set[str] = set()
    for f in CONFIGS.glob("*.json"):
        c = json.loads(f.read_text(encoding="utf-8"))
        keys |= set(c)
        for sub in ("text_config", "vision_config"):
            if isinstance(c.get(sub), dict):
                keys |= set(c[sub])
    return keys - _OWN_WORDS


def _docstring_ids(tree: ast.AST) -> set[int]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def layer_violations(source: str, filename: str, *, strict: bool = True) -> list[str]:
    """Raw HF config reads and model-family branches in one module's source. strict (estimate/): no
    `.config` / `.model_type` at all; otherwise (launch/) `.config` may only be passed on whole
    (`dict(spec.config)`), never indexed or `.get`-ed."""
    tree = ast.parse(source, filename)
    docs, keys = _docstring_ids(tree), _hf_keys()
    families = set(SUPPORTED_MODEL_TYPES) | _FAMILY_WORDS
    out = []
    for n in ast.walk(tree):
        where = f"{filename}:{getattr(n, 'lineno', '?')}"
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            if n.value in families:
                out.append(f"{where}: model family name {n.value!r}")
            elif n.value in keys:
                out.append(f"{where}: HF config key {n.value!r}")
        elif isinstance(n, ast.Attribute) and n.attr in ("config", "model_type") and strict:
            out.append(f"{where}: reads .{n.attr}")
        elif isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.value, ast.Attribute) \
                and n.value.attr == "config" and (isinstance(n, ast.Subscript) or n.attr == "get"):
            out.append(f"{where}: indexes .config")
        elif isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == "raw":
            out.append(f"{where}: indexes raw[...]")
    return out


@pytest.mark.parametrize("package,strict", [("estimate", True), ("launch", False)])
def test_no_raw_config_or_family_names_outside_models(package, strict):
    found = []
    for path in sorted((SRC / package).glob("*.py")):
        found += layer_violations(path.read_text(encoding="utf-8"), f"{package}/{path.name}", strict=strict)
    assert found == []


PLANTED = {
    "act = model.config.get('hidden_act')": ["reads .config", "HF config key 'hidden_act'"],
    "p = (model.config or {}).get('resid_pdrop', 0.0)": ["reads .config", "HF config key 'resid_pdrop'"],
    "x = raw['new_decoder_architecture']": ["raw[...]", "HF config key 'new_decoder_architecture'"],
    "if model.family == 'falcon':\n    pass": ["model family name 'falcon'"],
    "if model.family in ('gemma2', 'gemma3'):\n    pass": ["model family name 'gemma2'", "model family name 'gemma3'"],
    "cap = cfg['final_logit_softcapping']": ["HF config key 'final_logit_softcapping'"],
    "t = model.model_type": ["reads .model_type"],
}


@pytest.mark.parametrize("line", sorted(PLANTED))
def test_layer_scan_catches_planted_examples(tmp_path, line):
    f = tmp_path / "planted.py"
    f.write_text('"""A module mentioning hidden_act and falcon in its docstring only is fine."""\n' + line + "\n")
    found = layer_violations(f.read_text(), str(f))
    for want in PLANTED[line]:
        assert any(want in v for v in found), (want, found)


def test_layer_scan_lenient_mode_allows_whole_config_pass_through(tmp_path):
    ok = "files = {'model_config.json': dict(plan.spec.config)}\n"
    assert layer_violations(ok, "x.py", strict=False) == []
    assert layer_violations(ok, "x.py", strict=True) != []
    bad = "theta = plan.spec.config.get('rope_theta', 10000)\n"
    assert any("indexes .config" in v for v in layer_violations(bad, "x.py", strict=False))


def test_layer_scan_ignores_docstrings_and_other_words():
    src = '"""Falcon and gemma2 mention hidden_act."""\ndef f():\n    """uses resid_pdrop"""\n    return "llama.cpp"\n'
    assert layer_violations(src, "x.py") == []
    assert re.search("llama", src)      # the engine name is not the family name
