"""Count and time what NeMo RL v0.3.0's DTensor tensor-parallel plan for Llama costs the host, on CPU (docs/speed.md
§2.20).

Builds transformers' LlamaForCausalLM at tiny widths (kernels cost next to nothing), applies NeMo RL's Llama plan with
sequence parallelism (nemo_rl/models/dtensor/parallelize.py `_parallelize_llama` L144-179 @b1c86a8, copied below) with
torch's own `parallelize_module` over a DeviceMesh of `--tp` ranks on torch's fake process group (one process: the
collectives are no-ops, everything DTensor does on the host runs), and compares it with the same model unparallelised:

* ops: every aten op that does device work (scripts/count_train_kernels.py's rule) seen by a TorchDispatchMode, split
  into ops whose arguments include a DTensor (each one runs DTensor's sharding propagation and dispatch) and plain ones,
  plus the collectives (every placement change through torch's redistribute_local_tensor), per decoder layer (two layer counts), for a no-grad forward (a log-prob pass)
  and a forward + backward (a training micro-batch);
* host seconds: the fastest of `--reps` passes, per decoder layer, parallelised minus unparallelised.

    PYTHONPATH=src python3 scripts/time_dtensor_tp.py              # counts and timings (~3 min on 2 busy cores)
"""
from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter

import torch
import torch.distributed as dist
import transformers
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel, parallelize_module
from torch.distributed.tensor.placement_types import Replicate, Shard, _StridedShard
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import sys
sys.path.insert(0, os.path.dirname(__file__))
from count_train_kernels import launches_kernel  # noqa: E402


def nemo_rl_llama_plan(sequence_parallel: bool = True) -> dict:
    """NVIDIA-NeMo/RL@b1c86a8 nemo_rl/models/dtensor/parallelize.py L149-179, verbatim."""
    base_model_tp_plan = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),
        "model.layers.*.self_attn.q_proj": ColwiseParallel(),
        "model.layers.*.self_attn.k_proj": ColwiseParallel(),
        "model.layers.*.self_attn.v_proj": ColwiseParallel(),
        "model.layers.*.self_attn.o_proj": RowwiseParallel(),
        "model.layers.*.mlp.up_proj": ColwiseParallel(),
        "model.layers.*.mlp.gate_proj": ColwiseParallel(),
        "model.layers.*.mlp.down_proj": RowwiseParallel(),
        "lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False),
    }
    base_model_sp_plan = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "model.norm": SequenceParallel(),
        "model.layers.*.input_layernorm": SequenceParallel(),
        "model.layers.*.self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1)),
        "model.layers.*.post_attention_layernorm": SequenceParallel(),
        "model.layers.*.mlp.down_proj": RowwiseParallel(output_layouts=Shard(1)),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    }
    if sequence_parallel:
        base_model_tp_plan.update(base_model_sp_plan)
    return base_model_tp_plan


_REDIST: Counter = Counter()
_COUNTING = [False]
_PHASE = ["forward"]


def collective(src, dst) -> str:
    """The collective a placement change runs on one mesh dimension (torch/distributed/tensor/_redistribute.py)."""
    s, d = src[0], dst[0]
    if isinstance(s, _StridedShard) and d.is_replicate():
        return "all_gather"  # the flattened [b*s, h] view of a sequence-sharded [b, s, h] input (b > 1): gather + reorder
    if s.is_partial() and d.is_shard():
        return "reduce_scatter"
    if s.is_partial() and d.is_replicate():
        return "all_reduce"
    if s.is_shard() and d.is_replicate():
        return "all_gather"
    if s.is_shard() and d.is_shard():
        return "all_to_all"
    if s.is_replicate():
        return "local"      # Replicate -> Shard / Partial: a slice or nothing
    return f"{s}->{d}"


def _count_redistributions() -> None:
    """Wrap torch's redistribute_local_tensor (every DTensor placement change: the explicit `.redistribute` of the
    parallel styles' hooks and the implicit one of sharding propagation, torch/distributed/tensor/_dispatch.py) to
    count the placement changes that need a collective."""
    import torch.distributed.tensor._api as api
    import torch.distributed.tensor._dispatch as disp
    import torch.distributed.tensor._redistribute as red
    orig = red.redistribute_local_tensor

    def wrapped(local_tensor, current_spec, target_spec, **kw):
        if _COUNTING[0] and current_spec.placements != target_spec.placements:
            _REDIST[(_PHASE[0], collective(current_spec.placements, target_spec.placements))] += 1
        return orig(local_tensor, current_spec, target_spec, **kw)
    for mod in (api, disp, red):
        mod.redistribute_local_tensor = wrapped


def torchtitan_style_plan() -> dict:
    """torchtitan's Llama plan (pytorch/torchtitan@c368b6a4, 2024-12, torchtitan/parallelisms/parallelize_llama.py
    L170-200) mapped onto transformers' module names: the attention and the MLP each gather their sequence-sharded
    input once (`PrepareModuleInput(..., desired_input_layouts=Replicate())`), as Megatron's sequence parallelism does;
    a check of the counting (expected: 2 all-gathers + 2 reduce-scatters a layer forward)."""
    from torch.distributed.tensor.parallel import PrepareModuleInput
    plan = nemo_rl_llama_plan(True)
    plan.update({
        "model.layers.*.self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                       desired_input_kwarg_layouts={"hidden_states": Replicate()}),
        "model.layers.*.mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
    })
    return plan


