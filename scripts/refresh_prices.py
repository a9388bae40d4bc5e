"""Refresh src/gpuplan/hardware/data/prices.csv from the SkyPilot catalog and show the diff (dry run by default).

Source: the public SkyPilot catalog (github.com/skypilot-org/skypilot-catalog), one `vms.csv` per cloud
(`catalogs/<version>/<cloud>/vms.csv`: InstanceType, AcceleratorName, AcceleratorCount, vCPUs, MemoryGiB,
GpuInfo, Price, SpotPrice, Region, AvailabilityZone; one row per zone). Give it either

  --offerings FILE          an aggregated snapshot in shared/data/cloud-offerings.csv's columns (default:
                            that file, which reproduces the shipped prices.csv), or
  --vms CLOUD=PATH_OR_URL   one raw vms.csv per cloud (repeatable; a local checkout of the catalog or a
                            raw.githubusercontent.com URL, read with urllib), with --commit SHA naming the
                            catalog commit for the source URLs.

Raw files are aggregated like the snapshot: one offering per (cloud, instance type, accelerator, count)
with at least one whole accelerator; on-demand = cheapest region (and the median over regions), spot =
cheapest spot; the accelerator's memory from GpuInfo. The id mapping, corrections and drops are
build_hardware_data.build_prices (each with its reason). Nothing is written without --write.

Usage: python scripts/refresh_prices.py [--offerings FILE | --vms aws=... --vms gcp=... --commit SHA] [--write]
"""
from __future__ import annotations

import argparse
import ast
import csv
import datetime as dt
import io
import json
import statistics
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _csvdiff import render, report  # noqa: E402
from build_hardware_data import OUT, PRICE_COLUMNS, PRICE_KEY, ROOT, build_prices, read_offerings  # noqa: E402

REPO = "skypilot-org/skypilot-catalog"
# SkyPilot writes DigitalOcean as 'do'; the snapshot (and prices.csv) says 'digitalocean'
PROVIDER_NAMES = {"do": "digitalocean"}


def _gpu_memory_gib(info: str) -> str:
    """GpuInfo -> memory per accelerator in GiB ('' if absent). SkyPilot writes it as JSON or as a
    Python dict literal: {'Gpus': [{'Name': 'A100', 'MemoryInfo': {'SizeInMiB': 40960}, ...}], ...}."""
    info = (info or "").strip()
    if not info:
        return ""
    try:
        data = json.loads(info)
    except ValueError:
        try:
            data = ast.literal_eval(info)
        except (ValueError, SyntaxError):
            return ""
    gpus = data.get("Gpus") if isinstance(data, dict) else None
    mib = (((gpus or [{}])[0] or {}).get("MemoryInfo") or {}).get("SizeInMiB")
    return f"{float(mib) / 1024:g}" if mib else ""


def _price(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def offerings_from_vms(text: str, cloud: str, source: str, retrieved: str) -> list[dict]:
    """Aggregate one raw SkyPilot vms.csv (text) into offering rows (cloud-offerings.csv columns)."""
    groups: dict[tuple, list[dict]] = {}
    for r in csv.DictReader(io.StringIO(text)):
        acc = (r.get("AcceleratorName") or "").strip()
        try:
            count = float(r.get("AcceleratorCount") or 0)
        except ValueError:
            continue
        if not acc or count < 1 or count != int(count):      # CPU-only or fractional GPUs
            continue
        groups.setdefault((r["InstanceType"], acc, int(count)), []).append(r)
    out = []
    for (inst, acc, count), rows in groups.items():
        by_region: dict[str, float] = {}
        for r in rows:
            p = _price(r.get("Price"))
            if p is not None:
                by_region[r["Region"]] = min(p, by_region.get(r["Region"], p))
        spots = [s for s in (_price(r.get("SpotPrice")) for r in rows) if s is not None]
        cheapest = min(by_region, key=by_region.get) if by_region else rows[0]["Region"]
        first = rows[0]
        out.append(dict(
            provider=PROVIDER_NAMES.get(cloud, cloud), instance_type=inst, accelerator=acc, accelerator_count=count,
            accelerator_memory_gib=_gpu_memory_gib(first.get("GpuInfo", "")),
            vcpus=first.get("vCPUs", ""), memory_gib=first.get("MemoryGiB", ""),
            price_usd_per_hour_on_demand=f"{by_region[cheapest]:g}" if by_region else "",
            price_usd_per_hour_on_demand_median=f"{statistics.median(by_region.values()):g}" if by_region else "",
            price_usd_per_hour_spot_min=f"{min(spots):g}" if spots else "",
            regions_count=len({r["Region"] for r in rows}), example_region=cheapest,
            source=source, retrieved_on=retrieved))
    return sorted(out, key=lambda o: (o["provider"], o["instance_type"], o["accelerator"], o["accelerator_count"]))


def _read(path_or_url: str) -> str:
    if path_or_url.startswith(("https://", "http://")):
        with urllib.request.urlopen(path_or_url, timeout=60) as resp:   # noqa: S310 - a URL the user gave
            return resp.read().decode("utf-8")
    return Path(path_or_url).read_text(encoding="utf-8")


def _catalog_path(path_or_url: str) -> str:
    """'.../catalogs/v9/aws/vms.csv' -> 'catalogs/v9/aws/vms.csv' (for the source column)."""
    i = path_or_url.find("catalogs/")
    return path_or_url[i:] if i >= 0 else Path(path_or_url).name


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offerings", type=Path, default=ROOT.parent / "shared" / "data" / "cloud-offerings.csv")
    ap.add_argument("--vms", action="append", default=[], metavar="CLOUD=PATH_OR_URL",
                    help="a raw SkyPilot vms.csv for one cloud (repeatable); replaces --offerings")
    ap.add_argument("--commit", default="unknown", help="skypilot-catalog commit the --vms files come from")
    ap.add_argument("--retrieved", default=dt.date.today().isoformat(), help="date the --vms files were read")
    ap.add_argument("--out", type=Path, default=OUT, help="folder holding prices.csv")
    ap.add_argument("--write", action="store_true", help="rewrite prices.csv (default: show the diff only)")
    args = ap.parse_args(argv)
    if args.vms:
        offerings = []
        for spec in args.vms:
            cloud, _, where = spec.partition("=")
            if not cloud or not where:
                ap.error(f"--vms {spec!r}: write CLOUD=PATH_OR_URL, e.g. aws=catalogs/v9/aws/vms.csv")
            source = f"{REPO}:{_catalog_path(where)}@{args.commit}"
            offerings += offerings_from_vms(_read(where), cloud, source, args.retrieved)
    else:
        offerings = read_offerings(args.offerings)
    prices, dropped = build_prices(offerings)
    text = report(args.out / "prices.csv", render(PRICE_COLUMNS, prices), PRICE_KEY, write=args.write)
    text += f"\n{len(prices)} offerings kept; {sum(dropped.values())} dropped:"
    for why, n in sorted(dropped.items(), key=lambda kv: -kv[1]):
        text += f"\n  {n:4d}  {why}"
    print(text)
    return text


if __name__ == "__main__":
    main()
