"""Refresh src/gpuplan/hardware/data/gpus.csv from its sources and show the diff (dry run by default).

Sources, both read-only here:
  * the research sheet shared/data/gpu-specs.csv (+ its notes), mapped and corrected by the tables in
    build_hardware_data.py (ids, aliases, usable memory, topology, per-GCD figures, ...);
  * scripts/sources/gpu-datasheets.csv: rows typed by hand from vendor datasheets and product pages
    (memory/power variants, consumer, edge and Apple parts), each with its own source_url and retrieved
    date and a note saying what was derived and how.

To change a spec: edit the source row (and its source_url/retrieved), run this script, read the diff,
then run it again with --write. Then run build_software_data.py (one software row per GPU id).

Usage: python scripts/refresh_gpus.py [--shared DIR] [--datasheets CSV] [--out DIR] [--write]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _csvdiff import render, report  # noqa: E402
from build_hardware_data import DATASHEETS, GPU_COLUMNS, OUT, ROOT, build_gpus  # noqa: E402


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data",
                    help="folder with gpu-specs.csv (the research sheet)")
    ap.add_argument("--datasheets", type=Path, default=DATASHEETS, help="hand-typed datasheet rows")
    ap.add_argument("--out", type=Path, default=OUT, help="folder holding gpus.csv")
    ap.add_argument("--write", action="store_true", help="rewrite gpus.csv (default: show the diff only)")
    args = ap.parse_args(argv)
    rows = build_gpus(args.shared, args.datasheets)
    text = report(args.out / "gpus.csv", render(GPU_COLUMNS, rows), ("id",), write=args.write)
    print(text)
    return text


if __name__ == "__main__":
    main()
