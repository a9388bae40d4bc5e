"""Error bars from the validation residuals: leave-one-source-out beside in-sample, per category.

    PYTHONPATH=src python scripts/make_uncertainty.py [--check]

Residual sets (relative error = (predicted − measured) / measured):
  speed, in-sample:      every published speed row with the packaged factors (calibrate_speed.py);
  speed, held-out:       every published speed row predicted with the factors re-fitted without its
                         source (leave-one-source-out), plus the gathered rows no factor was fitted on;
  memory, in-sample:     the published memory rows of validation/public (validate_memory.py): the
                         memory physics was developed with them in view;
  memory, held-out:      the gathered rows (validation/gathered), never looked at while modelling.
A category's error bar is its held-out median and P90 of |error| when it has at least 3 held-out runs,
else its in-sample ones (and the bar says "in-sample"). Writes src/gpuplan/estimate/data/uncertainty.csv
and docs/validation-uncertainty.md; --check recomputes and fails if the packaged table is stale.
"""
from __future__ import annotations

import argparse
import csv
import io
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

import calibrate_speed as cs  # noqa: E402
import validate_gathered as vg  # noqa: E402
import validate_memory as vm  # noqa: E402
from gpuplan.estimate import speed  # noqa: E402
from gpuplan.estimate.uncertainty import memory_category, speed_category  # noqa: E402

CSV_OUT = ROOT / "src" / "gpuplan" / "estimate" / "data" / "uncertainty.csv"
DOC_OUT = ROOT / "docs" / "validation-uncertainty.md"
MIN_HELD_OUT = 3


def _speed_category(source: str, category: str) -> str:
    if category == "train_tps":
        return speed_category("train")
    if source.startswith("TensorRT"):
        return speed_category("infer", "trtllm")
    return speed_category("infer", "llama.cpp")


def speed_residuals() -> tuple[list[tuple], list[tuple]]:
    """(in-sample, held-out) lists of (category, source, rel_err)."""
    vdir = ROOT / "validation" / "public"
    trows, irows = cs.train_rows(vdir / "train-throughput.csv"), cs.infer_rows(vdir / "inference.csv")
    irows += cs.gathered_lcpp_rows()    # llama-bench sources: CUDA rows and Metal prompt rows fit (calibrate_speed)
    scored = [r for r in trows + irows if r.split in ("fit", "test")]
    table, _ = cs.summarize(scored, speed.load_efficiency())
    ins = [(_speed_category(t["source"], t["category"]), cs.source_key(t["source"]), t["rel_err"]) for t in table]
    folds: dict = {}
    loso = cs.leave_one_source_out([r for r in trows if r.split in ("fit", "test")],
                                   [r for r in irows if r.split in ("fit", "test")], folds)
    held = [(_speed_category(t["source"], t["category"]), t["source"], t["rel_err"]) for t in loso]
    fit_sources = {}
    for r in trows + irows:
        if r.split == "fit":
            fit_sources.setdefault(cs.source_key(r.source), set()).add(r.id)
    return ins, held, constants_lines(folds, fit_sources)


def constants_lines(folds: dict, fit_sources: dict) -> list[str]:
    """Each fitted factor: the packaged value, the sources its fit rows come from, and its value
    re-fitted without each source (leave-one-source-out)."""
    P = speed.load_efficiency()
    keys = sorted(folds)
    short = [path for path, stage in cs.FITTED if len(stage_sources(stage, fit_sources)) < 3]
    rule = (f"{len(short)} of {len(cs.FITTED)} factors rest on fewer than three sources (marked with their count): "
            "the three-source rule is not met there yet." if short else
            f"Every one of the {len(cs.FITTED)} fitted factors rests on at least three independent sources (the "
            "three-source rule); every other constant is a measured or counted prior (docs/speed.md §4).")
    out = ["", "#### Fitted factors with and without each source", "",
           "Packaged value, the sources whose rows fit it, and the value re-fitted with each source left out "
           "(a fit with no rows left keeps its prior). " + rule, "",
           "| factor | packaged | rests on | " + " | ".join(f"without {k[:28]}" for k in keys) + " |",
           "|---|---|---|" + "---|" * len(keys)]
    for path, stage in cs.FITTED:
        srcs = stage_sources(stage, fit_sources)
        mark = f" ({len(srcs)} source{'s' if len(srcs) != 1 else ''})" if len(srcs) < 3 else ""
        vals = " | ".join(f"{cs.get_path(folds[k], path):.4g}" for k in keys)
        out.append(f"| {'.'.join(path)} | {cs.get_path(P, path):.4g} | {', '.join(s[:28] for s in srcs)}{mark} | {vals} |")
    return out


