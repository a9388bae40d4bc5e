"""State-space and hybrid models (Mamba, Mamba-2, Jamba): parameters, state memory, speed, rules and traces.

Expected numbers come from hand arithmetic (shown), published totals, transformers' own model on the meta
device, or fake-tensor traces of transformers' torch path (docs/ssm.md).
"""
import json

import pytest

from gpuplan.api import estimate
from gpuplan.errors import InputError
from gpuplan.models.registry import get_model
from gpuplan.models.spec import spec_from_config
from trace_checks import assert_inference_matches_trace

SSM_ROWS = ["mamba-130m-hf", "mamba-370m-hf", "mamba-790m-hf", "mamba-1.4b-hf", "mamba-2.8b-hf", "falcon-mamba-7b",
            "mamba-codestral-7b-v0.1", "mamba2-2.7b", "jamba-v0.1", "ai21-jamba-1.5-mini", "ai21-jamba-1.5-large"]


def test_mamba_130m_count_by_hand():
    # h 768, d 1536, N 16, R 48, 24 layers, vocab 50280, tied: in_proj 768*3072 + conv 1536*4+1536 +
    # x_proj 1536*80 + dt_proj 48*1536+1536 + A_log 1536*16 + D 1536 + out_proj 1536*768 + norm 768
    layer = 768 * 3072 + 1536 * 5 + 1536 * 80 + 48 * 1536 + 1536 + 1536 * 16 + 1536 + 1536 * 768 + 768
    assert get_model("mamba-130m-hf").params_total == 24 * layer + 50280 * 768 + 768 == 129_135_360


@pytest.mark.parametrize("name,total,active,rel", [
    # ai21labs model cards: Jamba 52B total / 12B active; Jamba 1.5 Large 398B / 94B; Falcon-Mamba 7.27B
    ("jamba-v0.1", 52e9, 12e9, 0.02), ("ai21-jamba-1.5-large", 398e9, 94e9, 0.01),
    ("falcon-mamba-7b", 7.27e9, 7.27e9, 0.001)])
def test_published_totals(name, total, active, rel):
    m = get_model(name)
    assert m.params_total == pytest.approx(total, rel=rel)
    assert m.params_active == pytest.approx(active, rel=rel)


def test_jamba_layer_pattern():
    m = get_model("jamba-v0.1")
    assert [i for i, k in enumerate(m.layer_mixers) if k == "attention"] == [4, 12, 20, 28]
    assert (m.num_attention_layers, m.num_ssm_layers, m.num_moe_layers) == (4, 28, 16)


def test_jamba_kv_cache_matches_the_paper():
    # Jamba paper (arXiv:2403.19887) Table 1: KV cache at 256K tokens in 16-bit: 4 GB (Mixtral 32 GB).
    # 4 attention layers x 2 (K, V) x 8 KV heads x 128 dims x 2 bytes = 16,384 bytes per token
    m = get_model("jamba-v0.1")
    assert m.kv_cache_bytes_per_token(2.0) == 4 * 2 * 8 * 128 * 2
    assert m.kv_cache_bytes(256 * 1024, 2.0) / 2**30 == pytest.approx(4.0)


def test_pure_ssm_has_no_kv_and_a_fixed_state():
    m = get_model("mamba-2.8b-hf")
    assert m.kv_cache_bytes_per_token(2.0) == 0
    # vLLM: per layer d_inner x N state + d_inner x (d_conv - 1) conv columns, 16-bit: 64 x 5120 x (16 + 3) x 2
    assert m.ssm_state_bytes_per_sequence(2.0, 2.0) == 64 * 5120 * 19 * 2
    c = get_model("mamba-codestral-7b-v0.1")
    # Mamba-2: state 128 heads x 64 x 128; conv over x|B|C = 8192 + 2 x 8 x 128 = 10240 channels x 3
    assert c.ssm_state_bytes_per_sequence(2.0, 2.0) == 64 * (8192 * 128 + 10240 * 3) * 2


def _infer(model, prompt, engine="vllm", conc=16, **infer):
    return {"model": model, "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
            "infer": {"engine": engine, "weights": "bf16", "prompt_len": prompt, "output_len": 256,
                      "concurrency": conc, **infer}}


def test_vllm_state_memory_and_concurrency_limit():
    e = estimate(_infer("mamba-2.8b-hf", 2048, conc=16)).memory
    per_seq = 64 * 5120 * 19 * 2
    assert e.components["kv_cache"] == 16 * per_seq
    assert e.limits["max_concurrency"] == e.limits["kv_pool_bytes"] // per_seq
    assert e.limits["kv_tokens"] is None


def test_hf_cache_keeps_fp32_mamba1_state_and_d_conv_columns():
    # transformers: fp32 recurrent state (Mamba-1 scan), d_conv columns of the conv input, 16-bit
    e = estimate(_infer("mamba-130m-hf", 512, engine="hf", conc=4)).memory
    assert e.components["kv_cache"] == 4 * 24 * (1536 * 16 * 4 + 1536 * 4 * 2)


