"""Node shapes (GPUs per box and how they are linked) and inter-node networks."""
from __future__ import annotations

import functools
from dataclasses import dataclass

from ..errors import InputError, UnknownNameError, close_matches
from ..units import GB
from ._csv import data_path, read_rows, split_list
from .gpus import GpuSpec, get_gpu

INTRA_LINKS = ("nvswitch", "nvlink-bridge", "nvlink-mesh", "infinity-fabric", "gaudi-roce", "ici", "pcie",
               "gpu-default", "none", "apple-unified")


@dataclass(frozen=True, kw_only=True)
class NodeShape:
    id: str
    name: str
    gpus_per_node: int
    intra_link: str
    intra_bandwidth_bytes_per_s: float | None   # per GPU, unidirectional; None = use the GPU's own link
    gpu_ids: tuple[str, ...]
    default_for: tuple[str, ...]
    default_network: str
    source_url: str
    retrieved: str
    notes: str = ""

    def intra_bandwidth_for(self, gpu: GpuSpec | str) -> float:
        """Per-GPU unidirectional bandwidth inside this node for `gpu`: the smaller of the node's
        link and the GPU's own scale-up link; PCIe when the node links GPUs over PCIe."""
        gpu = get_gpu(gpu)
        if self.intra_link == "pcie":
            return gpu.pcie_bandwidth_bytes_per_s
        own = gpu.scale_up_bandwidth_bytes_per_s or gpu.pcie_bandwidth_bytes_per_s
        if self.intra_bandwidth_bytes_per_s is None:
            return own
        return min(self.intra_bandwidth_bytes_per_s, own)

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in
                ((k, getattr(self, k)) for k in self.__dataclass_fields__)}


@dataclass(frozen=True, kw_only=True)
class Network:
    id: str
    name: str
    kind: str
    gbps_per_gpu: float | None       # line rate per GPU, one direction, Gb/s
    gbps_per_node: float | None      # line rate per node when the NIC(s) are shared
    nics_per_node: int | None
    latency_s: float
    source_url: str
    retrieved: str
    notes: str = ""

    def bandwidth_bytes_per_s_per_gpu(self, gpus_per_node: int = 8) -> float:
        """Unidirectional bytes/s each GPU gets to other nodes."""
        if self.gbps_per_gpu:
            return self.gbps_per_gpu * GB / 8
        return (self.gbps_per_node or 0.0) * GB / 8 / max(gpus_per_node, 1)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@functools.cache
def _nodes() -> dict[str, NodeShape]:
    out = {}
    for row in read_rows(data_path("nodes.csv"), ("id", "gpus_per_node", "intra_link", "gpu_ids", "default_network",
                                                  "source_url", "retrieved"), label="gpuplan/hardware/data/nodes.csv"):
        url, date = row.provenance()
        bidir = row.number("intra_gbps_bidir_per_gpu", required=False)
        out[row.text("id")] = NodeShape(
            id=row.text("id"), name=row.text("name"), gpus_per_node=row.integer("gpus_per_node"),
            intra_link=row.choice("intra_link", INTRA_LINKS),
            intra_bandwidth_bytes_per_s=None if bidir is None else bidir * GB / 2,
            gpu_ids=split_list(row.text("gpu_ids")), default_for=split_list(row.text("default_for", required=False)),
            default_network=row.text("default_network"), source_url=url, retrieved=date,
            notes=row.text("notes", required=False))
    return out


@functools.cache
def _networks() -> dict[str, Network]:
    out = {}
    for row in read_rows(data_path("networks.csv"), ("id", "kind", "latency_us", "source_url", "retrieved"),
                         label="gpuplan/hardware/data/networks.csv"):
        url, date = row.provenance()
        per_gpu = row.number("gbps_per_gpu", required=False)
        per_node = row.number("gbps_per_node", required=False)
        if per_gpu is None and per_node is None:
            raise row.fail("gbps_per_gpu", "neither gbps_per_gpu nor gbps_per_node is given.", "fill in one.")
        out[row.text("id")] = Network(
            id=row.text("id"), name=row.text("name"), kind=row.text("kind"), gbps_per_gpu=per_gpu,
            gbps_per_node=per_node, nics_per_node=row.integer("nics_per_node", required=False),
            latency_s=row.number("latency_us") * 1e-6, source_url=url, retrieved=date,
            notes=row.text("notes", required=False))
    return out


def list_nodes() -> list[NodeShape]:
    return list(_nodes().values())


def list_networks() -> list[Network]:
    return list(_networks().values())


def _by_id(table: dict, given: str, what: str, csv_name: str):
    key = str(given).strip().lower()
    if key not in table:
        raise UnknownNameError(f"{what} '{given}'", f"is not in {csv_name}.",
                               f"use one of {', '.join(table)}.", close_matches(key, table))
    return table[key]


def get_node(node_id: str) -> NodeShape:
    return _by_id(_nodes(), node_id, "node shape", "nodes.csv")


def get_network(network_id: str) -> Network:
    return _by_id(_networks(), network_id, "network", "networks.csv")


def nodes_for(gpu: GpuSpec | str) -> list[NodeShape]:
    """Node shapes that take this GPU."""
    gid = get_gpu(gpu).id
    return [n for n in _nodes().values() if gid in n.gpu_ids]


def default_node_for(gpu: GpuSpec | str) -> NodeShape:
    spec = get_gpu(gpu)
    for node in _nodes().values():
        if spec.id in node.default_for:
            return node
    shapes = nodes_for(spec)
    if shapes:
        return max(shapes, key=lambda n: n.gpus_per_node)
    # a user-added GPU that no shape lists: one scale-up domain (at most 8) on its own link
    n = min(spec.scale_up_max_gpus, 8)
    return NodeShape(id=f"{spec.id}-x{n}", name=f"{n}x {spec.name} (derived)", gpus_per_node=n,
                     intra_link="gpu-default", intra_bandwidth_bytes_per_s=None, gpu_ids=(spec.id,),
                     default_for=(spec.id,), default_network="ib-ndr-400" if n == 8 else "eth-100",
                     source_url=spec.source_url, retrieved=spec.retrieved,
                     notes="derived from the GPU's scale-up domain; no node shape in nodes.csv lists this GPU")


def default_network_for(gpu: GpuSpec | str) -> Network:
    return get_network(default_node_for(gpu).default_network)


def _check_references() -> None:
    """Used by tests: every node's GPUs and network exist."""
    for node in _nodes().values():
        for gid in node.gpu_ids + node.default_for:
            get_gpu(gid)
        if not set(node.default_for) <= set(node.gpu_ids):
            raise InputError(f"node shape '{node.id}'", "default_for lists GPUs not in gpu_ids.", "fix nodes.csv.")
        get_network(node.default_network)