STAGE_PREFIX = {"train": "llm-foundry", "llama.cpp CUDA": "GPU-Benchmarks", "TensorRT-LLM": "TensorRT"}


def stage_sources(stage: str, fit_sources: dict) -> list[str]:
    """The sources with fit rows in one calibration stage of cs.FITTED: for the llama.cpp stages the sources with a
    fit row calibrate_speed files under that stage (cs.ROW_STAGE: GPU-Benchmarks' CUDA rows fit the CUDA stage and
    its Apple rows the Metal one), for the others by name prefix."""
    lcpp = {"llama.cpp CUDA": "cuda", "llama.cpp Metal": "metal"}.get(stage)
    if lcpp is not None:
        return sorted(k for k, ids in fit_sources.items() if any(cs.ROW_STAGE.get(i) == lcpp for i in ids))
    return sorted(k for k in fit_sources if stage in STAGE_PREFIX and k.startswith(STAGE_PREFIX[stage]))


def gathered_residuals() -> tuple[list[tuple], list[tuple], list[tuple]]:
    """(speed held-out, speed in-sample, memory held-out) from validation/gathered."""
    spd_held, spd_in, mem = [], [], []
    for path in vg.scored_files():
        rows = {r["id"]: r for r in csv.DictReader(path.open(encoding="utf-8"))}
        for rec in vg.score(path):
            row = rows[rec["id"]]
            if "tpot" in rec:
                p, m = rec["tpot"]
                item = (speed_category("infer", row["engine"]), row["source"], (p - m) / m)
                # the HF host constants were read off the H100 rows (validation/gathered/README.md)
                (spd_in if row["gpu"] == "h100-sxm" and row["engine"] == "hf" else spd_held).append(item)
            if "thr" in rec:     # batched-serving tokens/s (rows of unstated kind carry no "thr")
                p, m = rec["thr"]
                spd_held.append((speed_category("infer", row["engine"]), row["source"], (p - m) / m))
            if "rl" in rec:       # post-training RL step time (posttrain.csv)
                p, m = rec["rl"]
                spd_held.append((speed_category("train", objective=row["objective"]), row["source"], (p - m) / m))
            if "pref" in rec:     # preference-tuning optimizer step time (preference.csv): DPO-family steps
                p, m = rec["pref"]
                spd_held.append((speed_category("train", objective=row["objective"]), row["source"], (p - m) / m))
            if "tps" in rec:
                p, m = rec["tps"]
                spd_held.append((speed_category("train", moe=rec["moe"]), row["source"], (p - m) / m))
            if "mem" in rec:
                p, m = rec["mem"]
                if path.stem == "posttrain-memory":     # a post-training run (RL with its rollout engine)
                    cat = memory_category("finetune", row["method"], int(row["zero"] or 0), int(row["gpus"]), None,
                                          row["objective"])
                elif path.stem == "measured":     # one GPU, HF transformers, measured on a lent GPU
                    cat = memory_category(row["task"], row["method"] or None, 0, 1, row["engine"] or None,
                                          row.get("objective") or "sft")
                elif path.stem == "serve":      # serve.csv: the peak memory of a generate() run
                    cat = memory_category("infer", None, 0, 1, row["engine"])
                elif "method" in rec:     # finetune-memory.csv: LoRA/QLoRA fine-tuning peaks
                    cat = memory_category("finetune", row["method"], int(row["zero"]), int(row["gpus"]), None)
                else:
                    dp = int(row["fsdp"])
                    zero = int(row["zero"]) if row.get("zero") else (3 if dp > 1 else 0)
                    cat = memory_category("train", "full", zero, dp, None)
                mem.append((cat, row["source"], (p - m) / m))
    return spd_held, spd_in, mem


