"""Optimizer states, step temporaries and step cost per parameter tensor (docs/optimizers.md).

Element-wise optimizers (AdamW, 8-bit AdamW, SGD with momentum, Lion) hold a fixed number of bytes per
parameter. The others hold state whose size depends on each matrix's shape, so they are counted tensor
by tensor over the parameters one rank holds (`param_tensors`):

* **Adafactor** (Shazeer & Stern 2018, arXiv:1804.04235; transformers v5.24.0
  `optimization.py` `Adafactor.step`): a matrix (>= 2 dims) keeps a factored second moment, one fp32 row
  vector and one fp32 column vector (`exp_avg_sq_row` of shape[:-1], `exp_avg_sq_col`); a vector keeps a
  full fp32 `exp_avg_sq`; no first moment (beta1 None, the default). The states are made `.to(grad)` after
  the gradient is cast to fp32, so they are fp32 whatever the parameter dtype.
* **Muon** (Jordan et al. 2024, https://kellerjordan.github.io/posts/muon/; KellerJordan/Muon `muon.py`
  @1430c34; torch 2.13 `torch/optim/_muon.py`): one momentum buffer per hidden 2-D matrix
  (`zeros_like(p)`), then 5 Newton-Schulz iterations in bf16 on the (transposed-to-wide) update. The
  embedding, the output head and every vector go to AdamW, as both implementations require ("Muon should
  only be used for hidden weight layers"; torch's Muon raises on non-2-D parameters).
* **GaLore** (Zhao et al. 2024, arXiv:2403.03507; jiaweizzhao/GaLore `galore_torch/galore_projector.py`
  @55b8419, `torchrun_main.py` @691de15 targets the `attn` and `mlp` linears): per targeted m x n matrix a
  projector of r x min(m, n) (the smaller side's singular vectors, kept in the gradient's dtype) and Adam's
  two moments on the r x max(m, n) projected gradient; every other parameter plain AdamW. The projector is
  refreshed by a full SVD of the gradient every `update_proj_gap` steps (default 200).
* **SOAP** (Vyas et al. 2024, arXiv:2409.11321; nikhilvyas/SOAP `soap.py` @f42d296): Adam's two moments
  (`zeros_like(grad)`) plus, for every dimension d <= max_precond_dim (10000), a d x d preconditioner `GG`
  and its eigenbasis `Q` in fp32; vectors get Adam only (precondition_1d False).
* **Paged AdamW** (bitsandbytes `PagedAdamW` / `PagedAdamW8bit`, bitsandbytes 0.43 `optim/adamw.py`):
  AdamW's or 8-bit AdamW's states in CUDA unified memory (the `paged` flag of the scenario).

Step cost: an element-wise step is HBM traffic (speed.py's bytes per parameter); Muon, GaLore and SOAP add
matrix products per matrix (`step_flops`), which the speed engine times at the 16-bit matmul rate (Muon's
bf16 Newton-Schulz) or fp32 (SVD, eigenbases).
"""
from __future__ import annotations

from typing import Any, Callable
from dataclasses import dataclass

from ..models.spec import ModelSpec
from . import layout

ELEMENTWISE = ("adamw", "adamw-8bit", "sgd", "lion", "paged-adamw", "paged-adamw-8bit")
SHAPED = ("adafactor", "muon", "galore", "soap")
PAGED = ("paged-adamw", "paged-adamw-8bit")

NS_STEPS = 5                     # Newton-Schulz iterations (both Muon implementations' default)
SOAP_MAX_PRECOND_DIM = 10_000    # soap.py default
SOAP_PRECONDITION_FREQUENCY = 10
GALORE_TARGETS = ("attn", "mlp", "expert", "shared_expert")   # GaLore's "attn"/"mlp" module names
# row-parallel linears (Megatron): the input dimension is split over TP ranks; every other linear splits its output
_ROW_PARALLEL = ("o_proj", "down_proj", "dense", "c_proj", "fc2", "w2", "dense_4h_to_h", "out_proj")


