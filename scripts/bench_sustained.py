"""Device check for the sustained clock under the board power limit (docs/speed.md §2.1 `clock_factor`): a dense
16-bit GEMM and an HF fine-tuning step run back to back for a while, their rate per second of wall time, beside the
SM clock and board power nvidia-smi reads every second. A short benchmark (ten products after a warm-up, the
usual method) runs before the power manager settles; this shows where it settles.

    PYTHONPATH=src python3 scripts/bench_sustained.py --seconds 40 --out "$OUT/sustained.csv"
"""
from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _smi_sampler(rows: list, stop: threading.Event, t0: float) -> None:
    q = "--query-gpu=clocks.sm,power.draw,temperature.gpu"
    while not stop.is_set():
        try:
            out = subprocess.run(["nvidia-smi", q, "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True, timeout=5).stdout.strip().split(", ")
            rows.append({"t_s": round(time.perf_counter() - t0, 2), "sm_mhz": out[0], "power_w": out[1],
                         "temp_c": out[2], "throttle": out[3] if len(out) > 3 else ""})
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
        stop.wait(1.0)


def _gemm_phase(torch, seconds: float, t0: float) -> list[dict]:
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    out, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        s = time.perf_counter()
        for _ in range(50):
            a @ b
        torch.cuda.synchronize()
        dt = time.perf_counter() - s
        out.append({"phase": "gemm_8192", "t_s": round(time.perf_counter() - t0, 2), "seconds": round(dt, 5),
                    "rate": round(50 * 2 * n ** 3 / dt / 1e12, 1), "unit": "TFLOP/s"})
    return out


def _train_phase(torch, seconds: float, t0: float) -> list[dict]:
    from gpuplan.local.measure import _build_model, _Cuda
    from gpuplan.scenario import scenario_from_dict
    scn = scenario_from_dict({"model": "llama-3.2-1b", "task": "finetune", "hardware": {"gpu": "h200-sxm"},
                              "train": {"method": "full", "precision": "bf16", "seq_len": 2048, "micro_batch": 8,
                                        "recompute": "none", "optimizer_impl": "fused"}})
    model, spec, _ = _build_model(torch, scn, torch.float32, _Cuda(torch))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    ids = torch.randint(0, spec.vocab_size, (8, 2048), device="cuda")
    out, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        s = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        dt = time.perf_counter() - s
        out.append({"phase": "hf_step_llama-3.2-1b_8x2048", "t_s": round(time.perf_counter() - t0, 2),
                    "seconds": round(dt, 5), "rate": round(8 * 2048 / dt), "unit": "tokens/s"})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=40.0, help="per phase")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("bench_sustained: no CUDA device", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    smi, stop = [], threading.Event()
    th = threading.Thread(target=_smi_sampler, args=(smi, stop, t0), daemon=True)
    th.start()
    rows = _gemm_phase(torch, a.seconds, t0) + _train_phase(torch, a.seconds, t0)
    stop.set()
    th.join(timeout=5)
    with open(a.out, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=["phase", "t_s", "seconds", "rate", "unit", "sm_mhz", "power_w", "temp_c",
                                           "throttle"], lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow(r)
        for r in smi:
            w.writerow({"phase": "nvidia-smi", **r})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
