"""Hardware catalog: GPU specs, node shapes, networks, cloud prices and software fit.

Data lives in CSVs under gpuplan/hardware/data/ (units in column names, a source URL and a
retrieval date on every row; see docs/data.md) and is loaded lazily, once.
"""
from __future__ import annotations

from .cloud import Offering, offerings, providers
from .gpus import ENV_VAR, GpuSpec, get_gpu, list_gpus, normalize, use_user_catalog
from .topology import (Network, NodeShape, default_network_for, default_node_for, get_network, get_node,
                       list_networks, list_nodes, nodes_for)

__all__ = [
    "ENV_VAR", "GpuSpec", "Network", "NodeShape", "Offering", "default_network_for", "default_node_for",
    "get_gpu", "get_network", "get_node", "list_gpus", "list_networks", "list_nodes", "nodes_for",
    "normalize", "offerings", "providers", "use_user_catalog",
]
