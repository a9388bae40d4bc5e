"""Time the recommendation search (issue 6 target: a 70B pre-training search over the whole catalog,
up to 4,096 GPUs, within 1 s on a 2-core machine).

    PYTHONPATH=src python benchmarks/bench_recommend.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import statistics
import time

CASES = {
    "70B pre-training, whole catalog, <=4096 GPUs": (
        {"model": "llama-3.1-70b", "task": "train", "train": {"seq_len": 8192, "tokens": 1.5e13}}, {}),
    "70B pre-training (1T tokens), 30-day deadline": (
        {"model": "llama-3.1-70b", "task": "train", "train": {"seq_len": 8192, "tokens": 1e12}},
        {"deadline_days": 30}),
    "8B fine-tune, method open, research-budget": (
        {"model": "llama-3.1-8b", "task": "finetune", "train": {"seq_len": 4096, "tokens": 1e9}},
        {"preset": "research-budget"}),
    "70B serving, engine open": (
        {"model": "llama-3.1-70b", "task": "infer", "infer": {"concurrency": 32}}, {"tokens_per_s": 5000}),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from gpuplan.search import recommend
    recommend(*CASES["70B serving, engine open"][:1], progress=False)      # warm the catalog caches
    print(f"{'case':<46} {'wall s (median)':>16} {'evaluations':>12} {'cand/s':>10} {'plans':>6}")
    for name, (scn, kw) in CASES.items():
        times, rec = [], None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            rec = recommend(scn, progress=False, **kw)
            times.append(time.perf_counter() - t0)
        st = rec.stats
        n = st["memory_evaluations"] + st["speed_evaluations"]
        wall = statistics.median(times)
        print(f"{name:<46} {wall:>16.3f} {n:>12,} {n / wall:>10,.0f} {len(rec.plans):>6}")


if __name__ == "__main__":
    main()
