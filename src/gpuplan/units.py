"""Unit constants. Inside gpuplan every number is plain SI (bytes, seconds, FLOP/s, W, USD);
the unit is in the variable name. Conversion happens only at the edges (CLI, report, CSV load).
GB (1e9) and GiB (2**30) are never mixed."""
from __future__ import annotations

KB, MB, GB, TB = 1e3, 1e6, 1e9, 1e12
KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40
TFLOPS = 1e12
HOUR_S = 3600.0
DAY_S = 86400.0


def fmt_bytes(n: float | None, unit: str = "GiB") -> str:
    if n is None:
        return "-"
    div = {"GiB": GiB, "MiB": MiB, "GB": GB, "TiB": TiB}[unit]
    return f"{n / div:,.2f} {unit}"


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    if s < 120:
        return f"{s:.2f} s"
    if s < 2 * 3600:
        return f"{s / 60:.1f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def fmt_count(n: float | None) -> str:
    if n is None:
        return "-"
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.2f}{suffix}"
    return f"{n:.0f}"
