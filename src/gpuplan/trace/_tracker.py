"""An allocation tracker that counts every tensor storage a run creates, byte for byte.

A `TorchDispatchMode` sees the outputs of every aten op; each new storage is registered once
(views share their base's storage) and a weakref finalizer subtracts it when Python frees it. This
works the same on fake and on real tensors, which is what lets a test prove that a fake trace
equals a real run. `UntypedStorage.resize_` (FSDP2 frees and re-allocates its all-gather buffers
that way) does not go through dispatch, so it is patched while tracking.

Live bytes follow the CUDA caching allocator's accounting when `round_to` is 512: every block is
rounded up to a multiple of 512 bytes, which is what `torch.cuda.max_memory_allocated` counts.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class _Block:
    __slots__ = ("serial", "nbytes", "tag", "phase", "__weakref__")

    def __init__(self, serial: int, nbytes: int, tag: str, phase: str):
        self.serial, self.nbytes, self.tag, self.phase = serial, nbytes, tag, phase


class AllocTracker(TorchDispatchMode):
    """Counts live storage bytes; remembers which blocks were alive at the peak.

    `tagger(func, args, out_tensor) -> str | None` may label a new block at allocation time
    (e.g. 'logits', 'weight_copy'); blocks can also be labelled later with `label()` once their
    role is known (gradients after backward, optimizer states after the step, KV after prefill).
    """

    def __init__(self, round_to: int = 1, tagger: Callable[..., str | None] | None = None):
        super().__init__()
        self.round_to = max(1, int(round_to))
        self.tagger = tagger
        self.current = 0
        self.peak = 0
        self.peak_phase = ""
        self.phase = "setup"
        self.phase_peaks: dict[str, int] = {}
        self._blocks: dict[int, _Block] = {}          # live blocks by serial
        self._all: dict[int, _Block] = {}             # every block ever seen (peak snapshots refer to them)
        self._by_storage: "weakref.WeakKeyDictionary[Any, _Block]" = weakref.WeakKeyDictionary()
        self._serial = 0
        self._peak_serials: tuple[int, ...] = ()
        self._labels: dict[int, str] = {}
        self._orig_resize = None

    # ---- bookkeeping ------------------------------------------------------------------------
    def _rounded(self, n: int) -> int:
        r = self.round_to
        return ((n + r - 1) // r) * r if n > 0 else 0

    def _key(self, t: torch.Tensor):
        return t.untyped_storage()

    def register(self, t: torch.Tensor, tag: str = "") -> None:
        """Count a tensor's storage if it is not counted yet (idempotent)."""
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return
        local = getattr(t, "_local_tensor", None)
        if local is not None:        # DTensor: a wrapper whose own "storage" has the global size
            self.register(local, tag)
            return
        try:
            st = self._key(t)
        except (RuntimeError, NotImplementedError):   # other storage-less tensor subclasses
            return
        blk = self._by_storage.get(st)
        if blk is not None:
            if tag and not blk.tag:
                blk.tag = tag
            return
        self._serial += 1
        blk = _Block(self._serial, self._rounded(st.nbytes()), tag, self.phase)
        self._by_storage[st] = blk
        self._blocks[blk.serial] = blk
        self._all[blk.serial] = blk
        weakref.finalize(st, self._free, blk.serial)
        self._add(blk.nbytes)

    def _free(self, serial: int) -> None:
        blk = self._blocks.pop(serial, None)
        if blk is not None:
            self.current -= blk.nbytes

    def _add(self, n: int) -> None:
        self.current += n
        if self.current > self.phase_peaks.get(self.phase, -1):
            self.phase_peaks[self.phase] = self.current
        if self.current > self.peak:
            self.peak = self.current
            self.peak_phase = self.phase
            self._peak_serials = tuple((s, b.nbytes) for s, b in self._blocks.items())

    def reset_peak(self) -> None:
        self.peak = self.current
        self.peak_phase = self.phase
        self._peak_serials = tuple((s, b.nbytes) for s, b in self._blocks.items())
        self.phase_peaks = {}

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.phase_peaks.setdefault(phase, self.current)

    def label(self, t: torch.Tensor, tag: str) -> None:
        """Give the block holding `t` the role `tag` (overrides the allocation-time tag)."""
        if not isinstance(t, torch.Tensor):
            return
        local = getattr(t, "_local_tensor", None)
        if local is not None:
            t = local
        try:
            blk = self._by_storage.get(self._key(t))
        except (RuntimeError, NotImplementedError):
            return
        if blk is not None:
            self._labels[blk.serial] = tag

    def peak_blocks(self) -> list[tuple[int, str, str]]:
        """(bytes, tag, phase allocated) for each block alive at the peak."""
        out = []
        for s, nbytes in self._peak_serials:
            blk = self._all[s]
            out.append((nbytes, self._labels.get(s, blk.tag), blk.phase))
        return out

    # ---- dispatch ---------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                st_known = False
                t = getattr(t, "_local_tensor", t)
                try:
                    st_known = self._key(t) in self._by_storage
                except (RuntimeError, NotImplementedError):
                    pass
                if not st_known:
                    tag = self.tagger(func, args, t) if self.tagger else None
                    self.register(t, tag or "")
        return out

    def __enter__(self):
        tracker = self
        self._orig_resize = torch.UntypedStorage.resize_

        def resize_(st, size):
            blk = tracker._by_storage.get(st)
            before = st.nbytes()
            tracker._orig_resize(st, size)
            if blk is not None and blk.serial in tracker._blocks:
                new = tracker._rounded(st.nbytes())
                delta, blk.nbytes = new - blk.nbytes, new
                if delta > 0:
                    tracker._add(delta)
                else:
                    tracker.current += delta
            elif blk is None and before == 0:
                pass

        torch.UntypedStorage.resize_ = resize_
        return super().__enter__()

    def __exit__(self, *exc):
        torch.UntypedStorage.resize_ = self._orig_resize
        return super().__exit__(*exc)