class OpCount(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.dtensor: Counter = Counter()
        self.plain: Counter = Counter()
        self.names: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if launches_kernel(func):
            flat, _ = tree_flatten((args, kwargs or {}))
            if any(isinstance(a, DTensor) for a in flat):
                self.dtensor[_PHASE[0]] += 1
                self.names[(_PHASE[0], func.overloadpacket.__name__)] += 1
            else:
                self.plain[_PHASE[0]] += 1
        return func(*args, **(kwargs or {}))


def _no_mask(**kwargs):
    return None


def build(layers: int, tp: int, mesh, sp: bool, attn: str, plan: str = "nemo-rl"):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=16 * tp, intermediate_size=32 * tp,
                                   num_hidden_layers=layers, num_attention_heads=tp, num_key_value_heads=tp,
                                   head_dim=16, max_position_embeddings=512, tie_word_embeddings=False)
    cfg._attn_implementation = attn
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    if mesh is not None:
        parallelize_module(model, mesh, torchtitan_style_plan() if plan == "torchtitan" else nemo_rl_llama_plan(sp))
    return model


def _fwd(model, ids):
    # as the worker calls it (dtensor_policy_worker.py L938-946 @b1c86a8): explicit position ids (the comment there:
    # "otherwise the sharding for DTensor will be incorrect"), an all-ones mask, no KV cache
    pos = torch.arange(ids.shape[1]).repeat(ids.shape[0], 1)
    return model(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=pos, use_cache=False)


def step(model, ids, train: bool):
    # (the loss here is a plain sum over gathered logits, not NeMo RL's vocabulary-parallel log-prob: only the
    # per-decoder-layer figures, the difference of two layer counts, are used)
    _PHASE[0] = "forward"
    if train:
        out = _fwd(model, ids).logits
        logits = out.full_tensor() if isinstance(out, DTensor) else out
        _PHASE[0] = "backward"
        logits.float().sum().backward()
        _PHASE[0] = "forward"
        model.zero_grad(set_to_none=True)
    else:
        with torch.no_grad():
            out = _fwd(model, ids).logits
            if isinstance(out, DTensor):
                out.to_local()


def count(model, ids, train: bool):
    step(model, ids, train)
    _REDIST.clear()
    _COUNTING[0] = True
    with OpCount() as c:
        step(model, ids, train)
    _COUNTING[0] = False
    return c.dtensor, c.plain, dict(_REDIST), c.names


def best_time(model, ids, train: bool, reps: int) -> float:
    if reps == 0:
        return 0.0
    step(model, ids, train)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        step(model, ids, train)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--layers", default="4,8")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1, help="sequences per micro-batch (NB04's dynamic batches hold ~13)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--attn", default="sdpa")
    ap.add_argument("--no-sp", action="store_true")
    ap.add_argument("--plan", default="nemo-rl", choices=("nemo-rl", "torchtitan"))
    ap.add_argument("--count-only", action="store_true", help="no timing (tests/test_dtensor_tp.py)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    # transformers 4.52.4 (NeMo RL v0.3.0's pin) drops an all-ones mask under sdpa (`_ignore_causal_mask_sdpa`: the
    # causal kernel, no mask tensor); 5.x would build one from the sequence-sharded embeddings' length: skip it as 4.52.4
    import transformers.models.llama.modeling_llama as ml
    ml.create_causal_mask = _no_mask
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=a.tp)
    mesh = init_device_mesh("cpu", (a.tp,))
    _count_redistributions()
    l0, l1 = (int(x) for x in a.layers.split(","))
    ids = torch.randint(0, 256, (a.batch, a.tokens))
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, tp {a.tp}, sp {not a.no_sp}, "
          f"batch {a.batch} x {a.tokens} tokens, attn {a.attn}, plan {a.plan}")
    for train in (False, True):
        kind = "forward+backward" if train else "no-grad forward"
        res = {}
        for n in (l0, l1):
            tpm = build(n, a.tp, mesh, not a.no_sp, a.attn, a.plan)
            ref = build(n, a.tp, None, False, a.attn)
            reps = 0 if a.count_only else a.reps
            res[n] = (count(tpm, ids, train), count(ref, ids, train),
                      best_time(tpm, ids, train, reps), best_time(ref, ids, train, reps))
        (c0, r0, t0, e0), (c1, r1, t1, e1) = res[l0], res[l1]
        per = l1 - l0

        def d(a1, a0):
            return {k: (a1.get(k, 0) - a0.get(k, 0)) / per for k in sorted(set(a1) | set(a0))
                    if a1.get(k, 0) != a0.get(k, 0)}
        dt, plain, ref_ops = d(c1[0], c0[0]), d(c1[1], c0[1]), d(r1[1], r0[1])
        colls = d(c1[2], c0[2])
        names = d(c1[3], c0[3])
        tp_layer, ref_layer = (t1 - t0) / per, (e1 - e0) / per
        n_dt = sum(dt.values())
        print(f"[{kind}] per decoder layer: DTensor ops {dt}, plain ops {plain} (unparallelised model: {ref_ops})")
        fixed = {k: v - l0 * colls.get(k, 0) for k, v in c0[2].items() if v - l0 * colls.get(k, 0)}
        print(f"   collectives per layer {colls}; fixed (embedding, final norm, lm_head, loss) {fixed}")
        print(f"   DTensor ops by name: {names}")
        print("COUNTS " + json.dumps({"kind": kind, "dtensor_ops": dt, "collectives": {f"{p}:{c}": v for (p, c), v in colls.items()}}))
        print(f"   host per layer: parallelised {tp_layer * 1e6:.1f} us, unparallelised {ref_layer * 1e6:.1f} us "
              f"({ref_layer / max(sum(ref_ops.values()), 1) * 1e6:.1f} us an op); extra {(tp_layer - ref_layer) * 1e6:.1f} us"
              f" = {(tp_layer - ref_layer) / max(n_dt, 1) * 1e6:.1f} us per DTensor op")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
