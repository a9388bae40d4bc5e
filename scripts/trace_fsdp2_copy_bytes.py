"""HBM bytes per parameter of FSDP2's copies around its collectives, counted on torch's own fully_shard.

FSDP2 (torch.distributed.fsdp.fully_shard; torch v2.7.0, the torch of NeMo RL v0.3.0 and of torchtitan, and the same
at torch@010ae4a8) runs two copies on the compute stream around its collectives:

- after each parameter all-gather, `FSDPParamGroup.wait_for_unshard` -> `foreach_all_gather_copy_out` copies the
  all-gather buffer into every parameter's unsharded storage (`torch.ops.fsdp.split_with_sizes_copy`);
- before each gradient reduce-scatter, `foreach_reduce` copies the unsharded 16-bit gradients into the reduce-dtype
  buffer (`foreach_reduce_scatter_copy_in` -> `torch.ops.fsdp.chunk_cat`, the widening cast inside), on the current
  stream, and only then makes the reduce-scatter stream wait for it.

This script wraps two blocks with `fully_shard(mp_policy=MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=float32))` as NeMo RL's DTensor worker does (nemo_rl/models/dtensor/parallelize.py L464-488 @v0.3.0:
every decoder layer with the default reshard_after_forward=True, the root with False), runs a forward and a backward
on two CPU ranks over gloo, and counts the input and output bytes of those two ops under a TorchDispatchMode. It
prints bytes per parameter of one micro-batch (forward + backward):

    PYTHONPATH=$PWD/src python3 scripts/trace_fsdp2_copy_bytes.py      (seconds on a CPU)

torch 2.13 CPU: {"gathers": 2, "copy_out_read": 4.0, "copy_out_write": 4.0, "copy_in_read": 2.0, "copy_in_write": 4.0}
- each block gathered twice (forward, and again in the backward after resharding), 2 + 2 bytes a gather, and its
gradient copied in once, 2 + 4: 14 bytes per parameter a micro-batch (speed.FSDP2_COPY_OUT_BYTES,
FSDP2_GATHERS_PER_MICROBATCH).
"""
from __future__ import annotations

import json
import os
import sys

H = 64


def _worker(rank: int, world: int, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.utils._python_dispatch import TorchDispatchMode

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(H, 4 * H, bias=False)
            self.b = nn.Linear(4 * H, H, bias=False)

        def forward(self, x):
            return x + self.b(torch.relu(self.a(x)))

    model = nn.Sequential(Block(), Block())
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, output_dtype=torch.float32)
    for blk in model:
        fully_shard(blk, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    params = sum(p.numel() for p in model.parameters())      # global sizes of the DTensor parameters

    def nbytes(x) -> int:
        if isinstance(x, torch.Tensor):
            return x.numel() * x.element_size()
        if isinstance(x, (list, tuple)):
            return sum(nbytes(y) for y in x)
        return 0

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: dict[str, list[tuple[int, int]]] = {"split_with_sizes_copy": [], "chunk_cat": []}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            res = func(*args, **kwargs)
            for name in self.ops:
                if f"fsdp.{name}" in str(func):
                    self.ops[name].append((nbytes(args[0]), nbytes(kwargs.get("out"))))
            return res

    x = torch.randn(8, H)
    model(x).sum().backward()                 # warm-up step (lazy init)
    with Count() as c:
        model(x).sum().backward()
    if rank == 0:
        cout, cin = c.ops["split_with_sizes_copy"], c.ops["chunk_cat"]
        res = {"torch": torch.__version__, "params": params, "blocks": len(model),
               "gathers": len(cout) / len(model),
               "copy_out_read": sum(r for r, _ in cout) / params, "copy_out_write": sum(w for _, w in cout) / params,
               "copy_in_read": sum(r for r, _ in cin) / params, "copy_in_write": sum(w for _, w in cin) / params}
        with open(out, "w", encoding="utf-8") as f:
            json.dump(res, f)
    dist.destroy_process_group()


def trace(world: int = 2, port: int = 29541) -> dict:
    """Run the count on `world` CPU ranks; bytes per parameter of one micro-batch."""
    import tempfile

    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "fsdp2_copies.json")
        mp.spawn(_worker, args=(world, port, out), nprocs=world, join=True)
        with open(out, encoding="utf-8") as f:
            return json.load(f)


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 29541
    print(json.dumps(trace(port=port)))
