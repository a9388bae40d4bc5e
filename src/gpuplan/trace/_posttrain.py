"""Post-training steps on fake tensors (issue 20): a DPO step (policy + frozen reference over a paired
batch) and a GRPO training pass, written op for op after TRL v1.9.0 (tag v1.9.0, commit 35def3ee).
TRL itself is not imported (it is not a dependency); what each function does and which lines it
follows is said next to it. The model forward, backward and optimizer step are the SFT trace's
(`_run._train`); only the loss differs.

DPO (trl/trainer/dpo_trainer.py `_compute_loss`, L1329-1625):
  policy forward over [chosen; rejected] (2B sequences, model-dtype logits, no HF loss), shifted
  logits (a view), `selective_log_softmax` (trl/trainer/utils.py L479: a per-row loop of
  log_softmax + gather for 16-bit logits, stacked), then the reference forward under no_grad (a frozen
  copy, or the PEFT model with its adapters disabled), its selective_log_softmax, the sigmoid loss,
  and the logged metrics: `entropy_from_logits(shift_logits.detach())` (utils.py: a `reshape(-1, V)`
  of the shifted view, which copies, then 128-row chunks), the chosen/rejected logit means over
  the completion tokens (boolean indexing copies the selected rows) and the chosen argmax.
KTO (trl/trainer/kto_trainer.py `_compute_loss` L1478-1633, `_compute_kl_logps` L1280-1330; loss_type "kto"
  default, so calculate_KL is on, L777): unpaired examples, each labelled desirable or not; a no-grad policy
  forward over the mismatched KL batch first, then the policy forward, then (no_grad) the reference over the KL
  batch and over the batch (`ref_outputs` alive until the function returns), the loss, and the logged metrics:
  entropy of the shifted logits, then `index_select` copies of the chosen and of the rejected rows' logits (alive
  until return) and boolean-mask copies of their completion tokens.
ORPO (trl/experimental/orpo/orpo_trainer.py `concatenated_forward` L748-825, `get_batch_logps` L708-746) and
  SimPO (trl/experimental/cpo/cpo_trainer.py, loss_type "simpo" with the default cpo_alpha 1.0): [chosen;
  rejected] through the policy, an NLL on the chosen half through `cross_entropy_loss` (a `.contiguous()` copy
  of the shifted chosen logits into nn.CrossEntropyLoss), then `get_batch_logps` over all logits
  (selective_log_softmax, length-averaged); no reference model. SimPO with cpo_alpha 0 skips the NLL.
GRPO (trl/trainer/grpo_trainer.py `_compute_loss` L2991, `_get_per_token_logps_and_entropies` L1435):
  the reference (and, with `old_logprob_pass`, the policy) log-probs over the batch under no_grad
  before the training pass (`_generate_and_score_completions`), then the training pass: a forward with
  `logits_to_keep = completion + 1`, the logits sliced to the completion and divided in place by the
  temperature, selective_log_softmax, entropy under no_grad (the same copying reshape), the clipped
  ratio loss plus beta x the k3 KL to the reference log-probs, masked mean, backward.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

TRL = "TRL v1.9.0 (35def3ee)"
BETA = 0.1


def forward_logits(model, autocast_ctx, fp32_outputs: bool, **kw):
    """The model's logits as TRL sees them. TRL trains with `bf16=True` by default (trl/trainer/
    base_config.py L105), i.e. accelerate's native AMP, whose `prepare_model` wraps forward in autocast
    *and* `convert_outputs_to_fp32` (accelerate 1.16 accelerator.py): 16-bit outputs come back as fp32
    copies, the 16-bit logits are dropped. `fp32_outputs` False: a run without mixed precision."""
    with autocast_ctx():
        logits = model(use_cache=False, **kw).logits
    return logits.float() if fp32_outputs and logits.dtype in (torch.bfloat16, torch.float16) else logits


def selective_log_softmax(logits, index):
    """trl/trainer/utils.py L479 (16-bit branch): per row, log_softmax then gather; rows stacked. Each
    row's log_softmax output is saved for backward; the full-size log-softmax never exists at once."""
    if logits.dtype in (torch.float32, torch.float64):
        selected = torch.gather(logits, dim=-1, index=index.unsqueeze(-1)).squeeze(-1)
        lse = torch.stack([torch.logsumexp(lg, dim=-1) for lg in logits])
        return selected - lse
    rows = []
    for row_logits, row_labels in zip(logits, index.unsqueeze(-1)):
        rows.append(F.log_softmax(row_logits, dim=-1).gather(dim=-1, index=row_labels))
    return torch.stack(rows).squeeze(-1)


