"""Generic reader (models/generic.py) for token mixers that keep a fixed state instead of a KV cache, other than
Mamba (models/spec.py RecurrentMixer): LFM3's gated short convolution, RecurrentGemma's RG-LRU block, RWKV-4; and
two residual-stream blocks it now classifies (Inkling-2 Loop's message gates, Gemma 3n's AltUp and LAuReL); JetMoE's
experts (stacked MLP experts, a mixture of attention heads) and the trace's balanced router assignment.

Expected totals come from transformers' own model on the meta device (an independent implementation); mixer
widths, layer patterns and state sizes from hand arithmetic on the default configs and transformers 5.25's modeling
files; memory from fake-tensor traces (what PyTorch allocates).
"""
import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpuplan.api import estimate  # noqa: E402
from gpuplan.errors import UnsupportedError  # noqa: E402
from gpuplan.models import spec_from_config  # noqa: E402
from gpuplan.models.meta import meta_param_count  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
from generic_arch_table import default_config as _cfg  # noqa: E402
from generic_arch_table import shrunk_config, trace_row  # noqa: E402

NEW = ["lfm3", "recurrent_gemma", "rwkv", "inkling2_loop_text", "gemma3n_text"]


@pytest.mark.parametrize("mt", NEW)
def test_default_totals_equal_transformers(mt):
    cfg = _cfg(mt)
    m = spec_from_config(cfg, name=mt)
    assert m.family == "generic:" + mt
    assert m.params_total == meta_param_count(cfg)["parameters_plus_stored_buffers"]


def test_lfm3_short_conv_layers():
    m = spec_from_config(_cfg("lfm3"))
    r = m.recurrent
    # Lfm3ShortConv: a depthwise conv over hidden_size (2048) channels of conv_L_cache (7) taps
    assert (r.variant, r.width, r.conv_kernel) == ("short_conv", 2048, 7)
    lt = transformers.AutoConfig.for_model("lfm3").layer_types
    assert m.layer_mixers == tuple("recurrent" if t == "conv" else "attention" for t in lt)
    assert (m.num_recurrent_layers, m.num_attention_layers) == (13, 11)
    # in_proj makes B, C and x: hidden -> 3 x hidden, a matmul of the mixer
    in_proj = next(b for b in m.blocks if b.name.endswith("conv.in_proj.weight"))
    assert (in_proj.kind, in_proj.linear, in_proj.count) == ("ssm", (2048, 6144), 13)
    # operator/post_operator and ffn/post_ffn norms in every layer (use_sandwich_norm)
    assert m.traits.norm_placement == "sandwich"
    # state per sequence: 13 conv layers x 2048 channels x 7 columns x 2 bytes (cache_utils update_conv_state)
    assert m.ssm_state_bytes_per_sequence() == 13 * 2048 * 7 * 2


def test_recurrent_gemma_rg_lru_and_local_attention():
    m = spec_from_config(_cfg("recurrent_gemma"))
    r = m.recurrent
    assert (r.variant, r.width, r.conv_kernel) == ("rg_lru", 2560, 4)       # lru_width, conv1d_width
    # block_types (recurrent, recurrent, attention) repeated over 26 layers: attention at 2, 5, ..., 23
    assert [i for i, k in enumerate(m.layer_mixers) if k == "attention"] == list(range(2, 26, 3))
    assert m.num_recurrent_layers == 18
    # RecurrentGemmaMlp builds intermediate_size // 2 = 3840 wide gate/up projections, not the config's 7680
    assert m.intermediate_size == 3840
    # 18 layers x (2560 fp32 recurrent values + 3 conv columns x 2560 x 2 bytes) (_setup_cache)
    assert m.ssm_state_bytes_per_sequence() == 18 * (4 * 2560 + 3 * 2560 * 2)


def test_rwkv_no_attention_no_kv_cache():
    m = spec_from_config(_cfg("rwkv"))
    r = m.recurrent
    assert (r.variant, r.width, r.ffn_width) == ("rwkv", 4096, 16384)
    assert m.layer_mixers == ("recurrent",) * 32 and m.num_attention_layers == 0
    assert m.kv_cache_bytes_per_token(2.0) * m.num_attention_layers == 0
    # RwkvModel.forward's state: five (batch, hidden, layers) tensors, two in the model dtype, three fp32
    assert m.ssm_state_bytes_per_sequence() == 32 * 4096 * (2 * 2 + 3 * 4)


def test_inference_state_is_counted_once_per_sequence(tmp_path):
    cfg = _cfg("rwkv", hidden_size=256, attention_hidden_size=256, intermediate_size=1024, num_hidden_layers=2,
               vocab_size=1000)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    sc = {"model": str(tmp_path), "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
          "infer": {"engine": "hf", "prompt_len": 512, "output_len": 1, "concurrency": 4}}
    # 4 sequences x 2 layers x 256 x 16 bytes, whatever the length
    assert estimate(sc).memory.components["kv_cache"] == 4 * 2 * 256 * 16


