"""Write src/gpuplan/models/meta_counts.csv: the parameter counts of the bundled models whose architecture only
the generic meta-device reader knows (models/generic.py: LLaVA, Qwen2.5-VL ...), so that `gpuplan models` lists
them without importing transformers and building them (seconds each), and lists them at all on a core install.

Run from the repo root after adding such a model to the registry: python scripts/registry_meta_counts.py
tests/test_registry_listing.py checks every row against a fresh meta-device count.
"""
from __future__ import annotations

import csv
import datetime
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpuplan.models import generic, registry  # noqa: E402

OUT = ROOT / "src" / "gpuplan" / "models" / "meta_counts.csv"
FIELDS = ["name", "model_type", "params_total", "params_active", "max_position", "transformers_version", "generated"]


def meta_read_entries() -> list[tuple[registry.RegistryEntry, object]]:
    """(entry, spec) of every registry model that resolves through the generic meta-device reader."""
    seen: list[str] = []
    real = generic.spec_from_meta

    def spy(raw, *a, **k):
        seen.append(k.get("name"))
        return real(raw, *a, **k)
    generic.spec_from_meta = spy
    try:
        out = []
        for e in registry.registry():
            seen.clear()
            spec = registry.get_model(e.name)
            if seen:
                out.append((e, spec))
        return out
    finally:
        generic.spec_from_meta = real


def main() -> int:
    import transformers
    today = datetime.date.today().isoformat()
    rows = [{"name": e.name, "model_type": m.model_type, "params_total": m.params_total,
             "params_active": m.params_active, "max_position": m.max_position or "",
             "transformers_version": transformers.__version__, "generated": today}
            for e, m in meta_read_entries()]
    with OUT.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {OUT.relative_to(ROOT)}: {len(rows)} models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
