"""Streaming multiprocessors: how many warp instructions a GPU issues per second.

A kernel that does more instruction work per byte than the memory system can feed is bound by instruction
issue, not by HBM: each SM has `warp_schedulers_per_sm` schedulers, each issuing at most one warp
instruction per clock, so the GPU issues at most SMs x schedulers x clock warp instructions per second.
The catalog (data/gpu_sms.csv) gives each GPU its SM count, boost clock and FP32 lanes per SM from the
vendor's whitepaper; a GPU not listed has no issue rate, and callers leave the issue bound out.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from ._csv import data_path, read_rows


@dataclass(frozen=True, kw_only=True)
class SmSpec:
    id: str
    sm_count: int
    boost_clock_hz: float
    fp32_lanes_per_sm: int
    warp_schedulers_per_sm: int
    source_url: str
    retrieved: str

    @property
    def warp_issue_per_s(self) -> float:
        """Peak warp instructions issued per second (one per scheduler per clock, at the boost clock)."""
        return self.sm_count * self.warp_schedulers_per_sm * self.boost_clock_hz

    @property
    def fp32_flops(self) -> float:
        """FP32 FLOP/s these figures imply (an FMA per lane per clock): a check against the GPU catalog."""
        return self.sm_count * self.fp32_lanes_per_sm * 2.0 * self.boost_clock_hz


@functools.cache
def _sms() -> dict[str, SmSpec]:
    out = {}
    for row in read_rows(data_path("gpu_sms.csv"), ("id", "sm_count", "boost_clock_mhz", "fp32_lanes_per_sm",
                                                    "warp_schedulers_per_sm", "source_url", "retrieved"),
                         label="gpuplan/hardware/data/gpu_sms.csv"):
        url, date = row.provenance()
        out[row.text("id")] = SmSpec(id=row.text("id"), sm_count=int(row.number("sm_count")),
                                     boost_clock_hz=row.number("boost_clock_mhz") * 1e6,
                                     fp32_lanes_per_sm=int(row.number("fp32_lanes_per_sm")),
                                     warp_schedulers_per_sm=int(row.number("warp_schedulers_per_sm")),
                                     source_url=url, retrieved=date)
    return out


def sm_spec(gpu_id: str) -> SmSpec | None:
    """The SM figures of a catalog GPU id, or None where the catalog has none."""
    return _sms().get(gpu_id)


def all_sm_specs() -> dict[str, SmSpec]:
    return dict(_sms())


# DRAM load latency: how long one load waits for memory when nothing hides it. A kernel whose threads each keep
# one load in flight moves at most (threads resident x bytes per load) / latency (Little's law), whatever the
# HBM's peak; data/gpu_dram_latency.csv gives the measured, unloaded latency (pointer chasing), so the rate this
# implies is a ceiling. A GPU not listed has no latency, and callers leave the bound out.
@functools.cache
def _latencies() -> dict[str, float]:
    out = {}
    for row in read_rows(data_path("gpu_dram_latency.csv"), ("id", "dram_latency_cycles", "clock_mhz",
                                                            "source_url", "retrieved"),
                         label="gpuplan/hardware/data/gpu_dram_latency.csv"):
        row.provenance()
        out[row.text("id")] = row.number("dram_latency_cycles") / (row.number("clock_mhz") * 1e6)
    return out


def dram_latency_s(gpu_id: str) -> float | None:
    """Measured unloaded DRAM load latency (seconds) of a catalog GPU id, or None where none is listed."""
    return _latencies().get(gpu_id)
