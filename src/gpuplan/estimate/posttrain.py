"""Post-training objectives (issue 20): preference tuning (DPO, IPO, KTO, ORPO, SimPO), distillation
and reward-model training, as changes to the supervised step that estimate/memory.py and
estimate/speed.py already model.

Each objective is described by an `ObjectiveShape`: how many sequences per example the policy
processes with gradients, which frozen models it holds (reference, teacher) and how many sequences
they see, and whether the LM head produces logits. The policy pass is then the SFT step of a
scenario with that many sequences per micro-batch (`policy_scenario`), and the frozen models add
weights, a no-grad forward and its transient logits. Rules and their sources (TRL v1.9.0, commit
a785283c, trl/trainer/dpo_trainer.py unless named; docs/posttrain.md has the full list):

- DPO/IPO concatenate chosen and rejected into one batch ([chosen, rejected], `_compute_loss`
  L1353: `logps.chunk(2)`): the policy's forward and backward see 2 sequences per pair. IPO is the
  same trainer with `loss_type="ipo"` (L1440).
- train.pair_concat: sequence (not TRL: open-instruct's OLMo-core DPO with packing, `concatenated_forward_olmo`,
  allenai/open-instruct@ee0c4608 open_instruct/dpo_utils.py) joins chosen and rejected on the sequence axis
  (torch.cat(dim=-1)): the policy pass is then micro_batch rows of 2 x seq_len tokens (`policy_scenario`),
  the same tokens, attention over the joined row (flops.py `row_len`, `attention_span`).
- The reference: `ref_model=None` with a PEFT model or with `precompute_ref_log_probs` keeps no
  reference (L893-898); PEFT disables the adapters for the reference forward (`use_adapter`, L1374);
  otherwise a second model is loaded in the model's dtype and prepared like the policy (ZeRO-3 /
  FSDP shard it: `prepare_deepspeed` / `prepare_fsdp`, L930-936).
- The reference forward runs under `torch.no_grad()` after the policy forward (L1340 then L1373),
  so it happens while the policy's saved activations and logits are alive; it saves nothing for
  backward, and its logits (model dtype) live until `selective_log_softmax` has reduced them
  (trl/trainer/utils.py L479: a per-row loop for 16-bit logits).
- KTO (trl/trainer/kto_trainer.py): examples are unpaired (one completion each); the default loss
  also runs a no-grad policy forward over a mismatched "KL" batch (`_compute_kl_logps`, L1487) and the
  reference over the batch and the KL batch, one after the other (L1534-1545).
- ORPO (trl/experimental/orpo/orpo_trainer.py `concatenated_forward`) and SimPO (the CPO trainer,
  trl/experimental/cpo/cpo_trainer.py `loss_type="simpo"`) concatenate chosen and rejected and have
  no reference model.
- distill (GKD, trl/experimental/gkd/gkd_trainer.py `compute_loss`): a teacher forward under no_grad
  over the same batch; the loss takes log-softmax of teacher and student logits (L276-277) and the
  KL keeps the teacher's log-probs for backward.
- reward (trl/trainer/reward_trainer.py): AutoModelForSequenceClassification with num_labels=1
  (L385-388): a scalar score head instead of the LM head (no vocabulary logits); chosen and
  rejected go through the model together (L204).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from ..models.spec import ModelSpec
from ..scenario import Scenario
from .layout import rank_params, stages
from .results import MemoryEstimate, PerformanceEstimate

TRL_REF = "TRL v1.9.0 (a785283)"
ENTROPY_CHUNK_ROWS = 128        # trl/trainer/utils.py entropy_from_logits(chunk_size=128)
OUT_BYTES = 4                   # TRL's logits are fp32: accelerate's native AMP (TRL default bf16=True)
                                # returns model outputs through convert_outputs_to_fp32 (accelerate 1.16)
TRACED_DPO = ("dpo", "ipo")     # DPOTrainer's step, traced op for op (trace/_posttrain.py)
PREFERENCE = ("dpo", "ipo", "kto", "orpo", "simpo")
# every TRL preference trainer's step is traced op for op (trace/_posttrain.py: DPO/IPO, KTO, ORPO, CPO/SimPO); all
# run under accelerate's native AMP, so the policy's and the reference's logits come back as fp32 copies
TRACED_PREF = PREFERENCE
SUPERVISED_LIKE = PREFERENCE + ("distill", "reward")


@dataclass(frozen=True)
class ObjectiveShape:
    name: str
    grad_sequences: int            # sequences per example through the policy with gradients
    policy_nograd_sequences: int   # extra no-grad policy forwards per example (KTO's KL batch)
    reference: str                 # copy | base | precomputed | none
    reference_sequences: int       # sequences per example through the reference model
    reference_at_once: int         # of those, how many in one forward (DPO: chosen+rejected together)
    lm_head: bool                  # False: a scalar score head (reward model)
    teacher: bool


def applies(scn: Scenario) -> bool:
    """Whether the scenario trains with a supervised-like post-training objective handled here."""
    return scn.train is not None and scn.train.objective in SUPERVISED_LIKE


def reference_kind(scn: Scenario) -> str:
    """The reference the loss uses: the user's `train.reference`, else what TRL does by default:
    under LoRA/QLoRA the base with adapters disabled, otherwise a frozen copy."""
    t = scn.train
    if t.objective not in ("dpo", "ipo", "kto"):
        return "none"
    if t.reference is not None:
        return t.reference
    return "base" if t.method in ("lora", "qlora") else "copy"


def shape(scn: Scenario) -> ObjectiveShape:
    t = scn.train
    obj, ref = t.objective, reference_kind(scn)
    runs_ref = ref in ("copy", "base")
    if obj in ("dpo", "ipo"):
        return ObjectiveShape(obj, 2, 0, ref, 2 if runs_ref else 0, 2 if runs_ref else 0, True, False)
    if obj == "kto":
        return ObjectiveShape(obj, 1, 1, ref, 2 if runs_ref else 0, 1 if runs_ref else 0, True, False)
    if obj in ("orpo", "simpo"):
        return ObjectiveShape(obj, 2, 0, "none", 0, 0, True, False)
    if obj == "reward":
        return ObjectiveShape(obj, 2, 0, "none", 0, 0, False, False)
    if obj == "distill":
        return ObjectiveShape(obj, 1, 0, "none", 0, 0, True, True)
    return ObjectiveShape(obj, 1, 0, "none", 0, 0, True, False)


def policy_scenario(scn: Scenario, sequences: int | None = None) -> Scenario:
    """The SFT scenario whose step is the policy's pass: `sequences` per example (default the
    objective's), so micro_batch and global_batch count sequences, not examples. A pair joined on the
    sequence axis (train.pair_concat: sequence) is one row of `row_len` = 2 x seq_len tokens per example:
    the same tokens, half the rows, each attending across both sides (flops.py `attention_span`)."""
    from .flops import row_len
    t = scn.train
    g = shape(scn).grad_sequences if sequences is None else sequences
    row = row_len(t)
    if row != t.seq_len:
        g = g * t.seq_len // row
    upd: dict[str, Any] = {"objective": "sft", "reference": None, "teacher": None, "rl": None,
                           "micro_batch": t.micro_batch * g, "seq_len": row, "pair_concat": "batch"}
    if t.global_batch:
        upd["global_batch"] = t.global_batch * g
    train = t.model_copy(update=upd)
    train._joined_pair = row != t.seq_len      # each row holds both sides (flops.padded_pack_segments)
    return scn.model_copy(update={"train": train})


# ---- memory -----------------------------------------------------------------------------------------------
def _low(scn: Scenario) -> int:
    return 4 if scn.train.precision == "fp32" else 2


def _shard(scn: Scenario) -> int:
    """ZeRO-3 / FSDP shards a frozen model prepared like the policy (TRL prepare_deepspeed/prepare_fsdp)."""
    p = scn.parallel
    return p.zero_shard_dp * p.cp if p.zero >= 3 else 1   # shard_group x cp under hybrid sharding


def frozen_model_bytes(scn: Scenario, model: ModelSpec, stage: str = "only", bytes_per_param: float | None = None) -> float:
    """Bytes per GPU of a frozen copy of `model` in the training dtype (or `bytes_per_param`), split like
    the policy (tp, pp, ep) and sharded under ZeRO-3/FSDP."""
    p = scn.parallel
    native_tp = scn.framework in ("megatron", "torchtitan")
    rp = rank_params(model, tp=p.tp, pp=p.pp, ep=p.ep, stage=stage, vocab_parallel=native_tp, etp=p.etp)
    return rp.total * (_low(scn) if bytes_per_param is None else bytes_per_param) / _shard(scn)


def reference_bytes_per_param(scn: Scenario) -> float:
    """TRL's DPO reference is loaded with the policy's `model_init_kwargs` (dpo_trainer.py L893-905), so it
    is stored like the policy's parameters: fp32 where the policy keeps fp32 parameters (HF Trainer / FSDP
    mixed precision with master weights), 16-bit where DeepSpeed or Megatron cast the model."""
    from .memory import state_bytes
    return float(state_bytes(scn).weight)


def _tokens_rank(scn: Scenario, sequences: int) -> float:
    t = scn.train
    return t.micro_batch * sequences * t.seq_len / scn.parallel.cp


def _vocab_rank(scn: Scenario, model: ModelSpec) -> float:
    native_tp = scn.framework in ("megatron", "torchtitan")
    return model.vocab_size / (scn.parallel.tp if native_tp else 1)


def _forward_layer_bytes(scn: Scenario, model: ModelSpec, tokens: float) -> float:
    """A no-grad forward keeps only the layer it is in: per token the residual, norm output, q/k/v/o
    and the MLP's gate/up/act in 16-bit (the serving prefill count, estimate/memory.py)."""
    from .memory import _prefill_bytes_per_token
    return tokens * _prefill_bytes_per_token(model, scn.parallel.tp)


