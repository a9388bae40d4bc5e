"""Host CPUs: how fast the host issues work to the GPU.

An eager PyTorch loop (HF transformers `generate` without CUDA graphs) spends CPU time in Python and
the dispatcher for every kernel it launches; at small batches that host time, not the GPU, bounds a
decode step. It scales with the CPU's single-thread speed, which differs about 1.5x between a
data-centre server CPU and a current desktop CPU. The catalog (data/host_cpus.csv) gives each CPU its
PassMark single-thread rating, with its source; `default_for_segments` names the GPU segments whose
usual host it is (GeForce cards sit in desktops, data-centre cards in servers), and `default_for_gpus`
the GPUs whose usual host differs from their segment's (a T4 is rented as a cloud virtual machine on an
older, lower-clocked server Xeon); a GPU's own entry wins over its segment's.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from ..errors import InputError
from ._csv import data_path, read_rows, split_list

# The CPU whose speed the packaged host costs describe (estimate/quant_kernels.py): bitsandbytes'
# H100 benchmark host, a data-centre server CPU; its model is not published, so gpuplan takes the
# server row of the catalog.
REFERENCE_HOST = "epyc-9654"


@dataclass(frozen=True, kw_only=True)
class HostCpu:
    id: str
    name: str
    segment: str
    single_thread_score: float        # PassMark single-thread rating
    default_for_segments: tuple[str, ...]
    source_url: str
    retrieved: str
    notes: str = ""
    default_for_gpus: tuple[str, ...] = ()
    # host seconds to issue one small eager CUDA op from a Python loop with the GPU busy, where it was timed on this
    # host itself (column eager_op_us; scripts/bench_expert_gemm.py `_host_seconds_per_op`): a virtualised host's
    # launch path is not told by its CPU's single-thread rating (estimate/host_issue.py)
    eager_op_s: float | None = None

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in
                ((k, getattr(self, k)) for k in self.__dataclass_fields__)}


@functools.cache
def _hosts() -> dict[str, HostCpu]:
    out = {}
    for row in read_rows(data_path("host_cpus.csv"), ("id", "name", "segment", "passmark_single_thread_score",
                                                      "source_url", "retrieved"),
                         label="gpuplan/hardware/data/host_cpus.csv"):
        url, date = row.provenance()
        out[row.text("id")] = HostCpu(
            id=row.text("id"), name=row.text("name"), segment=row.text("segment"),
            single_thread_score=row.number("passmark_single_thread_score"),
            default_for_segments=split_list(row.text("default_for_segments", required=False)),
            default_for_gpus=split_list(row.text("default_for_gpus", required=False)),
            source_url=url, retrieved=date, notes=row.text("notes", required=False),
            eager_op_s=_us(row.number("eager_op_us", required=False)))
    return out


def _us(v: float | None) -> float | None:
    return None if v is None else v * 1e-6


def list_host_cpus() -> list[HostCpu]:
    return list(_hosts().values())


def get_host_cpu(host_id: str) -> HostCpu:
    from .topology import _by_id
    return _by_id(_hosts(), host_id, "host CPU", "host_cpus.csv")


def host_cpu_speed(host_id: str) -> float:
    """A catalog CPU's single-thread speed relative to the reference host (what a host time measured on it is worth
    in reference-host seconds, per unit of its own)."""
    return get_host_cpu(host_id).single_thread_score / _hosts()[REFERENCE_HOST].single_thread_score


def default_host_for(segment: str, gpu_id: str | None = None) -> HostCpu:
    """The usual host of a GPU: the row naming the GPU itself, else the row naming its segment, else the
    reference host."""
    hosts = _hosts().values()
    for host in hosts:
        if gpu_id and gpu_id in host.default_for_gpus:
            return host
    for host in hosts:
        if segment in host.default_for_segments:
            return host
    return _hosts()[REFERENCE_HOST]


def host_eager_op_s(host_cpu: str | None, single_thread_score: float | None) -> float | None:
    """The named host's own timed seconds per eager op (None: not timed, or a bare single-thread score given)."""
    if single_thread_score is not None or not host_cpu:
        return None
    return get_host_cpu(host_cpu).eager_op_s


def host_speed(host_cpu: str | None, single_thread_score: float | None, gpu_segment: str,
               gpu_id: str | None = None) -> tuple[float, str]:
    """(issue speed relative to the reference host, what it was taken from). An explicit score wins over
    a named CPU, which wins over the GPU's usual host (its own catalog entry, else its segment's)."""
    if single_thread_score is not None:
        if not single_thread_score > 0:
            raise InputError("hardware.host_single_thread_score", f"{single_thread_score} is not positive.",
                             "give the CPU's PassMark single-thread rating (e.g. 4243 for a Core i9-12900K).")
        return single_thread_score / _hosts()[REFERENCE_HOST].single_thread_score, \
            f"single-thread score {single_thread_score:g}"
    if host_cpu:
        return host_cpu_speed(host_cpu), get_host_cpu(host_cpu).name
    host = default_host_for(gpu_segment, gpu_id)
    whose = gpu_id if gpu_id and gpu_id in host.default_for_gpus else f"{gpu_segment} GPU"
    return host_cpu_speed(host.id), f"{host.name} (usual host of a {whose}; set hardware.host_cpu)"
