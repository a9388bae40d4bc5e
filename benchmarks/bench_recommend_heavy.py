"""Time the serving recommends that used to exceed the web server's 30 s limit (docs/recommend.md "Bounded
sizing"): wall and CPU seconds, load runs (finished / stopped on a certain SLO miss) and layouts whose sizing
stopped on a bound.

    PYTHONPATH=src python benchmarks/bench_recommend_heavy.py [--repeat 1]

On the 2-core development machine shared with other jobs (2026-12-05), before the bounds (6ee8ef7): 39.6 s,
64.4 s and 13.8 s of CPU (436, 908 and 240 runs); after: 8.2 s, 12.6 s and 4.7 s.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _open(name: str) -> dict:
    import yaml
    data = yaml.safe_load((ROOT / "examples" / name).read_text())
    data.pop("hardware", None)
    data.pop("parallel", None)
    return data


CASES = {
    "70B serve-load example, GPU open": (lambda: _open("serve-load-llama-70b.yaml"), {}),
    "70B EAGLE + summaries, GPU open": (lambda: _open("serve-disagg-spec-llama-70b.yaml"), {}),
    "DeepSeek-V3, 64 GPUs, 10 req/s": (lambda: {"model": "deepseek-v3", "task": "infer", "hardware": {"count": 64}},
                                       {"requests_per_s": 10}),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    from gpuplan.estimate import load as L
    from gpuplan.search import recommend
    runs: list[bool] = []
    real = L.simulate

    def counting(wl, policy, cost, **kw):
        res = real(wl, policy, cost, **kw)
        runs.append(res is None)
        return res
    L.simulate = counting
    recommend({"model": "qwen2.5-0.5b", "task": "infer", "hardware": {"gpu": "l4", "count": 1}}, progress=False)
    print(f"{'case':<36} {'wall s':>8} {'cpu s':>8} {'runs':>6} {'stopped':>8} {'not sized':>10} {'plans':>6}")
    for name, (scn, kw) in CASES.items():
        walls, cpus, rec = [], [], None
        for _ in range(args.repeat):
            runs.clear()
            t0, c0 = time.perf_counter(), time.process_time()
            rec = recommend(scn(), progress=False, **kw)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        print(f"{name:<36} {statistics.median(walls):>8.1f} {statistics.median(cpus):>8.1f} {len(runs):>6} "
              f"{sum(runs):>8} {rec.stats.get('sizing_abandoned', 0):>10} {len(rec.plans):>6}")


if __name__ == "__main__":
    main()