def _add(phase: dict[str, float], **extra: float) -> dict[str, float]:
    out = dict(phase)
    for k, v in extra.items():
        out[k] = out.get(k, 0.0) + v
    return out


def _stage_phases(scn: Scenario, model: ModelSpec, stage: str, sh: ObjectiveShape, teacher: ModelSpec | None,
                  facts: dict[str, Any]) -> tuple[dict[str, dict[str, float]], list[str], float]:
    from .flops import row_len
    from .memory import _train_components
    pol = policy_scenario(scn)
    phases, notes = _train_components(pol, model, stage)
    cpu = phases.pop("_cpu")["cpu"]
    notes = list(notes)
    last = stage in ("last", "only")
    low = _low(scn)
    held = 0.0
    loss_block = _preference_loss_block(scn, model, sh) if last else None
    if loss_block is not None:
        for ph in phases.values():
            if ph.get("logits"):
                ph["logits"] = loss_block
    if sh.reference == "copy":
        ref_b = reference_bytes_per_param(scn) if sh.name in TRACED_PREF else low
        held = frozen_model_bytes(scn, model, stage, ref_b)
        facts["reference_weights_bytes"] = int(held)
        notes.append(f"{sh.name}: a frozen reference copy of the model ({ref_b:g}-byte weights, stored like the "
                     "policy's parameters) is held on every GPU"
                     + (" (sharded like the policy under ZeRO-3/FSDP)" if _shard(scn) > 1 else "")
                     + f" ({TRL_REF} {'kto_trainer.py L912-927' if sh.name == 'kto' else 'dpo_trainer.py L893-936'})"
                     "; counted under weights")
    elif sh.reference == "base":
        notes.append(f"{sh.name}: the reference is the base model with the adapters disabled (TRL with a PEFT model "
                     "and ref_model=None): no second copy")
    elif sh.reference == "precomputed":
        notes.append(f"{sh.name}: reference log-probs precomputed before training (precompute_ref_log_probs): no "
                     "reference model at train time; its forward over the data set runs once before training")
    if sh.teacher and teacher is not None:
        held += frozen_model_bytes(scn, teacher)
        facts["teacher_weights_bytes"] = int(frozen_model_bytes(scn, teacher))
        notes.append(f"distill: teacher {teacher.name} held frozen in the training dtype; its logits and "
                     "log-probs stay alive until the loss's backward (TRL GKD); counted under weights and logits")
    if held:
        for ph in phases.values():
            ph["weights"] = ph.get("weights", 0.0) + held
    if sh.reference_at_once and last:
        # the reference forward, after the policy forward: the policy's saved activations, its logits
        # (model dtype) and the frozen weights alive; the reference keeps one layer and its own logits
        pol_tokens = _tokens_rank(scn, sh.grad_sequences)
        ref_tokens = _tokens_rank(scn, sh.reference_at_once)
        vocab = _vocab_rank(scn, model)
        base = phases["backward"]
        if sh.name in TRACED_PREF and loss_block is not None:
            # TRL's logits are fp32 (accelerate AMP's convert_outputs_to_fp32): the policy's fp32 logits
            # are alive; the reference's 16-bit logits and their fp32 copy exist together at the cast
            ref_logits = ref_tokens * vocab * (OUT_BYTES + low)
            pol_logits = pol_tokens * vocab * OUT_BYTES
            seq_logsoftmax = 0.0          # the fp32 branch reduces row by row with logsumexp
        else:
            seq_logsoftmax = row_len(scn.train) / scn.parallel.cp * vocab * low   # one row of selective_log_softmax
            ref_logits = ref_tokens * vocab * low
            pol_logits = loss_block if loss_block is not None else pol_tokens * vocab * low
        facts["reference_logits_bytes"] = int(ref_logits)
        phases["reference_forward"] = dict(
            base, logits=pol_logits + ref_logits,
            temporary=base.get("temporary", 0.0) + _forward_layer_bytes(scn, model, ref_tokens) + seq_logsoftmax)
    if sh.name in TRACED_DPO and loss_block is not None and last:
        # TRL's logged metrics, still inside `_compute_loss` (dpo_trainer.py L1588-1625): the entropy of the
        # shifted logits through `entropy_from_logits`, whose reshape(-1, V) of the shifted view (2 x
        # micro_batch sequences) copies it, then 128-row chunks (log_softmax, exp, product); the policy's
        # and the reference's fp32 logits are alive. The reference forward's layer working set is gone.
        pol_tokens = _tokens_rank(scn, sh.grad_sequences)
        vocab = _vocab_rank(scn, model)
        ref_logits = _tokens_rank(scn, sh.reference_at_once) * vocab * OUT_BYTES
        row = row_len(scn.train)                     # the shift drops one position per row
        copy = pol_tokens * (row - 1) / row * vocab * OUT_BYTES
        chunks = 3 * ENTROPY_CHUNK_ROWS * vocab * OUT_BYTES
        facts["metrics_logits_copy_bytes"] = int(copy)
        phases["loss_metrics"] = dict(phases["backward"], logits=pol_tokens * vocab * OUT_BYTES + ref_logits + copy
                                      + chunks)
    if sh.name == "kto" and loss_block is not None and last:
        phases["loss_metrics"] = dict(phases["backward"], logits=_kto_metrics_logits(scn, model, sh))
    if sh.teacher and teacher is not None and last:
        tokens = _tokens_rank(scn, 1)
        t_logits = tokens * _vocab_rank(scn, teacher) * 2 * low     # logits + log-softmax kept for the KL
        facts["teacher_logits_bytes"] = int(t_logits)
        for name in ("backward", "attention_backward", "next_forward"):
            if name in phases:
                phases[name] = _add(phases[name], logits=t_logits)
    if not sh.lm_head:
        _score_head(scn, model, stage, phases, notes)
    return phases, notes, cpu