def test_ssm_state_does_not_grow_with_context():
    short = estimate(_infer("mamba-2.8b-hf", 1024)).memory.components["kv_cache"]
    long = estimate(_infer("mamba-2.8b-hf", 16384)).memory.components["kv_cache"]
    assert short == long


def test_decode_step_does_not_grow_with_context_but_jamba_attention_does():
    t1 = estimate(_infer("mamba-2.8b-hf", 1024, conc=1)).performance.tpot_s
    t2 = estimate(_infer("mamba-2.8b-hf", 32768, conc=1)).performance.tpot_s
    assert t2 == pytest.approx(t1, rel=1e-6)
    jamba = []
    for prompt in (1024, 32768):
        sc = _infer("jamba-v0.1", prompt, conc=8)
        sc["hardware"]["count"], sc["parallel"] = 2, {"tp": 2}
        jamba.append(estimate(sc).performance.tpot_s)
    assert jamba[1] > jamba[0]


def test_fused_kernel_mixer_bytes_by_hand():
    from gpuplan.estimate.activations import ActivationSetup, ssm_mixer_bytes
    m = get_model("mamba-130m-hf")
    # MambaInnerFn (checkpoint_lvl 1): xz 2 x 2d, x_dbl 2(R + 2N), B and C copies 2 x 2N, out 2d,
    # fp32 chunk states 4 x 2N x d / 2048; d 1536, N 16, R 48
    d, n, r = 1536, 16, 48
    assert ssm_mixer_bytes(m, ActivationSetup()) == pytest.approx(4 * d + 2 * (r + 2 * n) + 4 * n + 2 * d
                                                                  + 8 * n * d / 2048)
    torch_path = ssm_mixer_bytes(m, ActivationSetup(ssm_kernels=False))
    assert torch_path > 20 * ssm_mixer_bytes(m, ActivationSetup())     # 14·d·N of per-step states


