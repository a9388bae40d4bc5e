"""Reserved beside allocated in `gpuplan measure`'s inference runs (validation/gathered/measured.csv rows HI*),
replayed through a model of PyTorch's caching allocator.

`gpuplan measure` (src/gpuplan/local/measure.py `_build_model`, `_run_infer`) builds the model with
`AutoModelForCausalLM.from_config(config, dtype=...)` inside `torch.device("cuda")`, then runs one prefill
`model(input_ids=ids, use_cache=True, logits_to_keep=1)` (a DynamicCache) and two decode steps as a warm-up, frees
that cache, resets the peaks, and runs the prefill and up to 64 decode steps again (`_run_infer`). This script
runs the same calls on fake tensors (gpuplan.trace's AllocTracker records every storage allocation and free in
order) and replays the sequence through both pools of CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp,
pytorch v2.2.0, the version the memory model cites: constants kMinBlockSize 512, kSmallSize 1 MiB, kSmallBuffer 2 MiB, kMinLargeAlloc 10 MiB,
kLargeBuffer 20 MiB, kRoundLarge 2 MiB; `get_allocation_size`, `get_free_block` best fit, `should_split`):

* a request <= 1 MiB is served from the small pool, whose segments are 2 MiB; a larger one from the large pool,
  whose new segment is 20 MiB for a request under 10 MiB and the request rounded up to 2 MiB otherwise;
* the smallest free block of the pool that holds the request serves it, split when the remainder is > 1 MiB
  (large pool) or >= 512 B (small pool); a freed block merges with free neighbours of its own segment only.

Two things of this harness show in the reserve, not in the allocated bytes:

* **the untied output projection.** With `tie_word_embeddings`, `LlamaForCausalLM.__init__` (and Gemma2's) builds
  `lm_head = nn.Linear(hidden, vocab)` on the device, and `post_init()` ties it to the input embedding, freeing
  that weight (transformers 5.x modeling_utils.py `_tie_embedding_weights` / `tie_weights`; checked on CPU with
  transformers 5.25). A vocab x hidden block is left free in the large pool before the first input arrives;
  `from_pretrained` builds on the meta device and never allocates it.
* **the DynamicCache's growth.** Every decode step replaces each layer's keys and values by
  `torch.cat([self.keys, key_states], dim=-2)` (cache_utils.py DynamicLayer.update): a block one token longer is
  requested while the previous one is still alive.

    PYTHONPATH=src python scripts/trace_measure_reserve.py [ROW ...]   (default: every HI row; full fine-tuning rows by id)
    ... --from-pretrained    the same run without the blocks the build frees (a from_pretrained load)
    ... --growth             also the new segments per stretch of a training loop (step k loss / backward / step)
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

GiB, MiB = 2 ** 30, 2 ** 20
MARKS: list[tuple[int, str]] = []        # (event index, what the training loop finished there)
GROWTH: list[tuple[int, int, int, int]] = []   # (event index, request bytes, allocated, reserved) per new segment
K_SMALL_SIZE, K_SMALL_BUFFER, K_MIN_LARGE_ALLOC, K_LARGE_BUFFER, K_ROUND_LARGE = MiB, 2 * MiB, 10 * MiB, 20 * MiB, 2 * MiB


def _segment_size(size: int) -> int:
    """CUDACachingAllocator get_allocation_size."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE


def replay_pools(events: list[tuple[int, int]], start: int = 0) -> tuple[int, int]:
    """(allocated peak, reserved peak) of (block id, +bytes | -bytes) events through both pools, the peaks reset
    before event `start` (torch.cuda.reset_peak_memory_stats: both peaks restart from the current figures)."""
    pools: dict[bool, list[list[list]]] = {True: [], False: []}      # small? -> segments -> [size, free] blocks
    live: dict[int, tuple[list, list, int]] = {}
    reserved = peak_reserved = allocated = peak_allocated = 0
    for k_event, (ptr, n) in enumerate(events):
        if k_event == start:
            peak_allocated, peak_reserved = allocated, reserved
        if n > 0:
            size = max(512, -(-n // 512) * 512)
            small = size <= K_SMALL_SIZE
            segs = pools[small]
            fits = [(b[0], k, s, b) for k, s in enumerate(segs) for b in s if b[1] and b[0] >= size]
            if fits:
                _, _, seg, blk = min(fits, key=lambda f: (f[0], f[1]))
            else:
                seg = [[_segment_size(size), True]]
                segs.append(seg)
                reserved += seg[0][0]
                GROWTH.append((k_event, size, allocated, reserved))
                blk = seg[0]
            i = next(k for k, b in enumerate(seg) if b is blk)
            rest = blk[0] - size
            if (small and rest >= 512) or (not small and rest > K_SMALL_SIZE):
                seg.insert(i + 1, [rest, True])
                blk[0] = size
            blk[1] = False
            live[ptr] = (seg, blk, n)
            allocated += n
            peak_allocated, peak_reserved = max(peak_allocated, allocated), max(peak_reserved, reserved)
        elif ptr in live:
            seg, blk, m = live.pop(ptr)
            allocated -= m
            blk[1] = True
            i = next(k for k, b in enumerate(seg) if b is blk)
            if i + 1 < len(seg) and seg[i + 1][1]:
                blk[0] += seg.pop(i + 1)[0]
            if i > 0 and seg[i - 1][1]:
                seg[i - 1][0] += seg.pop(i)[0]
    return peak_allocated, peak_reserved


def _no_softcap(config) -> None:
    """Gemma 2's attention soft-cap has no SDPA path; the SDPA stand-in of gpuplan.trace (the flash kernel applies
    the cap inside the kernel and saves what SDPA's fused kernel saves) needs it off. Memory only: an elementwise
    cap inside the kernel allocates nothing."""
    if getattr(config, "attn_logit_softcapping", None) is not None:
        config.attn_logit_softcapping = None


def infer_events(model_name: str, batch: int, prompt: int, steps: int, dtype_name: str = "bf16"):
    """Allocation events of the measure harness's inference run on fake tensors (build, prefill, decode)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoConfig, AutoModelForCausalLM
    from gpuplan.local.measure import decode_steps
    from gpuplan.models import get_model
    from gpuplan.trace import _run as R
    from gpuplan.trace._build import _sdpa_for_flash_only_models
    from trace_step_reserve import _tracker
    spec = get_model(model_name)
    cfg = dict(spec.config)
    mt = cfg.pop("model_type", spec.model_type)
    config = AutoConfig.for_model(mt, **cfg)
    _no_softcap(config)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    tr = _tracker()
    notes: list = []
    with FakeTensorMode(allow_non_fake_inputs=True), R._unpacked_inputs(), R._cuda_kernel_semantics(notes), tr:
        with _sdpa_for_flash_only_models(config, "sdpa", notes):    # Gemma 2: SDPA stand-in (trace/_build.py)
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
        model.eval()
        ids = torch.randint(0, spec.vocab_size, (batch, prompt))
        prefill, decode, cache = decode_steps(model, ids)      # measure.py _run_infer's own two forwards

        with torch.no_grad():          # measure.py _run_infer: warm-up prefill and 2 decodes, cache freed, peaks reset
            prefill()
            for _ in range(2):
                decode()
            cache.clear()
            start = len(tr.events)
            prefill()
            for _ in range(steps):
                decode()
    tied = bool(getattr(config, "tie_word_embeddings", False))
    return tr.events, start, tied, config


def train_events(row: dict, warmup: int = 1, steps: int = 3):
    """Allocation events of the measure harness's training run (`_run_train`: full fine-tuning; fp32 parameters under
    bf16 autocast when master_weights, HF gradient checkpointing, AdamW, zero_grad(set_to_none=True)); the peaks are
    reset before the warm-up step (the first step allocates the optimizer states)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoConfig, AutoModelForCausalLM
    from gpuplan.models import get_model
    from gpuplan.trace import _run as R
    from gpuplan.trace._build import _sdpa_for_flash_only_models
    from trace_step_reserve import _tracker
    spec = get_model(row["model"])
    cfg = dict(spec.config)
    mt = cfg.pop("model_type", spec.model_type)
    config = AutoConfig.for_model(mt, **cfg)
    _no_softcap(config)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[row["precision"]]
    master = row["master_weights"] == "true"
    param_dtype = torch.float32 if master else dt
    tr = _tracker()
    notes: list = []
    with FakeTensorMode(allow_non_fake_inputs=True), R._unpacked_inputs(), R._cuda_kernel_semantics(notes), tr:
        with _sdpa_for_flash_only_models(config, "sdpa", notes):
            model = AutoModelForCausalLM.from_config(config, dtype=param_dtype, attn_implementation="sdpa")
        if row["recompute"] == "full":
            model.gradient_checkpointing_enable()
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-5, foreach=row["optimizer_impl"] == "foreach",
                                fused=row["optimizer_impl"] == "fused")
        ids = torch.randint(0, spec.vocab_size, (int(row["micro_batch"]), int(row["seq_len"])))
        start = len(tr.events)
        for k in range(warmup + steps):
            with torch.autocast("cpu", dtype=dt, enabled=master and dt != torch.float32):
                loss = model(input_ids=ids, labels=ids).loss
            MARKS.append((len(tr.events), f"step {k + 1} loss"))
            loss.backward()
            MARKS.append((len(tr.events), f"step {k + 1} backward end"))
            opt.step()
            MARKS.append((len(tr.events), f"step {k + 1} optimizer step end"))
            opt.zero_grad(set_to_none=True)
            loss = None
    return tr.events, start, bool(getattr(config, "tie_word_embeddings", False)), config