def _kto_metrics_logits(scn: Scenario, model: ModelSpec, sh: ObjectiveShape) -> float:
    """KTO's logged metrics, inside `_compute_loss` with `outputs` and `ref_outputs` (fp32 logits) alive
    (kto_trainer.py L1570-1610): first the entropy over a flattened copy of the shifted logits (then 128-row
    chunks); then `shift_logits.detach().index_select(0, chosen_idx)` and `(0, rejected_idx)`, copies of every
    row that stay alive until return, and a boolean-mask copy of one side's completion tokens at a time (the
    larger side: half the batch, rounded up). The larger of the two moments."""
    t = scn.train
    vocab = _vocab_rank(scn, model)
    s = t.seq_len / scn.parallel.cp
    rows = t.micro_batch * (s - 1)                         # shifted positions of the batch
    held = _tokens_rank(scn, sh.grad_sequences) * vocab * OUT_BYTES
    if sh.reference in ("copy", "base"):
        held += _tokens_rank(scn, sh.reference_at_once) * vocab * OUT_BYTES
    entropy = rows * vocab * OUT_BYTES + 3 * ENTROPY_CHUNK_ROWS * vocab * OUT_BYTES
    side = -(-t.micro_batch // 2) * (s - 1)
    copies = (rows + side) * vocab * OUT_BYTES
    return held + max(entropy, copies)


def _preference_loss_block(scn: Scenario, model: ModelSpec, sh: ObjectiveShape) -> float | None:
    """Bytes of the policy's loss block in TRL's preference trainers (train.loss: full), which read
    log-probs from the logits through `selective_log_softmax` (trl/trainer/utils.py L479-515), not HF's
    cross-entropy: 16 bytes per logit (below); ORPO and CPO/SimPO add an NLL on the chosen half
    (nn.CrossEntropyLoss saves its fp32 log-softmax: orpo_trainer.py L782-803, cpo_trainer.py,
    cpo_alpha default 1.0), + 2 bytes per logit averaged over both halves. None: keep the SFT loss block
    (other objectives, chunked or fused losses)."""
    if sh.name not in PREFERENCE or scn.train.loss != "full":
        return None
    # fp32 logits (accelerate AMP returns them as fp32 copies; fp32 training has them anyway), so
    # selective_log_softmax takes its fp32 branch: gather + per-row logsumexp, which saves its input
    # (the logits stay alive into backward). Its backward holds, with the logits, the stacked per-row
    # logsumexp gradients, gather's zero-filled gradient and its scatter_add: 4 fp32 logit tensors
    # (traced: tests/test_trace_posttrain.py). KTO is the same over its unpaired batch.
    tokens = _tokens_rank(scn, sh.grad_sequences)
    block = 4 * OUT_BYTES * _vocab_rank(scn, model) * tokens
    if sh.name in ("orpo", "simpo"):
        # the chosen half's NLL: nn.CrossEntropyLoss on the fp32 logits saves its log-softmax output (the
        # contiguous input copy is freed when cross_entropy_loss returns), alive through that backward
        block += OUT_BYTES * _vocab_rank(scn, model) * tokens / 2
    return block


def _score_head(scn: Scenario, model: ModelSpec, stage: str, phases: dict[str, dict[str, float]],
                notes: list[str]) -> None:
    """Reward model: no vocabulary logits; an untied lm_head's weights (and, under full fine-tuning, its
    gradients and optimizer states) are replaced by a 1-output score head (h parameters, neglected)."""
    p = scn.parallel
    native_tp = scn.framework in ("megatron", "torchtitan")
    rp = rank_params(model, tp=p.tp, pp=p.pp, ep=p.ep, stage=stage, vocab_parallel=native_tp, etp=p.etp)
    frac = rp.lm_head / rp.total if rp.total else 0.0
    peft = scn.train.method in ("lora", "qlora")
    for ph in phases.values():
        ph["logits"] = 0.0
        if peft:
            ph["weights"] = max(0.0, ph.get("weights", 0.0) - rp.lm_head * _low(scn) / (_shard(scn) if p.zero >= 3 else 1))
        else:
            for k in ("weights", "gradients", "optimizer_states"):
                if k in ph:
                    ph[k] *= 1.0 - frac
    if not peft and "optimizer_step" in phases:      # the foreach step's temporary is per parameter too
        phases["optimizer_step"]["temporary"] = phases["optimizer_step"].get("temporary", 0.0) * (1.0 - frac)
    notes.append(f"reward: a scalar score head replaces the LM head (AutoModelForSequenceClassification, num_labels=1; "
                 f"{TRL_REF} reward_trainer.py): no vocabulary logits; chosen and rejected in one batch")


def train_memory(scn: Scenario, model: ModelSpec, capacity_bytes: int,
                 teacher: ModelSpec | None = None) -> MemoryEstimate:
    """Per-GPU peak of a preference / distillation / reward-model step (the worst pipeline stage)."""
    from .memory import _finish
    sh = shape(scn)
    teacher = teacher if teacher is not None or not sh.teacher else teacher_spec(scn)
    best: MemoryEstimate | None = None
    for stage in stages(scn.parallel.pp):
        facts: dict[str, Any] = {}
        phases, notes, cpu = _stage_phases(scn, model, stage, sh, teacher, facts)
        if scn.train.pair_concat == "sequence":
            notes.insert(0, f"{sh.name}: chosen and rejected joined on the sequence axis (train.pair_concat: "
                         f"sequence): {scn.train.micro_batch} row(s) of 2 x {scn.train.seq_len:,} tokens per "
                         "micro-step, the same tokens as two rows; attention spans the joined row")
        elif sh.grad_sequences > 1:
            notes.insert(0, f"{sh.name}: chosen and rejected sequences go through the policy together: "
                         f"{sh.grad_sequences} x micro_batch = {scn.train.micro_batch * sh.grad_sequences} "
                         "sequences per micro-step")
        if sh.name == "kto" and scn.train.micro_batch < 2:
            notes.append("kto: TRL's KTOTrainer refuses per_device_train_batch_size 1 with its default loss (the KL "
                         f"term needs other examples in the micro-batch: {TRL_REF} kto_trainer.py L806); use "
                         "micro_batch >= 2")
        notes.append(UNVALIDATED)
        est = _finish(phases, scn, capacity_bytes, notes, cpu)
        if best is None or est.peak_bytes_per_gpu > best.peak_bytes_per_gpu:
            best = est
    assert best is not None
    return best


UNVALIDATED = ("post-training memory is built from the trainers' code and checked against fake-tensor traces of TRL's "
               "DPO, KTO, ORPO, SimPO steps and GRPO pass (within 0.3 %, docs/posttrain.md); its error bar is that of "
               "four TRL DPO steps measured on one H200 (validation/gathered/measured.csv HD01-HD04): no published peak "
               "of a preference, distillation or reward-model run with a stated GPU and lengths is scored yet")


def teacher_spec(scn: Scenario) -> ModelSpec:
    """The distillation teacher's ModelSpec (an unknown name raises with close matches, naming train.teacher)."""
    from ..errors import InputError
    from ..models import get_model
    try:
        return get_model(scn.train.teacher)
    except InputError as err:
        raise err.about(f"train.teacher: {err.what}") from None


# ---- speed ------------------------------------------------------------------------------------------------
# TRL DPOTrainer's log-prob block beyond the SFT loss block the policy pass already charges, in HBM bytes per
# policy logit (one token of the 2B rows x one vocabulary entry; fp32 logits, 4 bytes). TRL v1.9.0 (35def3ee)
# trl/trainer/dpo_trainer.py `_compute_loss`, trl/trainer/utils.py; each op one kernel reading its inputs and
# writing its output:
# - policy forward: accelerate's fp32 copy of the bf16 logits (2 + 4); selective_log_softmax's fp32 branch
#   (utils.py L506-509): a gather (a token a row: ~0) and a per-row logsumexp, four kernels in
#   pytorch/pytorch@52881c80 aten/src/ATen/native/ReduceOps.cpp `logsumexp_out_impl` (amax 4, `self - maxes` 4 + 4,
#   `exp_` 4 + 4, `sum_out` 4 = 24): 30;
# - its backward: logsumexp's (grad x exp(self - result): sub 8, exp 8, mul 8 = 24), the per-row gradients stacked
#   (unbind's backward, 4 + 4), gather's zero-filled gradient (4; its scatter_add ~0), the two gradients summed
#   (4 + 4 + 4), the shift view's backward (zeros 4, slice copy 4 + 4), the fp32 copy's backward (4 + 2): 66;
# - the reference forward (L1366-1397, skipped with precompute_ref_log_probs): fp32 copy 6 + logsumexp 24 = 30;
# - the logged metrics (L1588-1625): entropy_from_logits over a flattened copy of the shifted view (4 + 4), per
#   128-row chunk log_softmax (4 + 4), exp (4 + 4), their product (4 + 4 + 4), its sum (4): 40; the chosen and the
#   rejected halves picked by boolean masks (4 + 4) and averaged (4): 12; the chosen argmax (half the rows, 4): 2.
# Less HF's cross-entropy block counted the same way (elementwise.EAGER_LOSS_BYTES_PER_LOGIT, 36, which the SFT
# step already charges): 30 + 66 + 30 + 54 - 36 = 144 with a reference forward, 114 without.
# scripts/trace_dpo_logprob_bytes.py counts the same code op by op on CPU tensors: 145.4 and 111.8.
TRL_DPO_LOGPROB_EXTRA = {"reference": 144.0, "precomputed": 114.0}
TRL_FP32_COPY_BYTES = 6.0       # the reference logits' fp32 copy (2 read + 4 written), absent in fp32 training


def trl_logprob_bytes(scn: Scenario) -> float:
    """Bytes per policy logit that TRL's DPO/IPO step adds over the SFT loss block (TRL_DPO_LOGPROB_EXTRA); 0
    where the step is not TRL's full-logits DPOTrainer loss: other frameworks (open-instruct's, Megatron's), a pair
    joined on the sequence axis (pair_concat: sequence, open-instruct's OLMo-core forward), other objectives, or a
    fused/chunked loss (Liger's `_compute_loss_liger`, Unsloth's)."""
    t = scn.train
    if (scn.framework != "hf" or t.objective not in TRACED_DPO or t.loss != "full"
            or t.pair_concat == "sequence"):
        return 0.0
    runs_ref = reference_kind(scn) in ("copy", "base")
    out = TRL_DPO_LOGPROB_EXTRA["reference" if runs_ref else "precomputed"]
    if t.precision == "fp32" and runs_ref:
        out -= TRL_FP32_COPY_BYTES     # the policy's copy and its backward cancel against the SFT block's
    return out


def trl_logprob_seconds(scn: Scenario, model: ModelSpec, gpu: Any, params: Mapping[str, Any] | None,
                        tokens: float) -> float:
    """Seconds per step a GPU spends on TRL's DPO log-prob block beyond the SFT loss: trl_logprob_bytes over its
    data-parallel rank's share of the step's policy tokens x the vocabulary, at the bandwidth share measured for
    eager aten kernels (elementwise.bandwidth_share, as the SFT step prices HF's eager cross entropy): TRL's
    `_compute_loss` runs eagerly outside any compiled model."""
    per_logit = trl_logprob_bytes(scn)
    if not per_logit:
        return 0.0
    from . import elementwise
    pa = scn.parallel
    logits = tokens / scn.dp / pa.cp * model.vocab_size / pa.tp
    return per_logit * logits / (float(gpu.mem_bandwidth_bytes_per_s) * elementwise.bandwidth_share("eager", "loss"))


def forward_seconds_per_token(base: PerformanceEstimate, scn_policy: Scenario, model: ModelSpec,
                              fwd_model: ModelSpec | None = None) -> float:
    """GPU seconds per token (whole plan) of a no-grad forward of `fwd_model` (default the policy model),
    at the efficiency the policy's own step runs: the step's compute time per hardware FLOP it executes,
    times the forward FLOPs (2 x active matmul params + attention core). An approximation: a forward-only
    pass has no backward GEMMs, whose efficiency differs a little."""
    from .flops import attention_span, training_flops_per_token
    t = scn_policy.train
    fl = training_flops_per_token(model, attention_span(t), t.recompute, t.method, t.lora_rank)
    hw_per_token = fl.model * (base.hfu / base.mfu) if base.mfu else fl.hardware
    tokens = base.details["tokens_per_step"]
    s_per_flop = base.breakdown["compute"] / (hw_per_token * tokens)
    f = training_flops_per_token(fwd_model or model, attention_span(t))
    return s_per_flop * (f.matmul_forward + f.attention_forward)


def train_speed(scn: Scenario, model: ModelSpec, gpu: Any, *, params: Mapping[str, Any] | None = None,
                network: Any = None, memory: Any = None, teacher: ModelSpec | None = None) -> PerformanceEstimate:
    """Step time of a preference / distillation / reward-model step: the policy's SFT step on its
    sequences, plus the no-grad forwards of the reference (and KTO's KL batch, the teacher)."""
    from .flops import attention_span, training_flops_per_token
    from .speed import train_performance
    sh = shape(scn)
    pol = policy_scenario(scn)
    base = train_performance(pol, model, gpu, params=params, network=network, memory=memory)
    t, n = scn.train, scn.hardware.count
    tokens = base.details["tokens_per_step"]                  # policy (with-grad) tokens per step
    per_example = tokens / sh.grad_sequences                 # tokens of one sequence per example
    fwd = forward_seconds_per_token(base, pol, model)
    extra: dict[str, float] = {}
    extra_flops = 0.0
    f_pol = training_flops_per_token(model, attention_span(t))
    if sh.reference_sequences:
        extra["reference_forward"] = fwd * per_example * sh.reference_sequences
        extra_flops += (f_pol.matmul_forward + f_pol.attention_forward) * per_example * sh.reference_sequences
    if sh.policy_nograd_sequences:
        extra["policy_kl_forward"] = fwd * per_example * sh.policy_nograd_sequences
        extra_flops += (f_pol.matmul_forward + f_pol.attention_forward) * per_example * sh.policy_nograd_sequences
    t_lp = trl_logprob_seconds(scn, model, gpu, params, tokens)
    if t_lp:
        extra["logprob_block"] = t_lp
    if sh.teacher:
        tspec = teacher if teacher is not None else teacher_spec(scn)
        extra["teacher_forward"] = forward_seconds_per_token(base, pol, model, tspec) * per_example
        f_t = training_flops_per_token(tspec, attention_span(t))
        extra_flops += (f_t.matmul_forward + f_t.attention_forward) * per_example
    saved = 0.0
    fl = training_flops_per_token(model, attention_span(t), t.recompute, t.method, t.lora_rank)
    if not sh.lm_head:
        # no LM head: its matmul (2 V h per token forward; x3 with its weight gradient, x2 frozen) is gone
        head = 2.0 * model.vocab_size * model.hidden_size * (2.0 if t.method in ("lora", "qlora") else 3.0)
        hw = fl.model * (base.hfu / base.mfu) if base.mfu else fl.hardware
        saved = base.breakdown["compute"] * head / hw
        extra_flops -= head * tokens
    step = base.step_time_s + sum(extra.values()) - saved
    tps = tokens / step / n
    peak = fl.model * base.tokens_per_s_per_gpu / base.mfu if base.mfu else None
    mfu = (fl.model * tokens + extra_flops) / n / step / peak if peak else None
    hfu = (base.hfu * peak * base.step_time_s + extra_flops / n) / step / peak if peak else None
    bd = dict(base.breakdown)
    bd["policy_pass"] = base.step_time_s - saved
    bd.update(extra)
    notes = list(base.notes)
    phases = {"policy_pass": base.step_time_s - saved, **extra}
    bound = max(phases, key=phases.get)
    notes.append(f"{sh.name} step: " + ", ".join(f"{k} {v:.3g} s" for k, v in phases.items())
                 + f"; tokens per step count the {sh.grad_sequences} sequence(s) per example the policy trains on"
                 + (" (the reference and KL forwards are no-grad, 2N FLOPs per token)" if extra else "")
                 + (f"; logprob_block: TRL's log-prob block beyond the SFT loss, {trl_logprob_bytes(scn):g} bytes "
                    f"per logit at eager kernels' bandwidth ({TRL_REF} dpo_trainer.py _compute_loss)" if t_lp else ""))
    details = dict(base.details)
    details.update({"objective": sh.name, "reference": sh.reference, "examples_per_step": int(per_example // t.seq_len),
                    "sequences_per_example": sh.grad_sequences, "bound_by": bound,
                    "phases_s": {k: float(v) for k, v in phases.items()}})
    return dataclasses.replace(base, step_time_s=step, tokens_per_s_per_gpu=tps, mfu=mfu, hfu=hfu,
                               time_to_train_s=t.tokens / (tps * n) if t.tokens else None,
                               breakdown=bd, notes=tuple(notes), details=details)


# ---- entry points (called from estimate.memory.estimate_memory and estimate.speed.estimate_performance) ----
def estimate_posttrain_memory(scn: Scenario, model: ModelSpec, capacity_bytes: int) -> MemoryEstimate:
    if scn.train.objective in ("grpo", "ppo", "rloo"):
        from .rl import rl_memory
        return rl_memory(scn, model, capacity_bytes)
    return train_memory(scn, model, capacity_bytes)


def estimate_posttrain_performance(scn: Scenario, model: ModelSpec, gpu: Any, *, params: Mapping[str, Any] | None = None,
                                   network: Any = None, memory: Any = None) -> PerformanceEstimate:
    if scn.train.objective in ("grpo", "ppo", "rloo"):
        from .rl import rl_performance
        return rl_performance(scn, model, gpu, params=params, network=network, memory=memory)
    return train_speed(scn, model, gpu, params=params, network=network, memory=memory)


# which memory phase (MemoryEstimate.phases) each timed phase (details['phases_s']) runs in; None: the
# training step's own phases (backward, optimizer step, ...), whose largest peak is shown
TRAINING_STEP = None
MEMORY_PHASE_OF = {"rollout": "rollout", "actor_logprob": "logprob_forward", "reference_logprob": "logprob_forward",
                   "reward": "logprob_forward", "critic_values": "logprob_forward",
                   "reference_forward": "reference_forward", "policy_pass": TRAINING_STEP,
                   "actor_update": TRAINING_STEP, "critic_update": TRAINING_STEP, "policy_kl_forward": TRAINING_STEP,
                   "teacher_forward": TRAINING_STEP, "weight_sync": "-", "rule_reward": "-"}


def phase_table(mem: MemoryEstimate, perf: PerformanceEstimate) -> list[tuple[str, int | None, float | None]]:
    """(timed phase, peak bytes per GPU while it runs, seconds per step) for each phase of the step."""
    times = dict((perf.details or {}).get("phases_s") or {})
    mapped = {v for v in MEMORY_PHASE_OF.values() if v}
    step_peak = max((v for k, v in mem.phases.items() if k not in mapped), default=None)
    rows = []
    for name, secs in times.items():
        where = MEMORY_PHASE_OF.get(name, TRAINING_STEP)
        peak = step_peak if where is TRAINING_STEP else mem.phases.get(where)
        rows.append((name, peak, secs))
    return rows


def check_models(scn: Scenario, model: ModelSpec, *, allow_hub: bool = True) -> list[str]:
    """Rules of the post-training objectives that need the models (called by pipeline.resolve): the
    teacher and reward model exist (an unknown name is an error naming the field, with close matches);
    the teacher shares the student's vocabulary (TRL GKD raises otherwise: gkd_trainer.py L192-199);
    an RL sequence (prompt + max_new_tokens) within the model's context."""
    from ..errors import InputError
    from ..models import get_model
    t = scn.train
    if t is None or t.objective == "sft":
        return []
    notes: list[str] = []
    if t.objective == "distill":
        try:
            teacher = get_model(t.teacher, allow_hub=allow_hub)
        except InputError as err:
            raise err.about(f"train.teacher: {err.what}") from None
        if teacher.vocab_size != model.vocab_size:
            raise InputError(f"train.teacher {teacher.name}",
                             f"has a vocabulary of {teacher.vocab_size:,} tokens; the student {model.name} has "
                             f"{model.vocab_size:,}. Distillation on the full next-token distribution (TRL GKD) "
                             "needs one shared vocabulary.", "pick a teacher of the student's family.")
    rl = t.rl
    if rl is not None and rl.reward_model:
        try:
            get_model(rl.reward_model, allow_hub=allow_hub)
        except InputError as err:
            raise err.about(f"train.rl.reward_model: {err.what}") from None
    if rl is not None and "rl" not in t.model_fields_set:
        # issue 20: a GRPO/PPO scenario without its rl block was priced on the defaults without a word
        mean = rl.mean_response_len if rl.mean_response_len is not None else rl.max_new_tokens
        notes.append(f"train.rl is not given: this {t.objective} step is priced on the defaults ({rl.prompts_per_step} "
                     f"prompts x group {rl.group_size}, prompt_len {rl.prompt_len}, responses of {mean} tokens "
                     f"(max_new_tokens {rl.max_new_tokens}), {rl.engine} {rl.placement}, reference "
                     f"{'on' if rl.reference else 'off'}); set train.rl to your run's values (docs/posttrain.md)")
    if rl is not None and rl.prompt_len + rl.max_new_tokens > model.max_position:
        room = model.max_position - rl.prompt_len
        fix = (f"set rl.max_new_tokens <= {room:,}" if room > 0 else
               f"set rl.prompt_len + max_new_tokens <= {model.max_position:,}")
        notes.append(f"rl.prompt_len + max_new_tokens = {rl.prompt_len + rl.max_new_tokens:,} exceeds {model.name}'s "
                     f"context of {model.max_position:,} tokens: {fix}")
    return notes
