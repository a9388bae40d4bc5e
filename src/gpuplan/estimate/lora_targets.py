"""Which linears carry LoRA adapters: the user's `lora_targets` resolved against the model's linear blocks and the
stack that applies them (peft's module targeting; transformers 5's fused routed experts)."""
from __future__ import annotations

from ..models.spec import ModelSpec
from ..scenario import Scenario
from .activations import EXPERT_ROLE
from .optim import adapter_tensors

# module name (HF, Mixtral w1/w2/w3, GPT-2, NeoX, Falcon, DeepSeek MLA) -> the role a LoRA target plays;
# used both for the user's lora_targets and for the model's own linear blocks
LORA_NAME_MAP = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "gate_proj": "gate", "up_proj": "up",
                 "down_proj": "down", "query_key_value": "q", "dense": "o", "c_attn": "q", "c_proj": "o",
                 "w1": "gate", "w3": "up", "w2": "down", "fc1": "up", "fc2": "down", "c_fc": "up",
                 "dense_h_to_4h": "up", "dense_4h_to_h": "down", "gate_up_proj": "gate", "q_a_proj": "q",
                 "q_b_proj": "q", "kv_a_proj_with_mqa": "k", "kv_b_proj": "v",
                 # Mamba mixers (peft's all-linear picks these four)
                 "in_proj": "ssm_in", "x_proj": "ssm_x", "dt_proj": "ssm_dt", "out_proj": "ssm_out",
                 # Qwen2-MoE's shared-expert gate, an nn.Linear(h, 1) that all-linear picks; a MoE router (see
                 # ModelSpec.peft_remaps_experts)
                 "shared_expert_gate": "shared_gate", "router": "router"}
ALL_LINEAR = frozenset(("q", "k", "v", "o", "gate", "up", "down", "ssm_in", "ssm_x", "ssm_dt", "ssm_out",
                        "shared_gate"))


# a resolved target set's marker: the routed experts' gate and up branches are one fused ParamWrapper at rank 2r
FUSED_GATE_UP = EXPERT_ROLE + "gate_up@2r"
MLP_ROLES = frozenset(("gate", "up", "down"))


def peft_fused_experts(scn: Scenario, model: ModelSpec) -> bool:
    """Whether this stack adapts a MoE with peft on transformers 5, where the routed experts are not nn.Linear
    modules: every decoder MoE family keeps them as fused 3-D parameters (`@use_experts_implementation`, e.g.
    Qwen3MoeExperts.gate_up_proj [E, 2i, h] and down_proj [E, h, i], transformers 5.25), which peft's module
    targeting (all-linear: nn.Linear/Conv1D, tuners_utils `_maybe_include_all_linear_layers`) does not reach unless
    peft re-targets the config (ModelSpec.peft_remaps_experts). Unsloth patches its own MoE path: not this case."""
    return model.is_moe and scn.framework in ("hf", "deepspeed") and getattr(scn, "tool", None) != "unsloth"


def _lora_targets(targets, fused_experts: bool = False, remapped: bool = False) -> frozenset[str]:
    """The roles that carry adapters: q/k/v/o/gate/up/down of the dense linears (shared experts included) and, as
    "experts.<role>", of the routed experts. Without fused experts a role adapts the routed experts as it adapts the
    dense linears; with them (peft_fused_experts) only for the model types peft re-targets (`remapped`:
    ModelSpec.peft_remaps_experts), and then the gate and up branches as one adapter at rank 2r (FUSED_GATE_UP)."""
    names = ALL_LINEAR if targets == "all-linear" else frozenset(LORA_NAME_MAP.get(t, t) for t in targets)
    names -= {"router"}
    routed = names & MLP_ROLES
    extra: frozenset[str] = frozenset()
    if fused_experts:
        if not remapped:
            routed = frozenset()
        else:
            if routed & {"gate", "up"}:
                routed, extra = routed | {"gate", "up"}, frozenset((FUSED_GATE_UP,))
            if targets == "all-linear" or "gate" in targets:
                extra |= {"router"}
    return names | frozenset(EXPERT_ROLE + r for r in routed) | extra


def lora_role(blk) -> str | None:
    """The role a linear block plays as a LoRA target (routed experts prefixed, see _lora_targets)."""
    role = LORA_NAME_MAP.get(blk.name.split(".")[-1])
    return EXPERT_ROLE + role if (role is not None and blk.kind == "expert") else role


def scenario_lora_targets(scn: Scenario, model: ModelSpec) -> frozenset[str]:
    """The scenario's resolved LoRA targets (_lora_targets) on this stack."""
    targets = scn.train.lora_targets
    if targets == "all-linear" and getattr(scn, "tool", None) == "unsloth":
        # Unsloth's get_peft_model takes its seven projection names for all-linear (launch/unsloth.py SEVEN)
        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    return _lora_targets(targets, peft_fused_experts(scn, model), model.peft_remaps_experts)


def lora_params(model: ModelSpec, rank: int, targets: frozenset[str]) -> int:
    """Adapter parameters: (in + out) x r for every targeted linear of every layer (Hu et al. 2021)."""
    tensors = adapter_tensors(model, rank, targets, lora_role, out_factor=out_factor)
    return int(sum(t.numel * t.count for t in tensors))


def out_factor(blk, targets: frozenset[str]) -> int:
    """2 for a routed expert's gate or up branch under FUSED_GATE_UP (one ParamWrapper at rank 2r over both: A is
    2r x h, B is 2i x 2r, i.e. per branch r x h and 2i x r), else 1."""
    fused = FUSED_GATE_UP in targets and lora_role(blk) in (EXPERT_ROLE + "gate", EXPERT_ROLE + "up")
    return 2 if fused else 1