def entropy_from_logits(logits, chunk_size: int = 128):
    """trl/trainer/utils.py `entropy_from_logits`: flatten (a copy when `logits` is a strided view of
    more than one sequence) and take the entropy 128 rows at a time."""
    flat = logits.reshape(-1, logits.shape[-1])
    out = [-(torch.exp(lp) * lp).sum(-1) for lp in (F.log_softmax(c, dim=-1) for c in flat.split(chunk_size, dim=0))]
    return torch.cat(out, dim=0).reshape(logits.shape[:-1])


def _selected_rows(logits, n_rows: int, mask=None):
    """`logits[mask.bool()]` with a mask of `n_rows` ones: a new (n_rows, V) tensor. Boolean indexing
    has a data-dependent shape that fake tensors cannot run, so there the result is allocated with the count;
    on real tensors (gpuplan measure) with `mask` given, the indexing itself runs, as in TRL."""
    if mask is not None and not _is_fake(logits):
        return logits[mask.bool()]
    return logits.new_empty((n_rows, logits.shape[-1]))


def _is_fake(t) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(t, FakeTensor)


def dpo_reference_logps(model, ref_model, ids, autocast_ctx, fp32_outputs: bool = True):
    """The reference's summed log-probs of [chosen; rejected] under no_grad (dpo_trainer.py L1366-1397):
    `ref_model` None is the PEFT policy with its adapters disabled (`use_adapter(model, None)`, L1374-1380),
    otherwise the frozen copy. Returns (ref_chosen, ref_rejected, ref_logits): TRL's `ref_outputs` stays alive
    until `_compute_loss` returns. Also what `_precompute_ref_logps` (L1107) computes once before training
    (`compute_ref_log_probs`, L1178)."""
    shift_labels = ids[..., 1:]
    mask = torch.ones_like(shift_labels)
    with torch.no_grad():
        if ref_model is None:
            with model.disable_adapter():
                ref_logits = forward_logits(model, autocast_ctx, fp32_outputs, input_ids=ids)
        else:
            ref_logits = forward_logits(ref_model, autocast_ctx, fp32_outputs, input_ids=ids)
        ref_per_token = selective_log_softmax(ref_logits[..., :-1, :], shift_labels)
        ref_per_token.masked_fill_(mask == 0, 0.0)
        ref_chosen, ref_rejected = ref_per_token.sum(dim=1).chunk(2, dim=0)
    return ref_chosen, ref_rejected, ref_logits


