"""Workloads for the serving simulator: request lengths and arrival times, deterministic for a seed.

Lengths: fixed, uniform, normal (clipped at 1), log-normal (mean and coefficient of variation), or
a bundled synthetic shape (`chat`, `summarization`, `code`: log-normals whose parameters and
derivation are in docs/serving-load.md; no dataset is copied). Arrivals: Poisson at a rate, gamma
with a coefficient of variation (bursty when CV > 1), all at t = 0 (MLPerf Offline), closed-loop
clients (arrival times come from completions, so the simulator makes them), or a trace's own.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

# Synthetic shapes: (mean, cv, lo, hi) of input and output tokens, log-normal. See docs/serving-load.md.
SHAPES: dict[str, dict[str, tuple[float, float, int, int]]] = {
    # means: ShareGPT conversations as measured in the vLLM paper (Kwon et al., SOSP 2023, §6.1:
    # 161 input, 338 output tokens on average); spreads: assumed (cv 1.5 / 0.9)
    "chat": {"input": (161.0, 1.5, 4, 8192), "output": (338.0, 0.9, 4, 4096)},
    # long document in, short summary out (assumed round numbers, see docs)
    "summarization": {"input": (2000.0, 0.5, 128, 16384), "output": (200.0, 0.5, 16, 1024)},
    # code completion / editing with file context (assumed round numbers, see docs)
    "code": {"input": (1500.0, 0.8, 32, 16384), "output": (250.0, 1.0, 4, 4096)},
}
DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal") + tuple(SHAPES)


@dataclass(frozen=True)
class Lengths:
    """One length distribution (tokens). `mean` for fixed/normal/lognormal; `lo`/`hi` bound every
    draw (uniform draws integers in [lo, hi]); `std` for normal, `cv` for log-normal."""
    dist: str = "fixed"
    mean: float = 1.0
    std: float = 0.0
    cv: float = 0.0
    lo: int = 1
    hi: int = 1 << 30

    def sample(self, rng: np.random.Generator, n: int, which: str = "input") -> np.ndarray:
        d = self.dist
        if d == "fixed":
            x = np.full(n, self.mean)
        elif d == "uniform":
            x = rng.integers(self.lo, self.hi, size=n, endpoint=True).astype(float)
        elif d == "normal":
            x = rng.normal(self.mean, self.std, size=n)
        elif d in ("lognormal",) + tuple(SHAPES):
            mean, cv = self.mean, self.cv
            lo, hi = self.lo, self.hi
            if d in SHAPES:
                mean, cv, lo, hi = SHAPES[d][which]
            x = lognormal(rng, mean, cv, n)
            x = np.clip(x, lo, hi)
        else:  # the scenario schema names the choices; a library caller gets a plain error
            raise ValueError(f"unknown length distribution {d!r}; one of {', '.join(DISTRIBUTIONS)}")
        return np.clip(np.rint(x), max(1, self.lo), self.hi).astype(np.int64)


def lognormal(rng: np.random.Generator, mean: float, cv: float, n: int) -> np.ndarray:
    """Log-normal with the given mean and coefficient of variation: σ² = ln(1 + cv²), μ = ln(mean) − σ²/2."""
    if cv <= 0:
        return np.full(n, float(mean))
    s2 = math.log1p(cv * cv)
    return rng.lognormal(math.log(mean) - s2 / 2.0, math.sqrt(s2), size=n)


@dataclass(frozen=True)
class Arrivals:
    """kind: poisson | gamma | offline | closed | trace. `rate` (requests/s) for poisson and gamma,
    `cv` for gamma (1 = Poisson), `clients` for closed."""
    kind: str = "poisson"
    rate: float = 1.0
    cv: float = 1.0
    clients: int = 1

    def times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Arrival times (s, from 0) of n requests; closed loop: NaN (the simulator sets them)."""
        if self.kind == "offline":
            return np.zeros(n)
        if self.kind == "closed":
            return np.full(n, np.nan)
        if self.kind == "poisson":
            gaps = rng.exponential(1.0 / self.rate, size=n)
        elif self.kind == "gamma":
            k = 1.0 / (self.cv * self.cv)
            gaps = rng.gamma(k, 1.0 / (self.rate * k), size=n)
        else:
            raise ValueError(f"arrival kind {self.kind!r} has no generator (a trace gives its own times)")
        gaps[0] = 0.0            # the first request starts the clock
        return np.cumsum(gaps)


@dataclass(frozen=True)
class Workload:
    arrival_s: np.ndarray        # float, sorted; NaN for closed-loop clients
    input_tokens: np.ndarray     # int
    output_tokens: np.ndarray    # int
    clients: int = 0             # closed loop: this many clients, each sends its next request on completion

    @property
    def n(self) -> int:
        return int(len(self.input_tokens))


def make_workload(arrivals: Arrivals, n: int, input_len: Lengths, output_len: Lengths, seed: int = 0) -> Workload:
    """n requests; one numpy Generator seeded with `seed`, so the same arguments give the same workload."""
    rng = np.random.default_rng(seed)
    t = arrivals.times(rng, n)
    p = input_len.sample(rng, n, "input")
    o = output_len.sample(rng, n, "output")
    return Workload(t, p, o, arrivals.clients if arrivals.kind == "closed" else 0)


def trace_workload(rows: Sequence[Mapping[str, Any]]) -> Workload:
    """A workload from parsed trace rows (inputs.read_trace_file checks them): sorted by arrival time,
    the clock starting at the first arrival."""
    t = np.array([float(r["arrival_s"]) for r in rows])
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0]
    p = np.array([int(r["input_tokens"]) for r in rows], dtype=np.int64)[order]
    o = np.array([int(r["output_tokens"]) for r in rows], dtype=np.int64)[order]
    return Workload(t, p, o)
