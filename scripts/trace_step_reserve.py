"""Reserved beside allocated over whole training steps: the stranded segments of `estimate/memory.py`
(stranded_layer_segments, stranded_logits_bytes) checked against the allocator model.

Runs a Llama-2-7B LoRA or QLoRA step on fake tensors the way Answer.AI's fsdp_qlora loop does it on one rank
(train.py @049515f: reentrant gradient checkpointing of every decoder layer, `output = model(...)` held through
`loss.backward()` and the step; transformers before 4.46: fp32 logits shifted with a contiguous copy), records every
storage allocation and free in order (gpuplan.trace's AllocTracker), and replays the sequence from the first step
through the large-pool model of CUDACachingAllocator in scripts/trace_loss_block.py (best fit, split, merge within
a segment, never across segments). The weights and buffers alive before the first step enter as their own blocks.
Prints the allocated and reserved peaks and what is reserved beyond the 16-bit logits block, next to
gpuplan's lower bound for the layer segments.

    PYTHONPATH=src python scripts/trace_step_reserve.py lora 4 2048 [layers]

torch 2.13 CPU, transformers 5.25, peft: full 32 layers take 0.5-2 minutes. FSDP is not replayed (one rank; its
all-gather buffers live on another stream, estimate/memory.py fsdp1_gather_segments).
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

GiB = 2 ** 30
TARGETS = ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "down_proj"]   # fsdp_qlora's "all"


def _tracker():
    from gpuplan.trace._tracker import AllocTracker

    class EventTracker(AllocTracker):
        """AllocTracker that also keeps (block, +bytes) / (block, -bytes) in order."""

        def __init__(self):
            super().__init__(round_to=512)
            self.events: list[tuple[int, int]] = []

        def register(self, t, tag=""):
            before = self._serial
            super().register(t, tag)
            if self._serial != before:
                self.events.append((self._serial, self._blocks[self._serial].nbytes))

        def _free(self, serial):
            blk = self._blocks.get(serial)
            if blk is not None:
                self.events.append((serial, -blk.nbytes))
            super()._free(serial)
    return EventTracker()


def step_events(method: str, batch: int, seq: int, layers: int | None = None, steps: int = 3):
    """(events from the first step on, logits per step, scenario) of `steps` fsdp_qlora-style steps."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from gpuplan.models import get_model
    from gpuplan.scenario import scenario_from_dict
    from gpuplan.trace import _run as R
    from gpuplan.trace._build import build_causal_lm, hf_config
    scn = scenario_from_dict({"model": "llama-2-7b-hf", "task": "finetune", "hardware": {"gpu": "rtx-3090", "count": 1},
                              "train": {"method": method, "precision": "bf16", "master_weights": False, "seq_len": seq,
                                        "micro_batch": batch, "global_batch": batch, "recompute": "full",
                                        "attention": "sdpa", "lora_rank": 64, "lora_targets": TARGETS,
                                        "lora_dropout": 0.1, "held_logits": "fp32"}})
    spec, notes = get_model(scn.model), []
    cfg = hf_config(spec, "sdpa")
    if layers:
        cfg.num_hidden_layers = layers
    vocab = cfg.vocab_size
    tr = _tracker()
    with FakeTensorMode(allow_non_fake_inputs=True), R._unpacked_inputs(), R._cuda_kernel_semantics(notes), tr:
        model = R._apply_lora(build_causal_lm(spec, cfg, torch.bfloat16, "sdpa", notes=notes), scn.train,
                              torch.bfloat16, notes)
        if method == "qlora":
            R._apply_qlora(model, scn.train, torch.bfloat16, notes)
        model.train()
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        model.enable_input_require_grads()
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        base = model.get_base_model()
        live = [(serial, blk.nbytes) for serial, blk in tr._blocks.items()]
        start = len(tr.events)
        for _ in range(steps):
            ids = torch.randint(0, vocab, (batch, seq))
            logits = base.lm_head(base.model(input_ids=ids, use_cache=False).last_hidden_state).float()
            shifted = logits[..., :-1, :].contiguous()
            loss = torch.nn.functional.cross_entropy(shifted.view(-1, vocab), ids[..., 1:].contiguous().view(-1))
            del shifted
            output = (loss, logits)          # the loop's reference to the model output
            del logits
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            output = loss = None             # noqa: F841 - "Delete the output so more memory frees up"
    return live + tr.events[start:], vocab * batch * seq, scn


def main(argv: list[str]) -> None:
    from trace_loss_block import replay
    from gpuplan.estimate import memory as M
    from gpuplan.models import get_model
    method, batch, seq = argv[0], int(argv[1]), int(argv[2])
    layers = int(argv[3]) if len(argv) > 3 else None
    events, logits, scn = step_events(method, batch, seq, layers)
    allocated, reserved = replay(events, expandable=False)
    beyond = (reserved - allocated) / GiB
    model = get_model(scn.model)
    ts = M._train_setup(scn, model, "only")
    setup = M._activation_setup(ts, False)
    sv = M._saved_activations(ts, setup, 1.0, [])
    head, _ = M._head_and_loss(ts, setup, sv)
    bound = M.stranded_layer_segments(ts, sv, head) / GiB
    print(f"llama-2-7b {method} batch {batch} x {seq}, {layers or 32} layers: allocated {allocated / GiB:.2f} GiB, "
          f"reserved {reserved / GiB:.2f} GiB: {beyond:.2f} beyond, {beyond - 2 * logits / GiB:.2f} beside the "
          f"16-bit logits block; gpuplan's lower bound for the layer segments {bound:.2f} GiB")


if __name__ == "__main__":
    main(sys.argv[1:])
