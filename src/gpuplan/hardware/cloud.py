"""Cloud offerings: whole instances with a GPU count and an hourly price.

Providers rent whole instances; an 8-GPU instance cannot be rented as 3 GPUs, so callers must
round GPU counts up to instance sizes. Per-GPU prices are for comparison only.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import InputError, UnknownNameError, close_matches
from ._csv import data_path, read_rows
from .gpus import get_gpu

REQUIRED_COLUMNS = ("provider", "instance_type", "gpu_id", "gpus_per_instance", "usd_per_hour_on_demand",
                    "usd_per_hour_spot", "source_url", "retrieved")


@dataclass(frozen=True, kw_only=True)
class Offering:
    provider: str
    instance_type: str
    gpu_id: str
    gpus_per_instance: int
    usd_per_hour_on_demand: float | None     # whole instance; None when the catalog has only spot
    usd_per_hour_spot: float | None          # whole instance; None when unknown
    usd_per_hour_on_demand_median: float | None = None
    region: str = ""
    regions_count: int | None = None
    includes_host: bool = True               # False: GPU-only price (GCP attachable GPUs), add a host VM
    catalog_accelerator: str = ""
    mapping_basis: str = ""
    source_url: str
    retrieved: str
    notes: str = ""

    def __post_init__(self) -> None:
        if self.gpus_per_instance < 1:
            raise InputError(f"offering {self.provider}/{self.instance_type}", "has no GPUs.", "fix prices.csv.")
        if self.usd_per_hour_on_demand is None and self.usd_per_hour_spot is None:
            raise InputError(f"offering {self.provider}/{self.instance_type}", "has no price.", "fix prices.csv.")

    @property
    def usd_per_gpu_hour(self) -> float | None:
        if self.usd_per_hour_on_demand is None:
            return None
        return self.usd_per_hour_on_demand / self.gpus_per_instance

    @property
    def spot_usd_per_gpu_hour(self) -> float | None:
        if self.usd_per_hour_spot is None:
            return None
        return self.usd_per_hour_spot / self.gpus_per_instance

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["usd_per_gpu_hour"] = self.usd_per_gpu_hour
        d["spot_usd_per_gpu_hour"] = self.spot_usd_per_gpu_hour
        return d


@functools.cache
def _all_offerings() -> tuple[Offering, ...]:
    out = []
    for row in read_rows(data_path("prices.csv"), REQUIRED_COLUMNS, label="gpuplan/hardware/data/prices.csv"):
        url, date = row.provenance()
        out.append(Offering(
            provider=row.text("provider"), instance_type=row.text("instance_type"), gpu_id=row.text("gpu_id"),
            gpus_per_instance=row.integer("gpus_per_instance"),
            usd_per_hour_on_demand=row.number("usd_per_hour_on_demand", required=False),
            usd_per_hour_spot=row.number("usd_per_hour_spot", required=False),
            usd_per_hour_on_demand_median=row.number("usd_per_hour_on_demand_median", required=False),
            region=row.text("region", required=False), regions_count=row.integer("regions_count", required=False)
            if row.text("regions_count", required=False) not in ("", "0") else None,
            includes_host=row.boolean("includes_host", default=True),
            catalog_accelerator=row.text("catalog_accelerator", required=False),
            mapping_basis=row.text("mapping_basis", required=False),
            source_url=url, retrieved=date, notes=row.text("notes", required=False)))
    return tuple(out)


def providers() -> list[str]:
    return sorted({o.provider for o in _all_offerings()})


def offerings(gpu_id: str | None = None, providers: Sequence[str] | None = None) -> list[Offering]:  # noqa: F811
    """Offerings for one GPU (id or alias) and/or providers, cheapest on-demand per GPU first
    (spot-only rows last)."""
    rows = _all_offerings()
    if gpu_id is not None:
        gid = get_gpu(gpu_id).id
        rows = tuple(o for o in rows if o.gpu_id == gid)
    if providers is not None:
        known = {o.provider for o in _all_offerings()}
        wanted = [p.strip().lower() for p in providers]
        for p in wanted:
            if p not in known:
                raise UnknownNameError(f"provider '{p}'", "has no offerings in the price catalog.",
                                       f"use one of {', '.join(sorted(known))}.", close_matches(p, known))
        rows = tuple(o for o in rows if o.provider in wanted)
    return sorted(rows, key=lambda o: (o.usd_per_gpu_hour is None, o.usd_per_gpu_hour or 0.0,
                                       o.provider, o.instance_type))
