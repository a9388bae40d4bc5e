"""Collective communication times with an α–β model (docs/speed.md §3).

Per-GPU wire volume of an n-rank collective on a payload of S bytes (NCCL "bus bandwidth"
factors, NVIDIA/nccl-tests doc/PERFORMANCE.md; ZeRO paper §7):
    all-reduce (ring)          2(n−1)/n · S
    reduce-scatter, all-gather (n−1)/n · S      (S = the full, unsharded array)
    all-to-all                 (n−1)/n · S
    send/recv (pipeline p2p)   S
Time = volume / (B · η) + steps · α, with B the per-GPU unidirectional bandwidth of the slowest
link the group crosses, η a calibrated bus efficiency and α the per-step latency (ring: 2(n−1)
steps for all-reduce, n−1 for the others; GenZ, arXiv:2406.01698, uses the same latency form).

Which link a group uses (DESIGN §5): NVLink/NVSwitch when the whole group sits inside one node
and inside the GPU's scale-up domain, PCIe when there is no such link (with P2P) or through host
memory when the driver disables P2P (GeForce), and the node's network (InfiniBand/RoCE/Ethernet)
as soon as the group spans nodes. Across nodes NCCL runs one channel per NIC, so a group with g
members per node gets g × (per-GPU NIC rate), capped by the intra-node link (nccl-tests busbw on
8×HDR DGX A100 nodes is ~8 × 25 GB/s, not 25 GB/s).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .calibration import packaged

# Defaults used when the catalog leaves a field empty (documented in docs/speed.md §3).
_DEFAULT_LINK_LATENCY_S = {"scale_up": 3e-6, "pcie": 5e-6, "host": 10e-6, "network": 5e-6}
_DEFAULT_NET_BW = 25e9          # 200 Gb/s per GPU when no network is known
_HOST_STAGING_FACTOR = 0.5      # no P2P: GPU -> host -> GPU, each byte crosses PCIe twice


@dataclass(frozen=True)
class Link:
    kind: str                   # scale_up | pcie | host | network | none
    bandwidth_bytes_per_s: float  # per GPU, unidirectional
    latency_s: float
    efficiency: float = 1.0

    @property
    def effective_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s * self.efficiency


LOCAL = Link("none", float("inf"), 0.0, 1.0)


def network_bandwidth_bytes_per_s(network: Any, gpus_per_node: int = 8) -> float:
    fn = getattr(network, "bandwidth_bytes_per_s_per_gpu", None)
    if callable(fn):
        v = fn(gpus_per_node)
        if v:
            return float(v)
    for name in ("bandwidth_bytes_per_s", "bandwidth_per_gpu_bytes_per_s", "bytes_per_s_per_gpu",
                 "bandwidth_per_gpu"):
        v = getattr(network, name, None)
        if v:
            return float(v)
    gbps = getattr(network, "gbps_per_gpu", None)
    return float(gbps) * 1e9 / 8 if gbps else _DEFAULT_NET_BW


def network_latency_s(network: Any) -> float:
    v = getattr(network, "latency_s", None)
    if v:
        return float(v)
    us = getattr(network, "latency_us", None)
    return float(us) * 1e-6 if us else _DEFAULT_LINK_LATENCY_S["network"]


PCIE_FALLBACK_BYTES_PER_S = 32e9   # PCIe 4.0 x16 per direction, for a catalog row without a PCIe figure


def _pcie_bw(gpu: Any) -> float:
    return float(getattr(gpu, "pcie_bandwidth_bytes_per_s", 0.0) or PCIE_FALLBACK_BYTES_PER_S)


def group_link(gpu: Any, group_size: int, span: int, gpus_per_node: int, network: Any = None,
               eff: Mapping[str, float] | None = None) -> Link:
    """The bottleneck link of a group of `group_size` ranks whose members lie `span` GPUs apart
    in total (span = group_size × product of the parallel dimensions placed inside it). `eff`:
    achieved fraction of each link's bandwidth (the calibration's `comm` table; packaged by default)."""
    eff = packaged()["comm"] if eff is None else eff
    if group_size <= 1:
        return LOCAL
    if span > gpus_per_node:
        nic = network_bandwidth_bytes_per_s(network, gpus_per_node) if network is not None else _DEFAULT_NET_BW
        # NCCL runs one ring/tree channel per NIC: the members of the group that share a node
        # split the inter-node traffic over their NICs and exchange the rest over the
        # intra-node link, so the group sees (members per node) x NIC rate, capped by that link.
        stride = max(1, span // group_size)
        local = max(1, gpus_per_node // stride)
        intra = _intra_link(gpu, min(span, gpus_per_node), eff) if local > 1 else None
        bw = local * nic if intra is None else min(local * nic, intra.bandwidth_bytes_per_s)
        lat = network_latency_s(network) if network is not None else _DEFAULT_LINK_LATENCY_S["network"]
        return Link("network", bw, lat, eff["network"])
    return _intra_link(gpu, span, eff)


def _intra_link(gpu: Any, span: int, eff: Mapping[str, float]) -> Link:
    scale_up = (getattr(gpu, "scale_up", None) or "none").lower()
    max_gpus = int(getattr(gpu, "scale_up_max_gpus", 1) or 1)
    su_bw = float(getattr(gpu, "scale_up_bandwidth_bytes_per_s", 0.0) or 0.0)
    p2p = bool(getattr(gpu, "p2p", True))
    if scale_up not in ("none", "", "apple-unified") and su_bw > 0 and span <= max_gpus and p2p:
        return Link("scale_up", su_bw, _DEFAULT_LINK_LATENCY_S["scale_up"], eff["scale_up"])
    if p2p:
        return Link("pcie", _pcie_bw(gpu), _DEFAULT_LINK_LATENCY_S["pcie"], eff["pcie"])
    return Link("host", _pcie_bw(gpu) * _HOST_STAGING_FACTOR, _DEFAULT_LINK_LATENCY_S["host"],
                eff["pcie"])


# ---- collectives: payload S bytes (full array), n ranks --------------------------------------

def all_reduce_volume(size_bytes: float, n: int) -> float:
    return 0.0 if n <= 1 else 2.0 * (n - 1) / n * size_bytes


def all_gather_volume(size_bytes: float, n: int) -> float:
    return 0.0 if n <= 1 else (n - 1) / n * size_bytes


reduce_scatter_volume = all_gather_volume
all_to_all_volume = all_gather_volume


def all_reduce_time(size_bytes: float, n: int, link: Link) -> float:
    if n <= 1 or size_bytes <= 0:
        return 0.0
    return all_reduce_volume(size_bytes, n) / link.effective_bytes_per_s + 2 * (n - 1) * link.latency_s


def all_gather_time(size_bytes: float, n: int, link: Link) -> float:
    if n <= 1 or size_bytes <= 0:
        return 0.0
    return all_gather_volume(size_bytes, n) / link.effective_bytes_per_s + (n - 1) * link.latency_s


reduce_scatter_time = all_gather_time
all_to_all_time = all_gather_time


def all_to_all_time_nodes(size_bytes: float, n: int, per_node: int, intra: Link, nic: Link) -> float:
    """All-to-all of S bytes per rank over n ranks placed `per_node` to a node. Every rank sends S/n to
    each peer at once (NCCL all-to-all is a group of point-to-point sends and receives), so the
    (per_node − 1)/n · S bound for peers on the node crosses the intra-node link and the
    (n − per_node)/n · S bound elsewhere leaves through the rank's own NIC, both concurrently: the slower
    side sets the time. Unlike a ring, an all-to-all gets no help from the node's other NICs: each of
    them carries its own rank's traffic (one NIC per GPU, as the network catalog's DGX-class rows)."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    g = max(1, min(per_node, n))
    if g >= n:
        return all_to_all_time(size_bytes, n, intra)
    t_intra = (g - 1) / n * size_bytes / intra.effective_bytes_per_s if g > 1 else 0.0
    t_inter = (n - g) / n * size_bytes / nic.effective_bytes_per_s
    return max(t_intra, t_inter) + (n - 1) * nic.latency_s


def p2p_time(size_bytes: float, link: Link) -> float:
    if size_bytes <= 0 or link.kind == "none":
        return 0.0
    return size_bytes / link.effective_bytes_per_s + link.latency_s