def dpo_loss(model, ref_model, ids, autocast_ctx, tracker, reference: str = "copy", fp32_outputs: bool = True,
             precomputed=None, sync_metrics: bool = False):
    """One DPO micro-step's loss (sigmoid loss, reverse KL, beta 0.1), TRL's `_compute_loss` op for op.
    `ids` is [chosen; rejected] (2B x S), every token a completion token. `ref_model` None: the
    policy with its adapters disabled (PEFT), as `use_adapter(model, None)`. `reference` 'precomputed':
    the reference log-probs come with the batch (precompute_ref_log_probs), no reference forward;
    `precomputed` = (ref_chosen, ref_rejected) gives them (default zeros). `sync_metrics`: read the logged
    metrics back to the host with `.item()` as TRL does (L1597-1625; each a device sync), for real runs."""
    S = ids.shape[1]
    logits = forward_logits(model, autocast_ctx, fp32_outputs, input_ids=ids)
    shift_logits = logits[..., :-1, :]
    shift_labels = ids[..., 1:]
    mask = torch.ones_like(shift_labels)
    per_token = selective_log_softmax(shift_logits, shift_labels)
    per_token.masked_fill_(mask == 0, 0.0)               # per_token_logps[mask == 0] = 0.0
    chosen_logps, rejected_logps = per_token.sum(dim=1).chunk(2, dim=0)
    ref_logits = None
    if reference == "precomputed":
        ref_chosen, ref_rejected = (precomputed if precomputed is not None else
                                    torch.zeros(2, ids.shape[0] // 2, dtype=per_token.dtype, device=ids.device))
    else:
        tracker.set_phase("reference_forward")
        ref_chosen, ref_rejected, ref_logits = dpo_reference_logps(model, ref_model, ids, autocast_ctx, fp32_outputs)
    delta = (chosen_logps - ref_chosen) - (rejected_logps - ref_rejected)
    loss = (-F.logsigmoid(BETA * delta)).mean()
    # logged metrics (L1588-1625): they run before the function returns, with every tensor above alive
    tracker.set_phase("loss_metrics")
    with torch.no_grad():
        entropy = entropy_from_logits(shift_logits.detach())
        logged = [(entropy * mask).sum()]
        del entropy
        chosen_logits, rejected_logits = shift_logits.detach().chunk(2, dim=0)
        chosen_mask, rejected_mask = mask.chunk(2, dim=0)
        n = chosen_logits.shape[0] * (S - 1)
        logged.append(_selected_rows(chosen_logits, n, chosen_mask).mean(-1).sum())
        logged.append(_selected_rows(rejected_logits, n, rejected_mask).mean(-1).sum())
        logged.append((chosen_logits.argmax(dim=-1) == shift_labels[: len(shift_labels) // 2]).sum())
        logged.append((BETA * (chosen_logps - ref_chosen) > BETA * (rejected_logps - ref_rejected)).float().mean())
        if sync_metrics:
            [v.item() for v in logged]
    del logits, ref_logits, shift_logits
    return loss


def grpo_logps(model, ids, completion: int, autocast_ctx, temperature: float = 1.0, entropy: bool = False,
               fp32_outputs: bool = True):
    """`_get_per_token_logps_and_entropies` for one batch: forward with logits_to_keep = completion + 1,
    the logits sliced to the completion and divided in place by the temperature (L1512-1520)."""
    logits = forward_logits(model, autocast_ctx, fp32_outputs, input_ids=ids, logits_to_keep=completion + 1)
    logits = logits[:, :-1, :][:, -completion:, :]
    logits.div_(temperature)
    logps = selective_log_softmax(logits, ids[:, -completion:])
    if entropy:
        with torch.no_grad():
            entropy_from_logits(logits)
    return logps


def grpo_loss(model, ref_model, ids, completion: int, autocast_ctx, tracker, *, reference: bool, old_pass: bool,
              fp32_outputs: bool = True):
    """One GRPO micro-step: the no-grad log-prob passes of `_generate_and_score_completions` (policy
    'old' log-probs when `old_pass`, reference log-probs when `reference`), then `_compute_loss`
    (loss_type 'dapo' default in v1.9.0 is a token-mean; the tensors are the same) with beta 0.001."""
    old = ref = None
    if old_pass or reference:
        tracker.set_phase("logprob_forward")
        with torch.no_grad():
            if old_pass:
                old = grpo_logps(model, ids, completion, autocast_ctx, fp32_outputs=fp32_outputs)
            if reference:
                if ref_model is None:
                    with model.disable_adapter():
                        ref = grpo_logps(model, ids, completion, autocast_ctx, fp32_outputs=fp32_outputs)
                else:
                    ref = grpo_logps(ref_model, ids, completion, autocast_ctx, fp32_outputs=fp32_outputs)
        tracker.set_phase("forward")
    per_token = grpo_logps(model, ids, completion, autocast_ctx, entropy=True, fp32_outputs=fp32_outputs)
    mask = torch.ones_like(per_token)
    advantages = torch.zeros(ids.shape[0], 1, dtype=torch.float32)
    old = per_token.detach() if old is None else old
    coef_1 = torch.exp(per_token - old)
    coef_2 = torch.clamp(coef_1, 1 - 0.2, 1 + 0.2)
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    if ref is not None:
        kl = torch.exp(ref - per_token) - (ref - per_token) - 1
        per_token_loss = per_token_loss + 0.001 * kl
    return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)


def _logps_no_grad(model, ids, autocast_ctx, fp32_outputs: bool):
    """A no-grad forward's summed completion log-probs (KTO's `_compute_kl_logps` and its reference pass):
    the logits exist until selective_log_softmax has reduced them."""
    logits = forward_logits(model, autocast_ctx, fp32_outputs, input_ids=ids)
    per_token = selective_log_softmax(logits[:, :-1, :], ids[:, 1:])
    per_token.masked_fill_(torch.zeros_like(per_token, dtype=torch.bool), 0.0)
    return per_token.sum(-1), logits


def kto_loss(model, ref_model, ids, kl_ids, n_chosen: int, autocast_ctx, tracker, reference: str = "copy",
             fp32_outputs: bool = True):
    """One KTO micro-step (loss_type 'kto', beta 0.1), `_compute_loss` op for op. `ids` are B unpaired
    sequences, the first `n_chosen` desirable; `kl_ids` the B mismatched KL sequences (the collator cycles
    completions within the batch). Every token is a completion token."""
    S = ids.shape[1]
    tracker.set_phase("kl_forward")
    with torch.no_grad():
        kl_logps, kl_logits = _logps_no_grad(model, kl_ids, autocast_ctx, fp32_outputs)
        del kl_logits                                       # local of _compute_kl_logps: gone on return
    tracker.set_phase("forward")
    logits = forward_logits(model, autocast_ctx, fp32_outputs, input_ids=ids)     # outputs.logits
    shift_logits = logits[:, :-1, :]
    per_token = selective_log_softmax(shift_logits, ids[:, 1:])
    per_token.masked_fill_(torch.zeros_like(per_token, dtype=torch.bool), 0.0)
    completion_logps = per_token.sum(-1)
    chosen_idx = torch.arange(n_chosen)
    rejected_idx = torch.arange(n_chosen, ids.shape[0])
    chosen_logps = completion_logps.index_select(0, chosen_idx)
    rejected_logps = completion_logps.index_select(0, rejected_idx)
    ref_logits = None
    if reference == "precomputed":
        ref_logps = torch.zeros(ids.shape[0], dtype=completion_logps.dtype)
        ref_kl = torch.zeros_like(kl_logps)
    else:
        tracker.set_phase("reference_forward")
        with torch.no_grad():
            if ref_model is None:
                with model.disable_adapter():
                    ref_kl, kl_ref_logits = _logps_no_grad(model, kl_ids, autocast_ctx, fp32_outputs)
                    del kl_ref_logits
                    ref_logps, ref_logits = _logps_no_grad(model, ids, autocast_ctx, fp32_outputs)
            else:
                ref_kl, kl_ref_logits = _logps_no_grad(ref_model, kl_ids, autocast_ctx, fp32_outputs)
                del kl_ref_logits
                ref_logps, ref_logits = _logps_no_grad(ref_model, ids, autocast_ctx, fp32_outputs)
    kl = (kl_logps - ref_kl).mean().detach().clamp(min=0)
    chosen_losses = 1 - torch.sigmoid(BETA * (chosen_logps - ref_logps.index_select(0, chosen_idx) - kl))
    rejected_losses = 1 - torch.sigmoid(BETA * (kl - (rejected_logps - ref_logps.index_select(0, rejected_idx))))
    losses = torch.cat((chosen_losses, rejected_losses), 0)
    # logged metrics (L1570-1623), still inside _compute_loss with `outputs` and `ref_outputs` alive
    tracker.set_phase("loss_metrics")
    with torch.no_grad():
        entropy = entropy_from_logits(shift_logits.detach())
        mask = torch.ones(ids.shape[0], S - 1, dtype=torch.long)           # completion_mask[:, 1:]
        (entropy * mask).sum()
        del entropy, mask
        chosen_logits = shift_logits.detach().index_select(0, chosen_idx)
        rejected_logits = shift_logits.detach().index_select(0, rejected_idx)
        _selected_rows(chosen_logits, chosen_logits.shape[0] * (S - 1)).mean(-1).sum()
        _selected_rows(rejected_logits, rejected_logits.shape[0] * (S - 1)).mean(-1).sum()
    del logits, ref_logits, shift_logits, chosen_logits, rejected_logits
    return losses.nanmean()


SIMPO_GAMMA = 0.5          # CPOConfig.simpo_gamma default


def _log1mexp(x):
    """orpo_trainer.py L88: log(1 - exp(x)), branched at -ln 2."""
    return torch.where(x < -0.6931471805599453, torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))


def orpo_loss(model, ids, autocast_ctx, tracker, objective: str = "orpo", nll: bool = True,
              fp32_outputs: bool = True):
    """One ORPO (or CPO/SimPO) micro-step, `get_batch_loss_metrics` op for op: `ids` is [chosen; rejected]
    (2B x S), every token a label (ORPO's NLL runs over prompt and response alike)."""
    n = ids.shape[0] // 2
    all_logits = forward_logits(model, autocast_ctx, fp32_outputs, input_ids=ids)
    V = all_logits.shape[-1]
    labels = ids.clone()
    if objective == "orpo":
        labels = torch.where(torch.ones_like(ids, dtype=torch.bool), labels, -100)    # attention_mask == 1
    if nll:
        # cross_entropy_loss: shifted chosen logits made contiguous (a copy), nn.CrossEntropyLoss (mean)
        lg = all_logits[:n][..., :-1, :].contiguous()
        lb = labels[:n][..., 1:].contiguous()
        nll_loss = F.cross_entropy(lg.view(-1, V), lb.view(-1))
        del lg, lb
    else:
        nll_loss = torch.tensor(0.0)
    # get_batch_logps(all_logits, concatenated_labels, average_log_prob=True)
    lab = labels[:, 1:].clone()
    shift = all_logits[:, :-1, :]
    loss_mask = lab != -100
    if objective == "orpo":
        lab = torch.where(lab == -100, 0, lab)
    else:
        lab.masked_fill_(lab == -100, 0)                                     # labels[labels == -100] = 0
    per_token = selective_log_softmax(shift, lab)
    all_logps = (per_token * loss_mask).sum(-1) / loss_mask.sum(-1)
    chosen_logps, rejected_logps = all_logps[:n], all_logps[n:]
    if objective == "orpo":
        c, r = chosen_logps.float(), rejected_logps.float()
        log_odds = (c - r) - (_log1mexp(c) - _log1mexp(r))
        loss = nll_loss - (BETA * F.logsigmoid(log_odds)).mean()
    else:
        margin = (chosen_logps - rejected_logps) - SIMPO_GAMMA / BETA       # cpo_loss, loss_type "simpo"
        loss = (-F.logsigmoid(BETA * margin)).mean() + (1.0 if nll else 0.0) * nll_loss
    # logged metrics: logit means of the chosen and rejected views (reductions, no copy)
    tracker.set_phase("loss_metrics")
    with torch.no_grad():
        end = -1 if objective == "orpo" else None
        all_logits[n:, :end, :].detach().mean()
        all_logits[:n, :end, :].detach().mean()
    del all_logits, shift
    return loss
