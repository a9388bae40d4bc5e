"""Fake-tensor traces of the optimizers whose states or step temporaries depend on tensor shapes
(validation/traces_optimizers.json), compared by tests/test_optimizers.py with the memory engine.

    PYTHONPATH=src python scripts/trace_optimizers.py [--write]

Each case runs gpuplan's trace (transformers' Adafactor, or torch's Muon + AdamW, on a HF model built from its config, two iterations on
fake tensors, docs/trace.md) and records the traced peak and phases. Without --write it prints them.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpuplan.scenario import scenario_from_dict  # noqa: E402
from gpuplan.trace import trace  # noqa: E402

OUT = ROOT / "validation" / "traces_optimizers.json"
CASES = {
    "smollm-135m full mw s512 recompute adafactor": {"optimizer": "adafactor", "seq_len": 512, "recompute": "full"},
    "smollm-135m full bf16 s512 recompute adafactor": {"optimizer": "adafactor", "seq_len": 512, "recompute": "full",
                                                       "master_weights": False},
    "smollm-135m full mw s512 recompute muon": {"optimizer": "muon", "seq_len": 512, "recompute": "full"},
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(ROOT)}")
    a = ap.parse_args()
    out = []
    for name, train in CASES.items():
        scn = {"model": "smollm-135m", "task": "finetune", "hardware": {"gpu": "h100-sxm", "count": 1},
               "train": {"micro_batch": 1, **train}}
        r = trace(scenario_from_dict(scn)).to_json()
        out.append({"name": name, "scenario": scn, "peak_bytes": r["peak_bytes"], "phase": r.get("phase"),
                    "phases": r.get("phases"), "components": r.get("components")})
        print(name, r["peak_bytes"], r.get("phase"))
    if a.write:
        OUT.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
