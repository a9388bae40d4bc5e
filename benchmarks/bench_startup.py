"""How long `gpuplan --help` takes from process start (target: well under 0.5 s).

Runs the console entry point N times in fresh interpreters and prints min/median wall time,
plus the heaviest imports (python -X importtime) of one run.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time


def main(n: int = 10) -> None:
    cmd = [sys.executable, "-c", "import sys; from gpuplan.cli import main; sys.argv=['gpuplan','--help']; main()"]
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    print(f"gpuplan --help: min {min(times) * 1e3:.0f} ms, median {statistics.median(times) * 1e3:.0f} ms over {n} runs")
    out = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], capture_output=True, text=True).stderr
    rows = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    print("heaviest cumulative imports (us):")
    for us, name in sorted(rows, reverse=True)[:8]:
        print(f"  {us:>8}  {name}")


if __name__ == "__main__":
    main()