@dataclass(frozen=True)
class Tensor:
    """`count` parameter tensors of `rows` x `cols` elements on one rank (`cols` 0: a vector of `rows`)."""
    rows: int
    cols: int
    count: float
    role: str                    # hidden (a decoder-layer matrix) | embedding | head | vector

    @property
    def numel(self) -> int:
        return self.rows * (self.cols or 1)

    @property
    def matrix(self) -> bool:
        return self.cols > 0


def param_tensors(model: ModelSpec, *, tp: int = 1, pp: int = 1, ep: int = 1, stage: str = "only",
                  vocab_parallel: bool = True, etp: int | None = None) -> list[Tensor]:
    """The parameter tensors one rank of `stage` holds, shaped as torch stores them (out x in), with the
    same placement rules as layout.rank_params (TP splits the output of column-parallel linears and the input
    of row-parallel ones; experts split over EP; the stage holds its share of the layers)."""
    L = model.num_layers
    stage_layers = -(-L // pp)
    frac = stage_layers / L
    first = stage in ("first", "only") or pp == 1
    last = stage in ("last", "only") or pp == 1
    tv = tp if vocab_parallel else 1
    out: list[Tensor] = []
    for b in model.blocks:
        if b.numel <= 0:
            continue
        if b.layer_scope == "vision":
            if first:
                out.append(Tensor(b.numel, 0, b.count, "vector"))
            continue
        if b.kind in ("embedding", "lm_head"):
            if (b.kind == "embedding" and first) or (b.kind == "lm_head" and last):
                h = model.hidden_size
                rows = b.numel // h if b.numel % h == 0 else b.numel
                cols = h if b.numel % h == 0 else 0
                out.append(Tensor(max(1, rows // tv) if cols else rows, cols, b.count,
                                  "embedding" if b.kind == "embedding" else "head"))
            continue
        if b.layer_scope == "model":            # final norm and other model-level vectors: last stage
            if last:
                out.append(Tensor(b.numel, 0, b.count, "vector"))
            continue
        count = b.count * frac
        if b.linear is None:
            split = tp if b.kind == "bias" else 1
            out.append(Tensor(max(1, b.numel // split), 0, count, "vector"))
            continue
        fin, fout = b.linear
        split = tp
        if b.kind == "expert":       # E/ep experts per rank, each split over etp (layout.expert_tp)
            count /= ep
            split = layout.expert_tp(tp, ep, etp)
        if b.kind != "router":
            if b.name.split(".")[-1] in _ROW_PARALLEL:
                fin = max(1, fin // split)
            else:
                fout = max(1, fout // split)
        out.append(Tensor(fout, fin, count, "router" if b.kind == "router" else b.kind))
    if model.tie_embeddings and pp > 1 and stage == "last":
        # the tied matrix is replicated on the last stage (as rank_params counts it)
        out += [Tensor(t.rows, t.cols, t.count, "head") for t in param_tensors(model, tp=tp, pp=1, ep=ep,
                stage="only", vocab_parallel=vocab_parallel, etp=etp) if t.role == "embedding"]
    return out


def adapter_tensors(model: ModelSpec, rank: int, targets: frozenset[str], role_of: Callable[[Any], str | None], *,
                    tp: int = 1, layer_frac: float = 1.0,
                    out_factor: Callable[[Any, frozenset[str]], int] = lambda b, t: 1) -> list[Tensor]:
    """LoRA's A (r x in) and B (out x r) matrices for every targeted linear (TP splits the split side);
    `role_of(block)` names the role a block plays as a target and `out_factor` widens B (lora_targets)."""
    out: list[Tensor] = []
    for b in model.linear_blocks:
        short = b.name.split(".")[-1]
        if role_of(b) not in targets:
            continue
        fin, fout = b.linear
        if short in _ROW_PARALLEL:
            fin = max(1, fin // tp)
        else:
            fout = max(1, fout // tp)
        n = b.count * layer_frac
        out += [Tensor(rank, fin, n, "hidden"), Tensor(fout * out_factor(b, targets), rank, n, "hidden")]
    return out


# ---- states ---------------------------------------------------------------------------------------------
def elementwise_state_bytes(optimizer: str, state_elem: float) -> float:
    """Bytes of state per parameter of an element-wise optimizer. AdamW: exp_avg + exp_avg_sq; 8-bit
    AdamW: 1 byte each + bitsandbytes' per-2048-block statistics; SGD momentum and Lion: one buffer."""
    return {"adamw": 2 * state_elem, "adamw-8bit": 2.0 + 8 / 2048, "sgd": state_elem, "lion": state_elem,
            "paged-adamw": 2 * 4.0, "paged-adamw-8bit": 2.0 + 8 / 2048}[optimizer]


def _muon_target(t: Tensor) -> bool:
    return t.matrix and t.role not in ("embedding", "head")


def _galore_target(t: Tensor) -> bool:
    return t.matrix and t.role in GALORE_TARGETS + ("hidden",)


def tensor_state_bytes(optimizer: str, t: Tensor, state_elem: float, galore_rank: int = 128) -> float:
    """Optimizer-state bytes of one tensor (not times its count)."""
    n = t.numel
    if optimizer in ELEMENTWISE:
        return n * elementwise_state_bytes(optimizer, state_elem)
    if optimizer == "adafactor":
        return (t.rows + t.cols) * 4.0 if t.matrix else n * 4.0
    if optimizer == "muon":
        return n * state_elem if _muon_target(t) else n * 2 * state_elem
    if optimizer == "galore":
        if not _galore_target(t):
            return n * 2 * state_elem
        r = min(galore_rank, t.rows, t.cols)
        return (r * min(t.rows, t.cols) + 2 * r * max(t.rows, t.cols)) * state_elem
    if optimizer == "soap":
        pre = sum(2 * d * d * 4.0 for d in (t.rows, t.cols) if 0 < d <= SOAP_MAX_PRECOND_DIM) if t.matrix else 0.0
        return n * 2 * state_elem + pre
    raise ValueError(optimizer)


def state_bytes(optimizer: str, tensors: list[Tensor], state_elem: float, galore_rank: int = 128) -> float:
    return sum(tensor_state_bytes(optimizer, t, state_elem, galore_rank) * t.count for t in tensors)


# ---- step temporaries -------------------------------------------------------------------------------------
def step_temporary_bytes(optimizer: str, tensors: list[Tensor], state_elem: float, *, fused: bool,
                         params_fp32: bool, galore_rank: int = 128) -> float:
    """Peak transient bytes of one optimizer step.

    AdamW/SGD/Lion `foreach` (torch): one parameter-sized buffer in the state dtype over all parameters
    it steps; `fused` and bitsandbytes' 8-bit kernels none. The per-tensor loops hold temporaries of the
    largest tensor they visit:
    * Adafactor: `grad**2 + eps` and the rebuilt `update`, then `-update`: two fp32 copies of the largest
      parameter; with 16-bit parameters also the fp32 gradient and `p.float()` (four).
    * Muon (torch 2.13 `_single_tensor_muon`, nesterov on by default): the Nesterov update
      `grad.lerp(buf)` in the state dtype, then in `_zeropower_via_newtonschulz` its bf16 copy, the Gram
      matrix A (k x k, k the smaller side), A's update and the next iterate beside the current one:
      m n x state bytes + 2 x (2 m n + 2 k^2) bytes of the largest hidden matrix; its AdamW part (foreach)
      one buffer over the other parameters; the larger of the two.
    * GaLore: the projected-back full-size update of the largest target (fp32) and its low-rank gradient;
      the AdamW part as above.
    * SOAP: the projected gradient, the preconditioned update and its projection back: three copies of the
      largest parameter in the state dtype.
    """
    if not tensors:
        return 0.0
    total = sum(t.numel * t.count for t in tensors)
    if optimizer in ("adamw-8bit", "paged-adamw-8bit"):
        return 0.0
    if optimizer in ("adamw", "sgd", "lion", "paged-adamw"):
        return 0.0 if (fused or optimizer == "paged-adamw") else total * state_elem
    largest = max(t.numel for t in tensors)
    if optimizer == "adafactor":
        return largest * 4.0 * (2 if params_fp32 else 4)
    if optimizer == "soap":
        return largest * 3 * state_elem
    if optimizer == "muon":
        hidden = [t for t in tensors if _muon_target(t)]
        rest = total - sum(t.numel * t.count for t in hidden)
        ns = max((t.numel * state_elem + 2 * (2 * t.numel + 2 * min(t.rows, t.cols) ** 2) for t in hidden),
                 default=0.0)
        return max(ns, 0.0 if fused else rest * state_elem)
    if optimizer == "galore":
        targets = [t for t in tensors if _galore_target(t)]
        rest = total - sum(t.numel * t.count for t in targets)
        proj = max(((t.numel + min(galore_rank, t.rows, t.cols) * max(t.rows, t.cols)) * 4.0 for t in targets),
                   default=0.0)
        return max(proj, 0.0 if fused else rest * state_elem)
    raise ValueError(optimizer)


# ---- step cost --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepFlops:
    """Matrix-product FLOPs of one optimizer step beyond the element-wise update, per rank."""
    bf16: float = 0.0            # tensor-core 16-bit work (Muon's Newton-Schulz)
    fp32: float = 0.0            # fp32 work (GaLore projections and SVD, SOAP's rotations and eigenbases)


def newton_schulz_flops(rows: int, cols: int, steps: int = NS_STEPS) -> float:
    """One quintic Newton-Schulz orthogonalisation of a rows x cols matrix, k = min, l = max: per iteration
    A = X X^T (2 k^2 l), A A (2 k^3), B X (2 k^2 l)."""
    k, l = min(rows, cols), max(rows, cols)
    return steps * (4.0 * k * k * l + 2.0 * k ** 3)


def thin_svd_flops(rows: int, cols: int) -> float:
    """Thin SVD with U1 and V (Golub-Reinsch), m >= n: 14 m n^2 + 8 n^3 (Golub & Van Loan, Matrix
    Computations, 4th ed., Fig. 8.6.1)."""
    m, n = max(rows, cols), min(rows, cols)
    return 14.0 * m * n * n + 8.0 * n ** 3


def step_flops(optimizer: str, tensors: list[Tensor], galore_rank: int = 128, galore_gap: int = 200) -> StepFlops:
    """Per-step matrix work of the shaped optimizers, amortising periodic refreshes over their period.

    Muon: Newton-Schulz on every hidden matrix. GaLore: project (2 m n r) and project back (2 m n r) every
    step, the SVD every `galore_gap` steps. SOAP (soap.py: `project` and `project_back` of the gradient,
    the GG update, and `exp_avg` projected back and forth in `update_preconditioner`): five two-sided
    rotations of 2 m n (m + n) each per step on the preconditioned sides, and every 10 steps the QR
    refresh of each d x d eigenbasis (Q^T GG Q, GG Q and a QR: about 26/3 d^3)."""
    bf, fp = 0.0, 0.0
    for t in tensors:
        if not t.matrix:
            continue
        if optimizer == "muon" and _muon_target(t):
            bf += newton_schulz_flops(t.rows, t.cols) * t.count
        elif optimizer == "galore" and _galore_target(t):
            r = min(galore_rank, t.rows, t.cols)
            fp += (4.0 * t.rows * t.cols * r + thin_svd_flops(t.rows, t.cols) / galore_gap) * t.count
        elif optimizer == "soap":
            sides = [d for d in (t.rows, t.cols) if d <= SOAP_MAX_PRECOND_DIM]
            rot = 5 * sum(2.0 * t.numel * d for d in sides)
            refresh = sum(26.0 / 3.0 * d ** 3 for d in sides) / SOAP_PRECONDITION_FREQUENCY
            fp += (rot + refresh) * t.count
    return StepFlops(bf16=bf, fp32=fp)


# Frameworks whose optimizer step is torch.optim's, run as `train.optimizer_impl` says (HF Trainer's adamw_torch /
# adamw_torch_fused, torchtune, litgpt, torchtitan's `implementation`); Megatron-LM and DeepSpeed step with their own
# fused Adam kernels whatever the field says.
TORCH_OPTIM_FRAMEWORKS = ("hf", "torchtune", "litgpt", "torchtitan")

# Element reads + writes per parameter of torch's AdamW step (torch v2.13.0 torch/optim/adam.py; AdamW is Adam with
# decoupled weight decay). foreach (`_multi_tensor_adam`) runs one kernel per list op, each a full pass:
# _foreach_mul_(params, 1 - lr*wd) 2, _foreach_lerp_(exp_avgs, grads) 3, _foreach_mul_(exp_avg_sqs, beta2) 2,
# _foreach_addcmul_(exp_avg_sqs, grads, grads) 3, _foreach_sqrt 2, _foreach_div_ 2, _foreach_add_(eps) 2,
# _foreach_addcdiv_(params, exp_avgs, denom) 4 = 20 (18 without weight decay: HF Trainer's default
# weight_decay=0.0 skips the first). fused (`_fused_adamw`, one kernel): read param, grad, exp_avg, exp_avg_sq,
# write param, exp_avg, exp_avg_sq = 7. Measured on an H200 (validation/device/h200-2026-12-04-kernels.jsonl,
# Llama-3.2-1B, 1.24e9 fp32 parameters): foreach 26.4 ms of kernels, fused 10.0 ms: 80 and 28 bytes/parameter at
# 3.7 and 3.5 TB/s.
ADAMW_ELEMENT_ACCESSES = {"foreach": 20.0, "fused": 7.0}


def torch_adamw_traffic_bytes_per_param(impl: str, state_bytes: float) -> float:
    """HBM bytes per parameter of torch.optim.AdamW's step: element accesses of the implementation x the
    element size (torch keeps the states in the parameter's dtype: fp32 master weights -> 4, 16-bit -> 2)."""
    return ADAMW_ELEMENT_ACCESSES[impl] * state_bytes


def step_traffic_bytes_per_param(optimizer: str, framework: str, impl: str, state_bytes: float) -> float:
    """HBM bytes per parameter of the element-wise optimizer step as this framework runs it: torch's AdamW by its
    implementation (foreach or fused), everything else by `state_traffic_bytes_per_param`."""
    if optimizer == "adamw" and framework in TORCH_OPTIM_FRAMEWORKS:
        return torch_adamw_traffic_bytes_per_param(impl, state_bytes)
    return state_traffic_bytes_per_param(optimizer)


def state_traffic_bytes_per_param(optimizer: str) -> float:
    """HBM bytes read + written per parameter by the element-wise part of a step (speed.py's table for the
    optimizers it already had). Muon: read p32, g, m; write p32, m (20) + the 16-bit copy (2); GaLore and
    SOAP: AdamW's 30 (their states are smaller or larger, but the full-size gradient and weights dominate
    and the extra matrix work is timed separately); Adafactor 22; paged variants as their base."""
    return {"adamw": 30.0, "adamw-8bit": 18.0, "lion": 22.0, "adafactor": 22.0, "sgd": 14.0,
            "paged-adamw": 30.0, "paged-adamw-8bit": 18.0, "muon": 22.0, "galore": 30.0, "soap": 30.0}[optimizer]
