"""Bytes per logit of torchtitan's loss block, allocated and as the CUDA caching allocator reserves them.

Runs torchtitan's loss (train.py @9dec370: `cross_entropy(pred.flatten(0, 1).float(), labels)`, `del pred`,
`loss.backward()`) on real CPU tensors, once plainly and once under torch's `loss_parallel()` with the logits as a
vocabulary-sharded DTensor on a one-rank gloo group (the handlers run the same local code at any TP degree), and
records every allocation and free with the profiler. It prints

* the allocated peak per logit (the sum of live bytes), and
* the reserved peak from replaying the same sequence through a model of CUDACachingAllocator's large pool:
  a request is served from the smallest free block that holds it (split when the rest exceeds 1 MiB), a freed
  block merges with free neighbours in its segment, and otherwise new memory is taken: a new segment rounded to
  2 MiB, or with expandable segments pages mapped at the end of the one segment (merging with a free tail).

    python scripts/trace_loss_block.py        (torch CPU; about a minute on two cores)

Measured with torch 2.13 CPU: plain 12.00 allocated / 14.00 reserved bytes per logit, loss parallel 16.00 / 18.00,
with and without expandable segments (estimate/memory.py loss_block_bytes, stranded_logits_bytes). The last line
replays an HF model of transformers before 4.46 (fp32 logits in the output) whose output the loop holds through
backward: 15.99 / 18.00 (estimate/memory.py held_logits_bytes: 12 + 4 allocated, 2 stranded).
"""
from __future__ import annotations

import os

MiB = 2 ** 20
B, S, V, H = 2, 1024, 8192, 64          # logits: B*S*V elements, large next to everything else


def allocation_events(parallel: bool) -> list[tuple[int, int]]:
    """(pointer, +bytes allocated / -bytes freed) in time order for forward + backward of the loss block."""
    import torch
    import torch.nn.functional as F
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile
    w = torch.randn(V, H, dtype=torch.bfloat16)
    h = torch.randn(B, S, H, dtype=torch.bfloat16)
    labels = torch.randint(0, V, (B, S))
    if parallel:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
        mesh = init_device_mesh("cpu", (1,))
        w, h = distribute_tensor(w, mesh, [Shard(0)]), distribute_tensor(h, mesh, [Replicate()])
        labels = distribute_tensor(labels, mesh, [Replicate()])
    w.requires_grad_()
    h.requires_grad_()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        if parallel:
            from torch.distributed.tensor.parallel import loss_parallel
            with loss_parallel():
                _loss_step(F, h, w, labels)
        else:
            _loss_step(F, h, w, labels)
    events = []

    def walk(ev):
        yield ev
        for c in ev.children:
            yield from walk(c)
    for root in prof.profiler.kineto_results.experimental_event_tree():
        for ev in walk(root):
            if ev.tag == _EventType.Allocation:
                events.append((ev.start_time_ns, ev.typed[1].ptr, ev.typed[1].alloc_size))
    return [(ptr, n) for _, ptr, n in sorted(events)]


def _loss_step(F, h, w, labels) -> None:
    pred = h @ w.t()
    loss = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
    del pred
    loss.backward()


def _loss_step_hf_held_fp32(F, h, w, labels) -> None:
    """transformers before 4.46 (LlamaForCausalLM.forward upcasts the logits with `.float()`, shifts them with a
    contiguous copy and returns the fp32 logits in its output) under a loop that keeps that output through
    backward (Answer.AI fsdp_qlora train.py @049515f: `output = model(...)`, `loss = output.loss`,
    `loss.backward()`, `output = None` after the step)."""
    logits = (h @ w.t()).float()
    shifted = logits[..., :-1, :].contiguous()
    loss = F.cross_entropy(shifted.view(-1, V), labels[..., 1:].contiguous().view(-1))
    del shifted
    output = (loss, logits)
    output[0].backward()


def replay(events: list[tuple[int, int]], expandable: bool) -> tuple[int, int]:
    """(allocated peak, reserved peak) of the large-pool model described in the module docstring."""
    segments: list[list[list]] = []          # segment -> blocks [size, free] in address order
    live: dict[int, tuple[list, list]] = {}
    reserved = peak_reserved = allocated = peak_allocated = 0
    for ptr, n in events:
        if n > 0:
            if n < MiB:
                continue                     # small pool: not modelled
            size = -(-n // 512) * 512
            fits = [(b[0], id(b), s, b) for s in segments for b in s if b[1] and b[0] >= size]
            if fits:
                _, _, seg, blk = min(fits, key=lambda f: f[0])
            elif expandable and segments:
                seg = segments[0]
                tail_free = seg[-1][0] if seg[-1][1] else 0
                grow = -(-(size - tail_free) // (2 * MiB)) * 2 * MiB
                if tail_free:
                    seg[-1][0] += grow
                else:
                    seg.append([grow, True])
                reserved += grow
                blk = seg[-1]
            else:
                seg = [[-(-size // (2 * MiB)) * 2 * MiB, True]]
                segments.append(seg)
                reserved += seg[0][0]
                blk = seg[0]
            i = _position(seg, blk)
            if blk[0] - size > MiB:
                seg.insert(i + 1, [blk[0] - size, True])
                blk[0] = size
            blk[1] = False
            live[ptr] = (seg, blk)
            allocated += n
            peak_allocated, peak_reserved = max(peak_allocated, allocated), max(peak_reserved, reserved)
        elif ptr in live:
            seg, blk = live.pop(ptr)
            allocated += n
            blk[1] = True
            i = _position(seg, blk)
            if i + 1 < len(seg) and seg[i + 1][1]:
                blk[0] += seg.pop(i + 1)[0]
            if i > 0 and seg[i - 1][1]:
                seg[i - 1][0] += seg.pop(i)[0]
    return peak_allocated, peak_reserved


def _position(seg: list[list], blk: list) -> int:
    """The block's own index: blocks are [size, free] lists, and two free blocks of one size compare equal, so
    `seg.index` could merge the neighbours of another block."""
    return next(k for k, b in enumerate(seg) if b is blk)


def main() -> None:
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29541")
    dist.init_process_group("gloo", rank=0, world_size=1)
    logits = B * S * V
    try:
        for parallel in (False, True):
            events = allocation_events(parallel)
            for expandable in (False, True):
                a, r = replay(events, expandable)
                kind = f"{'loss_parallel' if parallel else 'plain':13s} {'expandable' if expandable else 'segments':10s}"
                print(f"{kind} allocated {a / logits:5.2f}  reserved {r / logits:5.2f} bytes per logit")
        global _loss_step
        plain, _loss_step = _loss_step, _loss_step_hf_held_fp32
        try:
            events = allocation_events(False)
        finally:
            _loss_step = plain
        a, r = replay(events, False)
        print(f"{'hf <4.46 held':13s} {'segments':10s} allocated {a / logits:5.2f}  reserved {r / logits:5.2f} bytes per logit")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
