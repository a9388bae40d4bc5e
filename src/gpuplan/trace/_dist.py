"""Per-rank traces of FSDP2 (ZeRO-2/3) and tensor parallel with a fake process group.

`FakeStore` + `init_process_group("fake")` give a process group whose collectives move no data but
return correctly shaped outputs, so one process can play rank `r` of a world of any size: FSDP2
shards, all-gathers and reduce-scatters, and DTensor's sharding propagation all run on fake
tensors, and every buffer they allocate is counted.
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn


@contextlib.contextmanager
def fake_world(scenario, rank: int, notes: list[str]):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    p = scenario.parallel
    dp, tp = p.dp or 1, p.tp
    world = dp * tp
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        if p.replicas > 1:
            # hybrid sharding: FSDP2 shards over dp_shard and replicates over dp_replicate (HSDP)
            mesh = init_device_mesh("cpu", (p.replicas, p.zero_shard_dp, tp),
                                    mesh_dim_names=("dp_replicate", "dp_shard", "tp"))
        else:
            mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
        notes.append(f"rank {rank} of a fake process group of world size {world} (dp={dp}, tp={tp}); ranks "
                     "differ only by shard padding, rank 0 holds the largest shards.")
        yield mesh
    finally:
        dist.destroy_process_group()


def _layers(model: nn.Module):
    base = model
    for attr in ("base_model", "model"):          # peft wrapper, then the CausalLM's backbone
        while hasattr(base, attr) and not isinstance(getattr(base, attr), nn.ModuleList):
            nxt = getattr(base, attr)
            if not isinstance(nxt, nn.Module):
                break
            base = nxt
            if hasattr(base, "layers") and isinstance(base.layers, nn.ModuleList):
                return base.layers
    layers = getattr(base, "layers", None)
    if isinstance(layers, nn.ModuleList):
        return layers
    raise RuntimeError("could not find the decoder layers (model.model.layers)")


_FULL_WIDTH_QK_NORM = ("olmo2", "olmo3")     # q_norm/k_norm over all heads at once (OLMo 2 and 3)
_COLWISE = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
_ROWWISE = ("o_proj", "down_proj")


def _tp_plan(layer: nn.Module):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    plan = {}
    for name, mod in layer.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if ".experts." in f".{name}." or not isinstance(mod, nn.Linear):
            continue
        if leaf in _COLWISE:
            plan[name] = ColwiseParallel()
        elif leaf in _ROWWISE:
            plan[name] = RowwiseParallel()
    return plan


def parallelize(model, scenario, mesh, param_dtype, autocast_dtype, notes):
    p = scenario.parallel
    dp, tp = p.dp or 1, p.tp
    if tp > 1:
        if getattr(model.config, "model_type", "") in _FULL_WIDTH_QK_NORM:
            from ..errors import UnsupportedError
            raise UnsupportedError(
                f"tracing '{model.config.model_type}' with tp={tp}",
                "its q/k norms normalise the whole q/k projection, so a column-split q_proj/k_proj needs the "
                "norm's statistics across ranks (an all-reduce our plain TP plan does not add).",
                "trace tp=1 (with dp/FSDP) or use `gpuplan estimate` for this layout.")
        from torch.distributed.tensor.parallel import parallelize_module
        for layer in _layers(model):
            parallelize_module(layer, mesh["tp"], _tp_plan(layer))
        notes.append(f"tensor parallel {tp}: q/k/v/gate/up column-wise, o/down row-wise (torch "
                     "parallelize_module); no sequence parallel; embeddings, norms and lm_head replicated; "
                     "routed experts (MoE) not split.")
    if dp > 1 and p.zero in (2, 3):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy()
        if autocast_dtype is not None and param_dtype == torch.float32:
            mp = MixedPrecisionPolicy(param_dtype=autocast_dtype, reduce_dtype=torch.float32)
            model._gpuplan_fsdp_mp = True
        reshard = p.zero == 3
        dp_mesh = mesh["dp_replicate", "dp_shard"] if p.replicas > 1 else mesh["dp"]
        for layer in _layers(model):
            fully_shard(layer, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=reshard)
        fully_shard(model, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=reshard)
        notes.append(f"FSDP2 fully_shard over dp={dp}"
                     + (f" as HSDP (shard {p.zero_shard_dp} x replicate {p.replicas})" if p.replicas > 1 else "")
                     + ", one unit per decoder layer plus the root "
                     f"(embeddings, final norm, lm_head); reshard_after_forward={reshard} "
                     f"({'ZeRO-3' if reshard else 'ZeRO-2'})"
                     + (f"; MixedPrecisionPolicy(param_dtype={autocast_dtype}, reduce_dtype=fp32) instead of "
                        "autocast (torchtitan style)" if getattr(model, "_gpuplan_fsdp_mp", False) else "") + ".")
    elif dp > 1:
        notes.append(f"dp={dp} with zero 0 (DDP): traced as one replica; DDP's gradient buckets (one more "
                     "gradient-sized copy unless gradient_as_bucket_view=True) are not included.")
    return model


def label_fsdp_buffers(tracker, model) -> None:
    """Label the unsharded parameter storages FSDP2 keeps (resized to 0 between uses)."""
    for mod in model.modules():
        state = getattr(mod, "_get_fsdp_state", None)
        if state is None:
            continue
        try:
            group = state()._fsdp_param_group
        except Exception:  # noqa: BLE001
            continue
        if group is None:
            continue
        for fp in group.fsdp_params:
            for t in getattr(fp, "all_gather_outputs", []) or []:
                tracker.label(t, "fsdp_unsharded")
            up = getattr(fp, "_unsharded_param", None)
            if up is not None:
                tracker.label(up, "fsdp_unsharded")
