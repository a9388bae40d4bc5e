"""estimate/comm.py: collective volumes and times (α–β model) and link choice."""
from types import SimpleNamespace

import pytest

from gpuplan.estimate import comm
from gpuplan.estimate.calibration import load_efficiency
from gpuplan.estimate.comm import (LOCAL, Link, all_gather_time, all_gather_volume, all_reduce_time,
                                   all_reduce_volume, all_to_all_time, group_link, p2p_time, reduce_scatter_time)

GB = 1e9
LINK = Link("scale_up", 100 * GB, 5e-6, 0.5)       # 50 GB/s effective


def _gpu(**kw):
    base = dict(scale_up="nvlink", scale_up_max_gpus=8, scale_up_bandwidth_bytes_per_s=450 * GB, p2p=True,
                pcie_bandwidth_bytes_per_s=64 * GB)
    return SimpleNamespace(**{**base, **kw})


def test_volumes():
    assert all_reduce_volume(8 * GB, 8) == 2 * 7 / 8 * 8 * GB == 14 * GB
    assert all_gather_volume(8 * GB, 8) == 7 * GB
    assert all_reduce_volume(8 * GB, 1) == all_gather_volume(8 * GB, 1) == 0.0


def test_all_reduce_time_bandwidth_plus_latency():
    # 2·(n−1)/n·S / (B·η) + 2(n−1)·α
    assert all_reduce_time(8 * GB, 8, LINK) == pytest.approx(14 * GB / (50 * GB) + 14 * 5e-6)
    assert all_reduce_time(0, 8, LINK) == 0.0 and all_reduce_time(8 * GB, 1, LINK) == 0.0


def test_all_gather_reduce_scatter_all_to_all_share_the_ring_form():
    t = (7 / 8 * 8 * GB) / (50 * GB) + 7 * 5e-6
    assert all_gather_time(8 * GB, 8, LINK) == pytest.approx(t)
    assert reduce_scatter_time(8 * GB, 8, LINK) == pytest.approx(t)
    assert all_to_all_time(8 * GB, 8, LINK) == pytest.approx(t)


def test_p2p_time():
    assert p2p_time(1 * GB, LINK) == pytest.approx(1 / 50 + 5e-6)
    assert p2p_time(0, LINK) == 0.0
    assert p2p_time(1 * GB, Link("none", 0.0, 0.0)) == 0.0


def test_effective_bandwidth():
    assert LINK.effective_bytes_per_s == 50 * GB


def test_group_link_inside_the_scale_up_domain():
    link = group_link(_gpu(), 8, 8, 8, eff={"scale_up": 0.7, "pcie": 0.6, "network": 0.5})
    assert (link.kind, link.bandwidth_bytes_per_s, link.efficiency) == ("scale_up", 450 * GB, 0.7)
    assert group_link(_gpu(), 1, 1, 8) is LOCAL


def test_group_link_without_nvlink_uses_pcie_or_host():
    eff = {"scale_up": 0.7, "pcie": 0.6, "network": 0.5}
    pcie = group_link(_gpu(scale_up="none"), 2, 2, 8, eff=eff)
    assert (pcie.kind, pcie.bandwidth_bytes_per_s, pcie.efficiency) == ("pcie", 64 * GB, 0.6)
    host = group_link(_gpu(scale_up="none", p2p=False), 2, 2, 8, eff=eff)
    assert host.kind == "host" and host.bandwidth_bytes_per_s == pytest.approx(32 * GB)


def test_pcie_fallback_is_a_named_constant():
    g = _gpu(scale_up="none", pcie_bandwidth_bytes_per_s=None)
    assert group_link(g, 2, 2, 8, eff={"scale_up": 1, "pcie": 1, "network": 1}).bandwidth_bytes_per_s \
        == comm.PCIE_FALLBACK_BYTES_PER_S == 32e9


def test_group_link_across_nodes_takes_the_network():
    net = SimpleNamespace(bandwidth_bytes_per_s=50 * GB, latency_s=2e-6)
    eff = {"scale_up": 0.7, "pcie": 0.6, "network": 0.5}
    link = group_link(_gpu(), 16, 16, 8, net, eff=eff)
    # 8 members per node share 8 NICs (8 x 50 GB/s), capped by NVLink (450 GB/s)
    assert (link.kind, link.bandwidth_bytes_per_s, link.latency_s, link.efficiency) == ("network", 400 * GB, 2e-6, 0.5)
    # one member per node (TP 8 inside the node): one NIC
    assert group_link(_gpu(), 2, 16, 8, net, eff=eff).bandwidth_bytes_per_s == 50 * GB


def test_group_link_default_efficiency_comes_from_the_calibration_file():
    P = load_efficiency()
    assert group_link(_gpu(), 8, 8, 8).efficiency == P["comm"]["scale_up"]
    assert group_link(_gpu(scale_up="none"), 2, 2, 8).efficiency == P["comm"]["pcie"]


def test_group_link_needs_every_efficiency_it_uses():
    with pytest.raises(KeyError):
        group_link(_gpu(), 8, 8, 8, eff={"pcie": 0.6})
