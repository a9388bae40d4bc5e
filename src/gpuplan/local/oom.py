"""Explain a PyTorch out-of-memory message: real shortage (by how much) or fragmentation, what to try,
and — given a scenario — which knob frees how much, evaluated with gpuplan's own estimator.

Message forms understood (the text may be a whole log; the first OOM message in it is used):
  new (PyTorch >= 2.1): "CUDA out of memory. Tried to allocate X. GPU 0 has a total capacity of Y of which
      Z is free. [Process P has M memory in use. | Including non-PyTorch memory, this process has M memory
      in use.] [L allowed;] Of the allocated memory A is allocated by PyTorch, [with G allocated in private
      pools (e.g., CUDA Graphs),] and B is reserved by PyTorch but unallocated. ..."  (2.1 wrote "capacty")
  old (PyTorch 1.x-2.0): "Tried to allocate X (GPU 0; Y total capacity; A already allocated; Z free;
      R reserved in total by PyTorch)"  (1.0-1.3 wrote "R cached")
  HIP (ROCm builds): the same texts with "HIP out of memory".

The thresholds are module constants and are documented in docs/local.md.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Callable

from ..errors import GpuplanError, InputError, UnsupportedError
from ..units import GiB, MiB


def fmt_bytes(n: float | None) -> str:
    """GiB from 1 GiB up, MiB below (an OOM of 22 MiB should not read '0.02 GiB')."""
    if n is None:
        return "-"
    if abs(n) < GiB:
        return f"{n / MiB:,.2f} MiB"
    return f"{n / GiB:,.2f} GiB"

# fragmentation: the cached-but-unallocated bytes could hold the request, and they are a large share
# of what PyTorch reserved (allocator slack on a healthy run is a few per cent)
FRAG_SHARE = 0.10
# a contributing (not sole) fragmentation note needs at least this much reserved-but-unallocated memory
FRAG_CONTRIB_MIN_BYTES = 256 * MiB
# memory this process uses outside PyTorch's allocator (CUDA context, cuBLAS/cuDNN workspaces, NCCL) is
# normally below this; "Process N has M in use" within this of PyTorch's reserve is taken as this process
CONTEXT_ALLOWANCE_BYTES = 2 * GiB
# memory held outside this process is worth a warning above max(1 GiB, 5 % of capacity)
OTHER_MIN_BYTES = 1 * GiB
OTHER_MIN_SHARE = 0.05
# the caching allocator asks the driver for at least a 2 MiB (requests < 1 MiB) or 20 MiB segment
SMALL_SEGMENT_BYTES = 20 * MiB
# the GPU counts as full when less than this share of it was free
FULL_SHARE = 0.02

_SIZE = r"([\d.]+\s*(?:bytes|B|KiB|MiB|GiB|TiB))"
_UNIT = {"bytes": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _bytes(s: str | None) -> int | None:
    if s is None:
        return None
    m = re.match(r"([\d.]+)\s*(\w+)", s.strip())
    if not m:
        return None
    return int(round(float(m.group(1)) * _UNIT[m.group(2).lower()]))


@dataclass(frozen=True)
class OomReport:
    """The numbers of one OOM message, in bytes. None where the message form does not carry them."""
    backend: str                           # cuda | hip
    form: str                              # new | old
    device: int
    requested_bytes: int
    total_bytes: int
    free_bytes: int
    allocated_bytes: int                   # by PyTorch tensors (incl. private pools in the new form)
    reserved_unallocated_bytes: int        # cached by PyTorch's allocator but not holding tensors
    process_bytes: int | None = None       # "this process has M memory in use" (incl. non-PyTorch)
    other_processes: tuple[tuple[int, int], ...] = ()   # (pid, bytes) from "Process P has M memory in use"
    allowed_bytes: int | None = None       # per-process limit (torch.cuda.set_per_process_memory_fraction)
    private_pool_bytes: int | None = None  # allocated in private pools (CUDA/HIP graphs)
    alloc_conf_var: str = "PYTORCH_CUDA_ALLOC_CONF"
    message: str = ""

    @property
    def reserved_bytes(self) -> int:
        return self.allocated_bytes + self.reserved_unallocated_bytes

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["other_processes"] = [{"pid": p, "bytes": b} for p, b in self.other_processes]
        d["reserved_bytes"] = self.reserved_bytes
        return d


_HEAD = re.compile(r"\b(CUDA|HIP)\s+out of memory\.\s*Tried to allocate " + _SIZE, re.I)
_NEW_CAP = re.compile(r"GPU (\d+) has a total capac\w*ty of " + _SIZE + r" of which " + _SIZE + r" is free")
_THIS = re.compile(r"this process has " + _SIZE + r" memory in use")
_PROC = re.compile(r"Process (\d+) has " + _SIZE + r" memory in use")
_ALLOWED = re.compile(_SIZE + r" allowed;")
_NEW_ALLOC = re.compile(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch,\s*(?:with " + _SIZE
                        + r" allocated in private pools(?: \([^)]*\))?,\s*)?and " + _SIZE + r" is reserved by PyTorch but unallocated")
_OLD = re.compile(r"\(GPU (\d+); " + _SIZE + r" total capacity; " + _SIZE + r" already allocated; " + _SIZE
                  + r" free; " + _SIZE + r" (?:reserved in total by PyTorch|cached)")
_CONF = re.compile(r"(PYTORCH_\w*ALLOC_CONF)")


def parse_oom(text: str) -> OomReport:
    """Find and parse the first PyTorch OOM message in `text` (a message or a whole log)."""
    head = _HEAD.search(text or "")
    if not head:
        raise InputError("OOM message", "no PyTorch 'CUDA out of memory' or 'HIP out of memory' message found in the text.",
                         "paste the full line that starts with 'torch.OutOfMemoryError:' (or "
                         "'RuntimeError: CUDA out of memory'); other frameworks' OOM texts are not understood.")
    backend = head.group(1).lower()
    requested = _bytes(head.group(2))
    # the message ends at the documentation hint or the end of its line
    tail = text[head.end():]
    end = tail.find("\n")
    body = tail if end < 0 else tail[:end]
    message = (text[head.start():head.end()] + body).strip()
    conf = _CONF.search(body)
    conf_var = conf.group(1) if conf else ("PYTORCH_HIP_ALLOC_CONF" if backend == "hip" else "PYTORCH_CUDA_ALLOC_CONF")
    if conf_var == "PYTORCH_CUDA_ALLOC_CONF" and backend == "hip" and not conf:
        conf_var = "PYTORCH_HIP_ALLOC_CONF"
    cap = _NEW_CAP.search(body)
    if cap:
        alloc = _NEW_ALLOC.search(body)
        if not alloc:
            raise InputError("OOM message", "it names the GPU capacity but not PyTorch's allocated/reserved memory "
                             "(the message looks cut off).", "paste the whole message, up to 'reserved by PyTorch but unallocated'.")
        this = _THIS.search(body)
        allowed = _ALLOWED.search(body)
        return OomReport(backend=backend, form="new", device=int(cap.group(1)), requested_bytes=requested,
                         total_bytes=_bytes(cap.group(2)), free_bytes=_bytes(cap.group(3)),
                         allocated_bytes=_bytes(alloc.group(1)),
                         reserved_unallocated_bytes=_bytes(alloc.group(3)),
                         private_pool_bytes=_bytes(alloc.group(2)),
                         process_bytes=_bytes(this.group(1)) if this else None,
                         other_processes=tuple((int(p), _bytes(s)) for p, s in _PROC.findall(body)),
                         allowed_bytes=_bytes(allowed.group(1)) if allowed else None,
                         alloc_conf_var=conf_var, message=message)
    old = _OLD.search(body)
    if old:
        allocated, reserved = _bytes(old.group(3)), _bytes(old.group(5))
        return OomReport(backend=backend, form="old", device=int(old.group(1)), requested_bytes=requested,
                         total_bytes=_bytes(old.group(2)), free_bytes=_bytes(old.group(4)),
                         allocated_bytes=allocated, reserved_unallocated_bytes=max(0, reserved - allocated),
                         alloc_conf_var=conf_var, message=message)
    raise InputError("OOM message", "the 'Tried to allocate' line was found but neither the new "
                     "('GPU N has a total capacity of ...') nor the old ('(GPU N; ... total capacity; ...)') details follow it.",
                     "paste the complete message; if it is complete, please report it so the parser can learn its form.")


# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Knob:
    name: str
    changes: dict[str, Any]                # Scenario.replace(**changes)
    tradeoff: str
    peak_bytes: int | None = None
    bytes_freed: int | None = None
    fits: bool | None = None
    error: str | None = None               # why it could not be evaluated

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class OomExplanation:
    report: OomReport
    kind: str              # fragmentation | shortage | exceeds-capacity | process-limit | unexplained
    headline: str
    deficit_bytes: int | None            # what this allocation lacked (None when memory was not short)
    deficit_if_defragmented_bytes: int | None
    other_bytes: int | None              # in use on the GPU outside this process's PyTorch reserve
    reasons: tuple[str, ...]
    advice: tuple[str, ...]
    inspect: tuple[str, ...]
    scenario_peak_bytes: int | None = None
    scenario_capacity_bytes: int | None = None
    knobs: tuple[Knob, ...] = ()
    notes: tuple[str, ...] = ()
    # in use on the GPU but not in this process's PyTorch reserve: its CUDA context and library workspaces
    # (cuBLAS, NCCL) plus other processes; other_bytes is the other processes' part when the message names this one
    not_pytorch_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "headline": self.headline, "deficit_bytes": self.deficit_bytes,
                "deficit_if_defragmented_bytes": self.deficit_if_defragmented_bytes,
                "other_bytes": self.other_bytes, "not_pytorch_bytes": self.not_pytorch_bytes, "reasons": list(self.reasons), "advice": list(self.advice),
                "inspect": list(self.inspect), "report": self.report.to_json(),
                "scenario": None if self.scenario_peak_bytes is None else {
                    "peak_bytes_per_gpu": self.scenario_peak_bytes,
                    "capacity_bytes_per_gpu": self.scenario_capacity_bytes,
                    "knobs": [k.to_json() for k in self.knobs]},
                "notes": list(self.notes)}

    def render(self) -> str:
        r = self.report
        out = [f"{self.headline}", ""]
        out.append(f"  GPU {r.device} ({r.backend.upper()}): capacity {fmt_bytes(r.total_bytes)}, free {fmt_bytes(r.free_bytes)}, "
                   f"requested {fmt_bytes(r.requested_bytes)}")
        out.append(f"  PyTorch: allocated {fmt_bytes(r.allocated_bytes)}, reserved but unallocated "
                   f"{fmt_bytes(r.reserved_unallocated_bytes)} (reserved in total {fmt_bytes(r.reserved_bytes)})")
        if self.not_pytorch_bytes:
            out.append(f"  In use but not PyTorch's (CUDA context, cuBLAS/NCCL workspaces, other processes): "
                       f"{fmt_bytes(self.not_pytorch_bytes)}")
        if self.other_bytes and self.other_bytes != self.not_pytorch_bytes:
            out.append(f"  Of that, held by other processes: {fmt_bytes(self.other_bytes)}")
        out.append("")
        out += [f"- {x}" for x in self.reasons]
        if self.scenario_peak_bytes is not None:
            out += ["", f"Scenario: gpuplan predicts a peak of {fmt_bytes(self.scenario_peak_bytes)} per GPU against "
                        f"{fmt_bytes(self.scenario_capacity_bytes)}"
                        + (f" (short by {fmt_bytes(self.scenario_peak_bytes - self.scenario_capacity_bytes)})."
                           if self.scenario_peak_bytes > (self.scenario_capacity_bytes or 0) else " (fits on paper).")]
            if self.knobs:
                out.append("Knobs, most memory freed first:")
                for k in self.knobs:
                    if k.error:
                        out.append(f"  {k.name:<34} not evaluated: {k.error}")
                        continue
                    verdict = "fits" if k.fits else "still short"
                    out.append(f"  {k.name:<34} frees {fmt_bytes(k.bytes_freed):>11} -> peak {fmt_bytes(k.peak_bytes):>11}  "
                               f"{verdict:<11} ({k.tradeoff})")
        out += ["", "What to do:"] + [f"- {a}" for a in self.advice]
        out += ["", "Look closer:"] + [f"- {a}" for a in self.inspect]
        if self.notes:
            out += [""] + [f"Note: {n}" for n in self.notes]
        return "\n".join(out)


def _inspect(r: OomReport) -> tuple[str, ...]:
    smi = "rocm-smi --showmeminfo vram --showpids" if r.backend == "hip" else "nvidia-smi -q -d MEMORY"
    return (
        "print(torch.cuda.memory_summary()) just before the failing step: allocated vs reserved, and how many "
        "segments and inactive split blocks the allocator holds (many inactive splits = fragmentation).",
        "Record a memory snapshot: torch.cuda.memory._record_memory_history(max_entries=100000), run until the "
        "OOM, then torch.cuda.memory._dump_snapshot('oom_snapshot.pickle') and drop the file on "
        "https://pytorch.org/memory_viz to see which tensors were alive and where the gaps are.",
        f"`{smi}` while the job runs: total, reserved and used memory per GPU and which processes hold it.",
    )


def explain_oom(text_or_report: str | OomReport, scenario=None, *,
                estimate_fn: Callable[[Any], Any] | None = None) -> OomExplanation:
    """Classify an OOM message and say what to do. With a scenario, also evaluate memory knobs."""
    r = text_or_report if isinstance(text_or_report, OomReport) else parse_oom(text_or_report)
    req, free, total = r.requested_bytes, r.free_bytes, r.total_bytes
    unalloc, reserved = r.reserved_unallocated_bytes, r.reserved_bytes
    conf = r.alloc_conf_var
    reasons: list[str] = []
    advice: list[str] = []
    notes: list[str] = []

    # memory on the device that this process's PyTorch allocator does not hold
    if r.process_bytes is not None:
        this_proc = r.process_bytes
    else:
        own = [b for _, b in r.other_processes if reserved <= b <= reserved + CONTEXT_ALLOWANCE_BYTES]
        this_proc = own[0] if len(own) == 1 else None
    in_use = max(0, total - free)
    other = max(0, in_use - (this_proc if this_proc is not None else reserved))
    other_big = other >= max(OTHER_MIN_BYTES, OTHER_MIN_SHARE * total)
    if r.form == "new" and r.other_processes and this_proc is not None and len(r.other_processes) == 1:
        notes.append(f"'Process {r.other_processes[0][0]}' holds about what this PyTorch process reserved plus its CUDA "
                     "context, so it is most likely this process seen from outside its container's PID namespace.")

    limit = r.allowed_bytes
    deficit = max(0, req - free)
    defrag_deficit = max(0, req - free - unalloc)
    frag_large = unalloc >= req and unalloc >= FRAG_SHARE * max(reserved, 1)

    if req > (limit if limit is not None else total):
        kind = "exceeds-capacity"
        cap = limit if limit is not None else total
        headline = (f"A single allocation of {fmt_bytes(req)} is larger than the whole "
                    f"{'per-process limit' if limit is not None else 'GPU'} ({fmt_bytes(cap)}): no allocator setting can help.")
        reasons.append("One tensor is bigger than the device. Typical causes: attention scores or logits for a long "
                       "sequence or large batch in one piece (eager attention materialises batch x heads x seq^2), "
                       "a model loaded on one GPU instead of sharded, or a whole dataset moved to the GPU at once.")
        advice += ["Shrink that one tensor: smaller batch or sequence, chunk the work (e.g. compute the loss over "
                   "sequence chunks, use flash/SDPA attention instead of eager).",
                   "If it is the model weights: shard them (tensor parallel, FSDP/ZeRO-3, device_map='auto') or load "
                   "them quantized (8/4-bit)."]
        deficit = req - (limit if limit is not None else total)
    elif limit is not None and (reserved + max(req, SMALL_SEGMENT_BYTES) > limit or free >= req):
        kind = "process-limit"
        headline = (f"The per-process limit ({fmt_bytes(limit)} allowed) was reached, not the GPU: "
                    f"{fmt_bytes(free)} of {fmt_bytes(total)} were still free on the device.")
        reasons.append("Something set torch.cuda.set_per_process_memory_fraction (or a test harness / framework did), "
                       "so the allocator refuses to grow past that share of the GPU.")
        advice.append("Raise or remove the memory fraction limit, or run fewer processes per GPU.")
        deficit = max(0, reserved + req - limit)
    elif free >= req:
        kind = "unexplained"
        headline = (f"The driver reported {fmt_bytes(free)} free, more than the {fmt_bytes(req)} requested, yet the "
                    "allocation failed: the shortage is not visible in these numbers.")
        reasons.append("Usual causes: another process grabbed the memory between the failure and the report; a MIG "
                       "slice or container limit smaller than the card; Windows/WSL's driver reserving or paging device "
                       "memory; a per-process limit; or a caching-allocator/driver problem with many small segments.")
        if unalloc >= FRAG_CONTRIB_MIN_BYTES:
            reasons.append(f"PyTorch also holds {fmt_bytes(unalloc)} reserved but unallocated "
                           f"({unalloc / max(reserved, 1):.0%} of its reserve).")
            advice.append(f"Try {conf}=expandable_segments:True, which maps memory in place of many separate segments.")
        advice += ["Check what else runs on the GPU and whether it is a MIG slice (`nvidia-smi -q -d MEMORY`).",
                   "Reproduce with a memory snapshot (below) to see the allocator's state at the failure."]
        deficit = None
        defrag_deficit = None
    elif frag_large:
        kind = "fragmentation"
        headline = (f"Fragmentation: PyTorch held {fmt_bytes(unalloc)} reserved but unallocated — more than the "
                    f"{fmt_bytes(req)} requested — but in pieces too small for it.")
        reasons.append(f"{unalloc / max(reserved, 1):.0%} of PyTorch's {fmt_bytes(reserved)} reserve was free-but-cached "
                       f"(threshold: at least the request and at least {FRAG_SHARE:.0%} of the reserve). Before raising, "
                       "the allocator already released every cached segment it could, so what remains is split blocks "
                       "inside segments that still hold live tensors.")
        advice += [f"Set {conf}=expandable_segments:True (PyTorch >= 2.1) before the first CUDA call: segments grow in "
                   "place instead of splitting into gaps. This is the fix in most cases.",
                   f"On older PyTorch, or if that is not enough: {conf}=max_split_size_mb:256 (blocks larger than this are "
                   "never split, so big free blocks stay whole; try 128-512).",
                   "Reduce variation in tensor shapes: pad sequences to a few fixed lengths (bucketing) so freed blocks "
                   "fit the next step's tensors.",
                   "torch.cuda.empty_cache() does not help here: the allocator already did that before failing."]
    else:
        kind = "shortage"
        headline = f"Real shortage: this allocation needed {fmt_bytes(req)} with only {fmt_bytes(free)} free — {fmt_bytes(deficit)} short."
        if free < FULL_SHARE * total:
            reasons.append(f"The GPU was full ({fmt_bytes(in_use)} of {fmt_bytes(total)} in use). The allocation that "
                           "failed is only the one that crossed the line: the step's later allocations need more, so "
                           "treat the shortfall as at least this much, and size the fix with an estimate.")
        if unalloc >= max(FRAG_CONTRIB_MIN_BYTES, FRAG_SHARE * max(reserved, 1)) or (defrag_deficit == 0 and unalloc > 0):
            reasons.append(f"Fragmentation contributes: {fmt_bytes(unalloc)} was reserved but unallocated"
                           + (" — with perfect packing this allocation would have fit"
                              if defrag_deficit == 0 else f"; even packed perfectly {fmt_bytes(defrag_deficit)} would be missing")
                           + f". {conf}=expandable_segments:True recovers part of it.")
        advice += ["Lower memory per GPU: smaller micro-batch (keep the global batch with gradient accumulation), "
                   "activation checkpointing (recompute), a shorter sequence, an 8-bit optimizer, LoRA/QLoRA instead of "
                   "full fine-tuning, or ZeRO-3/FSDP sharding across more GPUs — `gpuplan doctor --oom FILE --scenario "
                   "S.yaml` says which frees how much.",
                   "For inference: fewer concurrent sequences or a shorter max context (KV cache), an FP8 KV cache, or "
                   "quantized weights."]
    if other_big:
        reasons.append(f"{fmt_bytes(other)} on this GPU is held outside this process's PyTorch allocator "
                       "(other processes, or this process's CUDA context, cuBLAS/NCCL buffers and non-PyTorch libraries).")
        if kind == "shortage" and deficit and other >= deficit:
            advice.insert(0, f"Free the GPU first: memory held elsewhere ({fmt_bytes(other)}) exceeds the shortfall. "
                             "Stop stale processes (a crashed run, a notebook kernel, a second job on the same GPU).")
    if r.form == "old":
        notes.append("Old-format message (PyTorch <= 2.0): it reports reserved memory in total; reserved-but-unallocated "
                     "is reserved minus allocated. expandable_segments needs PyTorch >= 2.1; use max_split_size_mb there.")

    knobs: tuple[Knob, ...] = ()
    peak = cap_bytes = None
    if scenario is not None:
        peak, cap_bytes, knobs = evaluate_knobs(scenario, estimate_fn=estimate_fn, capacity_bytes=total)
        if kind in ("shortage", "exceeds-capacity") and peak is not None and peak <= (cap_bytes or 0):
            notes.append("gpuplan predicts the scenario fits, but it failed: compare the scenario with what ran (batch, "
                         "sequence length, parallel layout) and look for memory outside the model (data on GPU, "
                         "evaluation copies, other processes).")

    return OomExplanation(report=r, kind=kind, headline=headline,
                          deficit_bytes=deficit if kind != "unexplained" else None,
                          deficit_if_defragmented_bytes=defrag_deficit if kind in ("shortage", "fragmentation") else None,
                          other_bytes=other, reasons=tuple(reasons), advice=tuple(advice), inspect=_inspect(r),
                          scenario_peak_bytes=peak, scenario_capacity_bytes=cap_bytes, knobs=knobs, notes=tuple(notes),
                          not_pytorch_bytes=max(0, in_use - reserved))


# ---------------------------------------------------------------------------------------------
# scenario knobs

def _default_estimate():
    from ..pipeline import evaluate
    return evaluate


def candidate_knobs(scn) -> list[Knob]:
    """The memory knobs that apply to a scenario, as Scenario.replace() changes (not yet evaluated):
    the memory-saving entries of the one techniques catalog (gpuplan.techniques)."""
    from ..techniques import techniques_for
    return [Knob(t.name, t.changes, t.tradeoff) for t in techniques_for(scn) if t.saves_memory]


def evaluate_knobs(scn, *, estimate_fn: Callable[[Any], Any] | None = None,
                   capacity_bytes: int | None = None) -> tuple[int, int, tuple[Knob, ...]]:
    """Peak of the scenario, the capacity compared against, and each knob's effect, most bytes freed first.

    Capacity is the device's real capacity from the OOM message when given (it is what failed), else the
    estimator's capacity for the scenario's GPU."""
    est = estimate_fn or _default_estimate()
    base = est(scn).memory
    cap = int(capacity_bytes) if capacity_bytes else int(base.capacity_bytes_per_gpu)
    base_peak = int(base.peak_bytes_per_gpu)
    out: list[Knob] = []
    for k in candidate_knobs(scn):
        try:
            m = est(scn.replace(**k.changes)).memory
        except GpuplanError as err:
            out.append(Knob(k.name, k.changes, k.tradeoff, error=err.why or str(err)))
            continue
        peak = int(m.peak_bytes_per_gpu)
        out.append(Knob(k.name, k.changes, k.tradeoff, peak_bytes=peak, bytes_freed=base_peak - peak, fits=peak <= cap))
    out.sort(key=lambda k: (k.bytes_freed is None, -(k.bytes_freed or 0)))
    return base_peak, cap, tuple(out)
