"""State-space and hybrid configs (Mamba, Falcon-Mamba, Mamba-2, Jamba), written to src/gpuplan/models/configs/.

Run from the repo root: python scripts/ssm_model_configs.py  (build_model_registry.py calls it too).
Each is the architecture fields of the repo's config.json on huggingface.co, transcribed (tokenizer ids,
generation and initialisation keys left out: they change no shape), completeness "structural".
state-spaces/mamba2-2.7b ships a mamba_ssm config (d_model, n_layer, ssm_cfg) that transformers cannot
load; it is translated to Mamba2Config keys with mamba_ssm's Mamba2 defaults (d_state 128, headdim 64,
ngroups 1, expand 2, d_conv 4) and its vocabulary padded to a multiple of 16 as mamba_ssm pads it.
"""
from __future__ import annotations

from pathlib import Path

OUT = Path("src/gpuplan/models")


def hf(repo: str) -> str:
    return f"https://huggingface.co/{repo}/blob/main/config.json (architecture fields transcribed)"


def mamba(h: int, n: int, rank: int, *, v: int = 50280, mt: str = "mamba", tie: bool = True, **extra) -> dict:
    arch = "FalconMambaForCausalLM" if mt == "falcon_mamba" else "MambaForCausalLM"
    cfg = {"architectures": [arch], "model_type": mt, "hidden_size": h, "num_hidden_layers": n, "vocab_size": v,
           "state_size": 16, "expand": 2, "intermediate_size": 2 * h, "conv_kernel": 4, "time_step_rank": rank,
           "use_bias": False, "use_conv_bias": True, "hidden_act": "silu", "layer_norm_epsilon": 1e-05,
           "residual_in_fp32": True, "tie_word_embeddings": tie}
    cfg.update(extra)
    return cfg


def mamba2(h: int, n: int, v: int, heads: int, groups: int, *, tie: bool) -> dict:
    return {"architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "hidden_size": h, "num_hidden_layers": n,
            "vocab_size": v, "num_heads": heads, "head_dim": 64, "n_groups": groups, "state_size": 128, "expand": 2,
            "conv_kernel": 4, "chunk_size": 256, "use_bias": False, "use_conv_bias": True, "hidden_act": "silu",
            "layer_norm_epsilon": 1e-05, "residual_in_fp32": True, "rms_norm": True, "norm_before_gate": False,
            "tie_word_embeddings": tie}


def jamba(h: int, n: int, a: int, i: int) -> dict:
    return {"architectures": ["JambaForCausalLM"], "model_type": "jamba", "hidden_size": h, "num_hidden_layers": n,
            "num_attention_heads": a, "num_key_value_heads": 8, "intermediate_size": i, "vocab_size": 65536,
            "hidden_act": "silu", "rms_norm_eps": 1e-06, "max_position_embeddings": 262144,
            "tie_word_embeddings": False, "num_experts": 16, "num_experts_per_tok": 2, "expert_layer_period": 2,
            "expert_layer_offset": 1, "attn_layer_period": 8, "attn_layer_offset": 4, "mamba_d_state": 16,
            "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": h // 16, "mamba_conv_bias": True,
            "mamba_proj_bias": False, "use_mamba_kernels": True}


# hf_id -> (config, source, completeness, notes)
ADDED: dict[str, tuple[dict, str, str, str]] = {}
for _size, (_h, _n) in {"130m": (768, 24), "370m": (1024, 48), "790m": (1536, 48), "1.4b": (2048, 48),
                        "2.8b": (2560, 64)}.items():
    _repo = f"state-spaces/mamba-{_size}-hf"
    ADDED[_repo] = (mamba(_h, _n, _h // 16), hf(_repo), "structural", "Mamba-1; tied embeddings")
ADDED["tiiuae/falcon-mamba-7b"] = (
    mamba(4096, 64, 256, v=65024, mt="falcon_mamba", tie=False, mixer_rms_eps=1e-06),
    hf("tiiuae/falcon-mamba-7b"), "structural", "Mamba-1 with weightless RMSNorms on dt, B and C")
ADDED["mistralai/Mamba-Codestral-7B-v0.1"] = (
    mamba2(4096, 64, 32768, 128, 8, tie=False), hf("mistralai/Mamba-Codestral-7B-v0.1"), "structural",
    "Mamba-2, 8 groups; time_step_limit (0, inf) left at its default")
ADDED["state-spaces/mamba2-2.7b"] = (
    mamba2(2560, 64, 50288, 80, 1, tie=True),
    "https://huggingface.co/state-spaces/mamba2-2.7b/blob/main/config.json (mamba_ssm keys d_model 2560, n_layer 64, "
    "vocab 50277 padded to 16 = 50288, tie_embeddings; Mamba2 defaults of mamba_ssm/modules/mamba2.py)",
    "structural", "translated from mamba_ssm's config: transformers cannot load the original checkpoint")
ADDED["ai21labs/Jamba-v0.1"] = (jamba(4096, 32, 32, 14336), hf("ai21labs/Jamba-v0.1"), "structural",
                                "attention 1 layer in 8, MoE (16 experts, top-2) every other layer")
ADDED["ai21labs/AI21-Jamba-1.5-Mini"] = (jamba(4096, 32, 32, 14336), hf("ai21labs/AI21-Jamba-1.5-Mini"),
                                         "structural", "same architecture as Jamba-v0.1")
ADDED["ai21labs/AI21-Jamba-1.5-Large"] = (jamba(8192, 72, 64, 24576), hf("ai21labs/AI21-Jamba-1.5-Large"),
                                          "structural",
                                          "attention 1 layer in 8, MoE (16 experts, top-2) every other layer")


def write(out: Path = OUT) -> list[dict[str, str]]:
    """Write the config files; return registry rows (name filled in by the caller)."""
    from added_model_configs import write_configs   # scripts/ is on the path of every caller
    return write_configs(ADDED, out)


if __name__ == "__main__":
    print(f"{len(write())} SSM rows")
