"""Which counted HF transformers training layer stands for a model when pricing its eager host issue time
(estimate/host_issue.py; the counts are estimate/data/hf_train_ops.csv, keyed by `layer_kind` = the HF model type
they were counted on, scripts/count_train_kernels.py). A model type not counted takes the counted layer closest in
structure: a Llama decoder layer, or for a mixture of experts Qwen3-MoE's fused-expert layer (no shared expert)."""
from __future__ import annotations

from .spec import ModelSpec

DENSE_STAND_IN = "llama"
MOE_STAND_IN = "qwen3_moe"


def hf_ops_layer_kind(spec: ModelSpec, counted: frozenset[str]) -> str:
    """The `layer_kind` of hf_train_ops.csv whose counts describe `spec`'s decoder layers."""
    if spec.model_type in counted:
        return spec.model_type
    return MOE_STAND_IN if spec.is_moe else DENSE_STAND_IN


# NeMo RL's DTensor tensor-parallel plan per HF class (nemo_rl/models/dtensor/parallelize.py PARALLIZE_FUNCTIONS,
# NVIDIA-NeMo/RL@b1c86a8 = v0.3.0: LlamaForCausalLM -> _parallelize_llama); Qwen2/3 and Gemma3 have plans of their
# own, not counted (estimate/dtensor_tp.py counts the Llama one's collectives)
NEMO_RL_LLAMA_PLAN_TYPES = frozenset({"llama"})


def nemo_rl_llama_tp_plan(spec: ModelSpec) -> bool:
    """Whether NeMo RL's DTensor worker parallelizes `spec` with its Llama plan."""
    return spec.model_type in NEMO_RL_LLAMA_PLAN_TYPES