def test_message_gates_and_altup_classified():
    ink = spec_from_config(_cfg("inkling2_loop_text"))
    kinds = {b.name.split(".")[3]: b.kind for b in ink.blocks if "message_gate" in b.name}
    assert kinds["q_message_gate"] == kinds["k_message_gate"] == kinds["v_message_gate"] == "attn"
    assert kinds["mlp_message_gate"] == "mlp"
    g = spec_from_config(_cfg("gemma3n_text"))
    kind = {b.name.rsplit(".", 2)[-2]: b.kind for b in g.blocks if ".altup." in b.name or ".laurel." in b.name}
    assert kind["modality_router"] == kind["prediction_coefs"] == kind["correction_coefs"] == "router"
    assert kind["linear_left"] == kind["linear_right"] == "attn"


def test_unknown_mixer_still_refused_by_name():
    # xLSTM's mLSTM block is neither attention, MLP nor one of the recognised recurrent mixers
    with pytest.raises(UnsupportedError, match=r"mlstm_layer\.q\.weight"):
        spec_from_config(_cfg("xlstm"))


def test_shrink_keeps_a_cycle_of_kinds_and_a_shared_tail():
    rg, note = shrunk_config("recurrent_gemma")      # recurrent, recurrent, attention: the third layer kept
    assert rg["num_hidden_layers"] == 3 and "26->3" in note
    g, note = shrunk_config("gemma3n_text")          # the last 15 of 35 layers reuse KV: layer 34 kept, count 1
    assert g["num_kv_shared_layers"] == 1 and g["num_hidden_layers"] == 5
    assert g["layer_types"][-1] == "full_attention"


def test_short_conv_training_activations_match_the_trace(tmp_path):
    # four short-conv layers, no attention: the mixer's 12 w bytes per token, its input and four norms per layer
    # (at 2,048 tokens the backward peak falls where both sides hold the same logits)
    from gpuplan.trace import trace
    cfg = _cfg("lfm3", hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
               num_key_value_heads=2, head_dim=64, vocab_size=1024, pad_token_id=0, bos_token_id=1, eos_token_id=2,
               layer_types=["conv"] * 4)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    sc = {"model": str(tmp_path), "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1},
          "train": {"method": "full", "precision": "bf16", "master_weights": False, "optimizer": "adamw",
                    "seq_len": 2048, "micro_batch": 1, "global_batch": 1, "recompute": "none", "ssm_kernels": False}}
    t, e = trace(sc), estimate(sc).memory
    act = e.components["activations"] / t.components["activations"] - 1
    assert abs(act) <= 0.05, f"short-conv activations {act:+.1%}"


# RWKV's trace (rwkv_linear_attention_cpu: a Python loop over the 512 tokens per layer, on fake tensors) takes ~95 s
# on 2 cores: checked by the generated table only
@pytest.mark.parametrize("mt", ["lfm3", "recurrent_gemma", "inkling2_loop_text", "gemma3n_text"])
def test_table_rows_within_5_percent_of_the_trace(mt):
    r = trace_row(mt)
    assert "train_err" in r and "infer_err" in r, r
    assert abs(r["train_err"]) <= 0.05 and abs(r["infer_err"]) <= 0.05, r


def test_jetmoe_experts_read_from_the_tree():
    m = spec_from_config(_cfg("jetmoe"))
    # 8 MLP experts, top-2; input_linear (8, 2 x 5632, 2048) is a fused gate|up: silu(gate) * up -> 5632 wide
    assert (m.num_experts, m.experts_per_tok, m.moe_intermediate_size, m.gated_mlp) == (8, 2, 5632, True)
    up = next(b for b in m.blocks if b.name.endswith("mlp.input_linear.weight"))
    assert (up.kind, up.linear, up.count, up.active_fraction) == ("expert", (2048, 11264), 12 * 8, 0.25)
    # attention experts: per token 2 of 8 query projections of 16 heads x 128 (kv_channels), counted as attention
    q = next(b for b in m.blocks if b.name.endswith("self_attention.experts.input_linear.weight"))
    assert (q.kind, q.linear, q.active_fraction) == ("attn", (2048, 2048), 0.25)
    assert (m.num_heads, m.num_kv_heads, m.head_dim) == (32, 16, 128)
    assert {b.kind for b in m.blocks if ".router." in b.name} == {"router"}


def test_value_less_router_topk_gets_the_balanced_assignment():
    from gpuplan.trace._known import KnownValuesMode
    with KnownValuesMode():
        scores = torch.randn(6, 4)                   # value-less: computed as from weights
        idx = scores.topk(2, dim=-1).indices
        counts = torch.zeros(6, 4).scatter(1, idx, 1).long().sum(0).tolist()
        # 6 tokens x 2 picks over 4 experts: token t picks (2t, 2t + 1) mod 4, every expert 3 times
        assert counts == [3, 3, 3, 3]
        other = scores.topk(2, dim=0).indices        # not over the last dimension: stays unknown
        with pytest.raises(Exception):
            other.tolist()


def test_context_parallelism_refused_for_recurrent_layers(tmp_path):
    from gpuplan.errors import InputError
    cfg = _cfg("rwkv", hidden_size=256, attention_hidden_size=256, intermediate_size=1024, num_hidden_layers=2,
               vocab_size=1000)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    sc = {"model": str(tmp_path), "task": "train", "hardware": {"gpu": "h100-sxm", "count": 2},
          "parallel": {"cp": 2}, "train": {"seq_len": 4096, "global_batch": 2}}
    with pytest.raises(InputError, match=r"parallel\.cp.*recurrent \(rwkv\)"):
        estimate(sc)