def memory_residuals() -> list[tuple]:
    out = []
    for r in vm.run_all():
        if not r.scored:
            continue
        s = r.case.scenario or {}
        t, p = s.get("train") or {}, s.get("parallel") or {}
        count = (s.get("hardware") or {}).get("count", 1)
        dp = p.get("dp") or max(1, count // max(1, p.get("tp", 1) * p.get("pp", 1) * p.get("cp", 1)))
        cat = memory_category(s.get("task", "train"), t.get("method", "full"), p.get("zero", 0), dp, None)
        out.append((cat, r.case.source, r.rel_error))
    return out


def _stats(items: list[tuple], cat: str) -> dict | None:
    errs = sorted(abs(e) for c, _, e in items if c == cat and e is not None and math.isfinite(e))
    if not errs:
        return None
    k = min(len(errs) - 1, max(0, math.ceil(0.9 * len(errs)) - 1))
    signed = [e for c, _, e in items if c == cat and e is not None and math.isfinite(e)]
    return {"n": len(errs), "sources": len({s for c, s, e in items if c == cat}),
            "median": statistics.median(errs), "p90": errs[k], "bias": statistics.median(signed)}


def build() -> tuple[str, str]:
    spd_in, spd_loso, constants = speed_residuals()
    g_spd_held, g_spd_in, g_mem = gathered_residuals()
    mem_in = memory_residuals()
    sets = {"speed": (spd_in + g_spd_in, spd_loso + g_spd_held), "memory": (mem_in, g_mem)}
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["quantity", "category", "relative_typical", "relative_p90", "runs", "sources", "basis",
                "in_sample_typical", "in_sample_runs", "held_out_typical", "held_out_runs"])
    doc = ["## Error bars: leave-one-source-out beside in-sample", "",
           "Generated by `scripts/make_uncertainty.py` (never edit by hand). Speed held-out = each source predicted "
           "with every factor re-fitted without it, plus the gathered rows (validation/gathered) no factor was "
           "fitted on; memory held-out = the gathered rows. |error| median / P90, median signed error (bias).", "",
           "| quantity | category | in-sample: runs, median, P90, bias | held-out: runs, sources, median, P90, bias "
           "| error bar used |", "|---|---|---|---|---|"]
    for qty, (ins, held) in sets.items():
        for cat in sorted({c for c, _, _ in ins + held}):
            a, b = _stats(ins, cat), _stats(held, cat)
            # fewer than MIN_HELD_OUT held-out runs fall back to the in-sample residuals; a category with none
            # (post-training RL memory) keeps its few held-out runs, and the bar names how few
            use, basis = (b, "held-out") if (b and (b["n"] >= MIN_HELD_OUT or a is None)) else (a, "in-sample")
            w.writerow([qty, cat, f"{use['median']:.4f}", f"{use['p90']:.4f}", use["n"], use["sources"], basis,
                        f"{a['median']:.4f}" if a else "", a["n"] if a else 0,
                        f"{b['median']:.4f}" if b else "", b["n"] if b else 0])

            def cell(s, with_sources=False):
                if not s:
                    return "-"
                src = f", {s['sources']} src" if with_sources else ""
                return f"{s['n']}{src}, {100 * s['median']:.1f} %, {100 * s['p90']:.1f} %, {100 * s['bias']:+.1f} %"
            doc.append(f"| {qty} | {cat} | {cell(a)} | {cell(b, True)} | ±{100 * use['median']:.0f} % "
                       f"typical ({basis}) |")
    doc += ["", "A category with fewer than 3 held-out runs falls back to its in-sample error, which is "
            "optimistic: read those bars as lower bounds. A category with no in-sample runs keeps its held-out "
            "runs however few (post-training RL memory: the bar's run count says how many)."] + constants
    return out.getvalue(), "\n".join(doc) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if the packaged table differs from a rebuild")
    args = ap.parse_args(argv)
    table, doc = build()
    if args.check:
        packaged = CSV_OUT.read_text(encoding="utf-8") if CSV_OUT.exists() else ""
        if packaged != table:
            print("uncertainty.csv is stale: run `python scripts/make_uncertainty.py` and commit the result")
            return 1
        print("uncertainty.csv is up to date")
        return 0
    CSV_OUT.write_text(table, encoding="utf-8")
    DOC_OUT.write_text(doc, encoding="utf-8")
    print(doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
