"""Host issue time of an eager HF transformers training step: the floor the CPU puts under the GPU (docs/speed.md
§2.12).

Without torch.compile or CUDA graphs every op of the forward, of the backward and of the recompute is dispatched
and launched by the host one at a time while the GPU runs them asynchronously; the GPU can only finish a
micro-batch after the host has issued it, so a micro-batch lasts max(GPU time, host issue time) - the mechanism
the HF eager decode model already prices (efficiency.json engines.hf.host_issue_layer_s, docs/speed.md §3.9).
Nothing in the HF step syncs the host with the GPU inside a micro-batch (transformers 5.25's
`grouped_mm_experts_forward` computes its group offsets on the device with histc/cumsum: integrations/moe.py; the
Qwen2-MoE router is softmax/topk, modeling_qwen2_moe.py), so the host runs ahead and the max is taken per micro-batch.

Two measured inputs, nothing read from a training row:

* **Ops per layer** (estimate/data/hf_train_ops.csv): every aten op that does device work (not a view, an
  allocation or an alias) in one training step of the real transformers model class, counted on CPU by
  scripts/count_train_kernels.py (transformers 5.25, peft 0.21.2, torch 2.13; tiny widths, the layer structure
  kept), split into the forward (issued from Python), the backward (issued by the autograd engine in C++) and the
  re-run forward of full recompute (Python again, inside the backward). A few CUDA ops launch more than one kernel
  (sort, index_put_ with accumulate, topk, histc), so the count is a lower bound on launches.
* **Host seconds per op**: on the reference host the HF decode constant per counted op (0.77 ms per Llama decoder
  layer, read off bitsandbytes' benchmarking/README.md @95f9af3: H100 BF16 batch 1, Llama-3.1-8B, 24.4 ms / 32 layers; / the
  42 ops that GQA decoder layer issues under transformers 4.46.3, the benchmark's version, counted on its generate():
  18.33 us), less for an autograd-engine
  op by the difference between the two kinds measured on CPU (HF_FORWARD_OP_CPU_S - AUTOGRAD_OP_CPU_S), scaled by the
  host's single-thread speed (hardware/hosts.py). A host whose own eager op was timed (host_cpus.csv
  `eager_op_us`: one `t.add_(1.0)` from a Python loop with the GPU busy) pays that plus the framework's own extra
  per op over a bare op (HF_FORWARD_OP_CPU_S - BARE_OP_CPU_S, AUTOGRAD_OP_CPU_S - BARE_OP_CPU_S).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..versions import known_version
from . import datafiles

# CPU seconds per op, timed on this project's development machine (AMD EPYC Zen 4, the reference host's generation,
# hardware/hosts.py; Python 3.11.7, torch 2.13.0+cpu, transformers 5.25.0, peft 0.21.2, one thread) by
# `scripts/count_train_kernels.py --time` on 2026-12-04: tiny models (8 layers, 1 x 8 tokens, widths 32-64) whose
# kernels cost next to nothing, the fastest of 40 steps. Two quiet runs x four cases (Llama-3.1-8B and
# Qwen1.5-MoE-A2.7B shapes, full fp32 and LoRA all-linear over bf16, bf16 autocast): forward 16.0, 14.2, 15.0, 13.6,
# 15.8, 14.8, 15.4, 13.7 us per op (mean 14.8); backward 9.1, 8.5, 9.6, 7.8, 9.2, 8.5, 9.9, 7.8 (mean 8.8); the bare
# op 2.64 and 2.59. (Medians of the same steps are 5-15 % higher; runs on a busy machine 20-100 %.)
HF_FORWARD_OP_CPU_S = 14.8e-6  # a training-forward op of an HF model (module calls, peft, autocast)
AUTOGRAD_OP_CPU_S = 8.8e-6     # a backward op issued by the autograd engine
BARE_OP_CPU_S = 2.6e-6         # `t.add_(1.0)` on 1,024 floats in a Python loop



@dataclass(frozen=True)
class StepOps:
    """Device ops one micro-batch issues: `python` from Python (forward and recompute), `engine` from the autograd
    engine (backward)."""
    python: float
    engine: float


def _rows() -> dict[tuple[str, str, str], dict[str, str]]:
    return {(r["layer_kind"], r["method"], r["recompute"]): r for r in datafiles.rows("hf_train_ops.csv")}


def counted_kinds() -> frozenset[str]:
    """The layer kinds hf_train_ops.csv holds (models/hf_ops.py picks one for a model)."""
    return frozenset(k[0] for k in _rows())


def layer_ops(kind: str) -> tuple[float, float]:
    """(forward, backward) ops per decoder layer of counted `kind`, full fine-tuning without recompute: the per-layer
    unit another framework's host model borrows (speed._dropless_sync_exposure)."""
    row = _rows()[(kind, "full", "none")]
    return float(row["forward_ops_per_layer"]), float(row["backward_ops_per_layer"])


def _ops(row: Mapping[str, str], layers: float) -> tuple[float, float]:
    fwd = layers * float(row["forward_ops_per_layer"]) + float(row["forward_ops_fixed"])
    bwd = layers * float(row["backward_ops_per_layer"]) + float(row["backward_ops_fixed"])
    return fwd, bwd