def _train(model, **train):
    return {"model": model, "task": "train", "hardware": {"gpu": "h100-sxm", "count": 8},
            "parallel": {"dp": 8 // train.pop("tp", 1) // train.pop("cp", 1), **train.pop("parallel", {})},
            "train": {"precision": "bf16", "seq_len": 4096, "micro_batch": 1, "global_batch": 64, **train}}


def test_context_parallel_is_refused_for_ssm_layers():
    sc = _train("mamba-2.8b-hf", parallel={"cp": 2, "dp": 4})
    with pytest.raises(InputError) as err:
        estimate(sc)
    assert "parallel.cp" in str(err.value) and "state-space" in str(err.value)


def test_tp_must_split_whole_ssm_heads():
    sc = _infer("mamba-codestral-7b-v0.1", 1024)
    sc["hardware"]["count"] = 3
    sc["parallel"] = {"tp": 3}
    with pytest.raises(InputError) as err:
        estimate(sc)
    assert "128 SSM heads" in str(err.value)


def test_torch_path_trains_with_far_more_memory():
    fused = estimate(_train("mamba-1.4b-hf")).memory.components["activations"]
    slow = estimate(_train("mamba-1.4b-hf", ssm_kernels=False)).memory.components["activations"]
    assert slow > 10 * fused


def test_lora_adapts_the_mixer_linears():
    from gpuplan.estimate.memory import ALL_LINEAR, lora_params
    m = get_model("mamba-130m-hf")
    # r (in + out) per linear: in_proj 768+3072, x_proj 1536+80, dt_proj 48+1536, out_proj 1536+768; 24 layers
    assert lora_params(m, 8, ALL_LINEAR) == 24 * 8 * (768 + 3072 + 1536 + 80 + 48 + 1536 + 1536 + 768)


def test_model_json_reports_the_ssm(capsys):
    from gpuplan.cli import main
    assert main(["model", "jamba-v0.1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["result"]
    assert out["ssm"]["variant"] == "mamba1" and out["attention_layers"] == 4 and out["ssm_layers"] == 28
    assert out["kv_cache_bytes_per_token"] == 16384


# ---- against transformers -----------------------------------------------------------------------------
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SMALL = {
    "mamba": dict(hidden_size=256, num_hidden_layers=2, vocab_size=1000, state_size=16),
    "mamba2": dict(hidden_size=256, num_hidden_layers=2, vocab_size=1000, num_heads=8, head_dim=64, n_groups=2,
                   state_size=32, chunk_size=64),
    # Jamba's pattern in small: attention on layer 2, experts on 1 and 3, the last layer a Mamba one
    "jamba": dict(hidden_size=256, num_hidden_layers=4, vocab_size=1000, intermediate_size=512,
                  num_attention_heads=8, num_key_value_heads=2, num_experts=4, attn_layer_period=4,
                  attn_layer_offset=2, expert_layer_period=2, expert_layer_offset=1),
    # Nemotron-H: single blocks M (Mamba-2), * (attention), - (MLP)
    "nemotron_h": dict(hidden_size=256, vocab_size=1000, num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                       intermediate_size=512, mamba_num_heads=8, mamba_head_dim=64, n_groups=2, ssm_state_size=32,
                       chunk_size=64, hybrid_override_pattern="M-*-M-"),
}
VARIANTS = {"mamba": [{}, {"use_bias": True, "tie_word_embeddings": False, "time_step_rank": 8}],
            "falcon_mamba": [{}], "mamba2": [{}, {"n_groups": 1, "use_conv_bias": False}],
            "jamba": [{}, {"num_experts": 1, "mamba_proj_bias": True}],
            "nemotron_h": [{}, {"hybrid_override_pattern": None, "layers_block_type": ["mamba", "mlp", "attention"],
                                "mlp_bias": True, "tie_word_embeddings": True, "n_groups": 1}]}


@pytest.mark.parametrize("mt,extra", [(mt, e) for mt, es in VARIANTS.items() for e in es])
def test_counts_equal_transformers_meta(mt, extra):
    kw = {**SMALL["mamba" if mt == "falcon_mamba" else mt], **extra}
    kw = {k: v for k, v in kw.items() if v is not None}
    cfg = transformers.AutoConfig.for_model(mt, **kw)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    assert spec_from_config({**cfg.to_dict(), "model_type": mt}).params_total == \
        sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("mt", ["mamba", "mamba2", "jamba", "nemotron_h"])
def test_torch_path_training_within_5_percent_of_the_trace(mt, tmp_path):
    from gpuplan.trace import trace
    cfg = transformers.AutoConfig.for_model(mt, **SMALL[mt]).to_dict()
    cfg["model_type"] = mt
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    sc = {"model": str(tmp_path), "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1},
          "train": {"method": "full", "precision": "bf16", "master_weights": False, "optimizer": "adamw",
                    "seq_len": 128, "micro_batch": 2, "global_batch": 2, "recompute": "none", "attention": "flash",
                    "ssm_kernels": False}}
    traced = trace(sc)
    est = estimate(sc).memory
    act = est.components["activations"] / traced.components["activations"] - 1
    peak = (est.peak_bytes_per_gpu - est.components["runtime_overhead"]) / traced.peak_bytes - 1
    assert abs(act) <= 0.05, f"{mt}: activations {act:+.1%}"
    assert abs(peak) <= 0.05, f"{mt}: peak {peak:+.1%}"


@pytest.mark.parametrize("mt", ["mamba", "mamba2", "jamba", "nemotron_h"])
def test_torch_path_inference_within_5_percent_of_the_trace(mt, tmp_path):
    cfg = transformers.AutoConfig.for_model(mt, **SMALL[mt]).to_dict()
    cfg["model_type"] = mt
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    sc = {"model": str(tmp_path), "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
          "infer": {"engine": "hf", "weights": "bf16", "prompt_len": 128, "output_len": 4, "concurrency": 4,
                    "ssm_kernels": False}}
    # decode_steps = output_len: the static cache holds prompt + output tokens
    assert_inference_matches_trace(mt, sc, decode_steps=4)


def test_nemotron_h_moe_blocks_go_to_the_generic_reader():
    # the hand-written family refuses Nemotron-3's latent-MoE blocks by name; with transformers installed the
    # meta-device reader (models/generic.py) reads them instead, exactly
    from gpuplan.models import ssm
    from gpuplan.errors import UnsupportedError
    cfg = {**SMALL["nemotron_h"], "model_type": "nemotron_h", "hybrid_override_pattern": "ME*"}
    with pytest.raises(UnsupportedError) as err:
        ssm.nemotron_h(cfg, "(test)")
    assert "mixture-of-experts" in str(err.value) and "'E'" in str(err.value)
    m = spec_from_config(cfg)
    full = transformers.AutoConfig.for_model("nemotron_h", **{**SMALL["nemotron_h"], "hybrid_override_pattern": "ME*"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(full)
    assert m.family == "generic:nemotron_h" and m.layer_mixers == ("mamba", "mlp", "attention")
    # + the router's e_score_correction_bias: a buffer in transformers, a tensor in the checkpoint (meta.py)
    bias = sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    assert bias and m.params_total == sum(p.numel() for p in model.parameters()) + bias


def test_frameworks_without_mamba_layers_are_refused():
    sc = _train("mamba-130m-hf")
    sc["framework"] = "torchtitan"
    with pytest.raises(InputError) as err:
        estimate(sc)
    assert "framework = torchtitan" in str(err.value) and "Mamba" in str(err.value)