def without_build_frees(events: list[tuple[int, int]], start: int) -> tuple[list[tuple[int, int]], int]:
    """The events less every block allocated and freed while the model was built (the untied output projection
    the harness's from_config frees): what a `from_pretrained` load, built on the meta device, leaves."""
    gone = {ptr for ptr, n in events[:start] if n < 0}
    kept = [(ptr, n) for k, (ptr, n) in enumerate(events) if ptr not in gone or k >= start]
    return kept, start - 2 * len(gone)


def _print_growth(start: int, marks: list[tuple[int, str]]) -> None:
    """New segments after the peaks' reset, summed per stretch of the training loop (`--growth`)."""
    spans: dict[str, list[float]] = {}
    for k, size, _, _ in GROWTH:
        if k < start:
            continue
        where = next((f"until {name}" for m, name in marks if k < m), "after the last mark")
        d = spans.setdefault(where, [0, 0, 0])
        d[0] += _segment_size(size)
        d[1] += 1
        d[2] = max(d[2], size)
    for where, (b, n, big) in spans.items():
        print(f"      {where:32s} {n:4d} new segments {b / GiB:7.2f} GiB (largest request {big / GiB:.2f} GiB)")


def main(argv: list[str]) -> None:
    pretrained, growth = "--from-pretrained" in argv, "--growth" in argv
    argv = [a for a in argv if a not in ("--from-pretrained", "--growth")]
    rows = [r for r in csv.DictReader(open(ROOT / "validation/gathered/measured.csv"))
            if r["task"] == "infer" or (r["method"] == "full" and r.get("objective", "sft") in ("", "sft"))]
    rows = [r for r in rows if r["id"] in argv] if argv else [r for r in rows if r["task"] == "infer"]
    print("id    model                  batch x prompt  allocated / reserved GiB: measured   replayed   (reserve beyond)")
    for r in rows:
        MARKS.clear()
        if r["task"] == "infer":
            events, start, tied, _ = infer_events(r["model"], int(r["concurrency"]), int(r["prompt_len"]),
                                                  min(int(r["output_len"]), 64), r["weights"])
        else:
            events, start, tied, _ = train_events(r)
        marks = list(MARKS)
        if pretrained:
            shifted_start = start
            events, start = without_build_frees(events, start)
            marks = [(m - (shifted_start - start), name) for m, name in marks]
        GROWTH.clear()
        a, res = replay_pools(events, start)
        ma, mr = float(r["peak_allocated_gib"]), float(r["peak_reserved_gib"])
        shape = (r["concurrency"], r["prompt_len"]) if r["task"] == "infer" else (r["micro_batch"], r["seq_len"])
        print(f"{r['id']:5s} {r['model']:22s} {shape[0]:>4s} x {shape[1]:>5s}   "
              f"{ma:7.2f} / {mr:7.2f} ({mr - ma:5.2f})   {a / GiB:7.2f} / {res / GiB:7.2f} ({(res - a) / GiB:5.2f})"
              f"{'  tied' if tied else ''}", flush=True)
        if growth:
            _print_growth(start, marks)


if __name__ == "__main__":
    main(sys.argv[1:])