def step_ops(kind: str, method: str, recompute: str, layers: float,
             adapted_per_layer: float | None = None) -> StepOps:
    """Ops of one micro-batch of an HF model whose decoder layers are of counted `kind` (models/hf_ops.py), `layers`
    of them. LoRA rows were counted for all-linear and
    for peft's q_proj + v_proj; another target set is interpolated between the two by adapted linears per layer
    (`adapted_per_layer`; None: all-linear; a model type without a q/v row, e.g. Phi-3's fused qkv_proj, keeps
    all-linear). QLoRA is counted as LoRA (its dequantize kernels are not in the count)."""
    meth = "full" if method == "full" else "lora"
    rc = "full" if recompute == "full" else "none"
    rows = _rows()
    fwd, bwd = _ops(rows[(kind, meth, rc)], layers)
    _, bwd_none = _ops(rows[(kind, meth, "none")], layers)
    if meth == "lora" and adapted_per_layer is not None and (kind, "lora-qv", rc) in rows:
        w = _lora_weight(rows[(kind, meth, rc)], rows[(kind, "lora-qv", rc)], adapted_per_layer)
        f_qv, b_qv = _ops(rows[(kind, "lora-qv", rc)], layers)
        _, b0_qv = _ops(rows[(kind, "lora-qv", "none")], layers)
        fwd, bwd, bwd_none = f_qv + w * (fwd - f_qv), b_qv + w * (bwd - b_qv), b0_qv + w * (bwd_none - b0_qv)
    recompute_ops = max(bwd - bwd_none, 0.0) if rc == "full" else 0.0
    return StepOps(python=fwd + recompute_ops, engine=bwd - recompute_ops)


def _lora_weight(all_linear: Mapping[str, str], qv: Mapping[str, str], adapted_per_layer: float) -> float:
    """Where `adapted_per_layer` adapted linears sit between the q/v row (0) and the all-linear row (1)."""
    n_all = float(all_linear["trainable_tensors_per_layer"]) / 2       # A and B per adapted linear
    n_qv = float(qv["trainable_tensors_per_layer"]) / 2
    return min(max((adapted_per_layer - n_qv) / (n_all - n_qv), 0.0), 1.0) if n_all > n_qv else 1.0


def op_seconds(decode_layer_s: float, speed: float, eager_op_s: float | None) -> tuple[float, float]:
    """(host seconds per Python-issued op, per autograd-engine op) on a host `speed` times the reference host's
    single-thread speed (`decode_layer_s`: the HF eager decode constant per Llama layer on the reference host), or on
    a host whose eager op was timed (`eager_op_s`)."""
    if eager_op_s is not None:
        return (eager_op_s + HF_FORWARD_OP_CPU_S - BARE_OP_CPU_S,
                eager_op_s + AUTOGRAD_OP_CPU_S - BARE_OP_CPU_S)
    ref = reference_op_s(decode_layer_s)
    return ref / speed, max(ref - (HF_FORWARD_OP_CPU_S - AUTOGRAD_OP_CPU_S), 0.0) / speed


def reference_op_s(decode_layer_s: float) -> float:
    """Host seconds per issued op on the reference host: the HF eager decode constant per decoder layer over the ops
    that layer issues in the run it was read on — bitsandbytes' H100 rows, Llama-3.1-8B (GQA) under transformers
    4.46.3: 42 ops (estimate/data/hf_decode_ops.csv, counted by scripts/count_hf_decode_ops.py; docs/speed.md
    §3.30). The unit engines.hf.host_issue_layer_s is divided into wherever another code path borrows it."""
    ops = hf_decode_ops_per_layer(HF_DECODE_REFERENCE_VERSION, mha=False)
    assert ops, "hf_decode_ops.csv lacks the reference version's GQA row"
    return decode_layer_s / ops


def issue_seconds(ops: StepOps, per_op: tuple[float, float]) -> float:
    """Host seconds to issue one micro-batch."""
    return ops.python * per_op[0] + ops.engine * per_op[1]


# The transformers version the HF eager decode constant (engines.hf.host_issue_layer_s) was read on: bitsandbytes'
# benchmarking/README.md @95f9af3 ran optimum-benchmark with transformers 4.46.3 (docs/speed.md §3.9).
HF_DECODE_REFERENCE_VERSION = "4.46.3"


def transformers_minor(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of infer.transformers_version (versions.known_version); None where it is not stated."""
    v = known_version(version, "infer.transformers_version", HF_DECODE_REFERENCE_VERSION)
    return None if v is None else v.major_minor


def hf_decode_ops_per_layer(transformers_version: str | None, mha: bool) -> int | None:
    """Device ops one Llama-style decoder layer issues in a `generate()` decode step under `transformers_version`
    (the counted row of the same major.minor in estimate/data/hf_decode_ops.csv, scripts/count_hf_decode_ops.py,
    with that version's default attention); `mha`: as many KV heads as query heads (no repeat_kv copy). None
    where that minor was not counted."""
    key = transformers_minor(transformers_version)
    if key is None:
        return None
    layout = "mha" if mha else "gqa"
    for r in datafiles.rows("hf_decode_ops.csv"):
        if transformers_minor(r["transformers"]) == key and r["kv_layout"] == layout:
            return int(r["decode_ops_per_layer"])
    return None


def hf_decode_version_scale(transformers_version: str | None, mha: bool) -> float:
    """Factor on the HF eager decode host time per layer for a run on `transformers_version`: its ops per decoder
    layer over those of 4.46.3 (the constant's version) for the same KV layout (docs/speed.md §3.30). 1 where the
    version is unknown or was not counted."""
    ops = hf_decode_ops_per_layer(transformers_version, mha)
    ref = hf_decode_ops_per_layer(HF_DECODE_REFERENCE_VERSION, mha)
    return ops / ref if ops and ref else 1.0
