"""Charts of the speed engine's answers: `gpuplan train|serve --plot FILE`.

    write_plot(path, *, curve=None, perf=None, pareto=None, overwrite=True) -> Path
    plot_path(arg, default_name) -> PlotTarget     the CLI's --plot argument: a file, or a folder

- serving (`curve`, the list `speed.serving_curve` returns): output throughput versus concurrency
  (left axis) with TTFT and TPOT on a second, logarithmic time axis (right);
- training (`perf`, a PerformanceEstimate with a step_time_s): one horizontal stacked bar of where
  the step's time goes (compute, exposed communication, bubble, offload, optimizer);
- serving without a curve: horizontal bars of the latency breakdown;
- `pareto`: cost versus time of candidate plans, log-log, the front highlighted. Points are
  (x, y, label[, on_front]) tuples or dicts with the same keys.

The format follows the file name: `.svg` is written by hand (no dependency), `.html` embeds that
SVG in a minimal page, `.png` needs matplotlib (the `plot` extra: `pip install '.[plot]'` in the checkout).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .errors import GpuplanError, InputError, MissingExtraError, install_hint

__all__ = ["write_plot", "render_svg", "plot_path", "PlotTarget"]
FORMATS = (".svg", ".html", ".htm", ".png")

W, H = 760, 440
ML, MR, MT, MB = 80, 90, 40, 60          # margins: left, right (second axis), top, bottom
COLORS = {"throughput": "#1f77b4", "ttft": "#d62728", "tpot": "#2ca02c", "goodput": "#9467bd"}
LOAD_SERIES = (("ttft_p50_s", "TTFT p50", "ttft", "6,3"), ("ttft_p99_s", "TTFT p99", "ttft", ""),
               ("tpot_p50_s", "TPOT p50", "tpot", "6,3"), ("tpot_p99_s", "TPOT p99", "tpot", ""))
STACK = (("compute", "#1f77b4"), ("host_wait", "#bcbd22"), ("exposed_comm", "#ff7f0e"), ("bubble", "#9467bd"),
         ("offload", "#8c564b"), ("optimizer", "#7f7f7f"))
TRAIN_LABELS = {"compute": "compute", "host_wait": "waiting for the host", "exposed_comm": "exposed communication",
                "bubble": "pipeline bubble", "offload": "offload", "optimizer": "optimizer step"}


@dataclass(frozen=True)
class PlotTarget:
    path: Path
    named: bool            # the user named this exact file (overwriting it is what they asked for)




def _log_time_axis(times: list[float], y0: float, y1: float):
    """(first decade, last decade, value -> y) of a log-scaled seconds axis spanning whole decades."""
    lt0 = math.floor(math.log10(min(times))) if times else -3
    lt1 = math.ceil(math.log10(max(times))) if times else 0
    if lt1 <= lt0:
        lt1 = lt0 + 1
    return lt0, lt1, lambda v: y0 - (math.log10(v) - lt0) / (lt1 - lt0) * (y0 - y1)

def _polyline(sid: str, label: str, xy: list, color: str, dash: str, r: float) -> list[str]:
    """One data series: the line and a dot per point."""
    d = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    return ([f'<polyline id="series-{sid}" class="series" data-label="{escape(label)}" points="{d}" '
             f'fill="none" stroke="{color}" stroke-width="2"{dash_attr}/>'] +
            [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{color}"/>' for x, y in xy])

def plot_path(arg: str | Path, default_name: str) -> PlotTarget:
    """Where `--plot ARG` writes: ARG itself when it names a file (in a folder that exists), else
    `default_name`.svg inside the folder ARG. A derived path never overwrites an existing file."""
    text = str(arg)
    p = Path(text)
    if p.is_dir() or text.endswith(("/", os.sep)):
        if not p.is_dir():
            raise InputError(f"--plot {text}", "this folder does not exist.", "create it first, or name a file.")
        target = p / f"{default_name}.svg"
        if target.exists():
            raise InputError(f"--plot {text}", f"would overwrite '{target}', which exists.",
                             f"name the file exactly (--plot {target}) to overwrite it, or choose another folder.")
        return PlotTarget(target, named=False)
    _check_target(p)
    return PlotTarget(p, named=True)


def _check_target(p: Path) -> None:
    """Refuse a chart path that cannot be written, before any work is done."""
    ext = p.suffix.lower()
    if ext not in FORMATS:
        raise InputError(f"--plot {p}", f"unknown chart format '{ext or '(none)'}'.",
                         "name the file .svg, .html or .png.")
    if ext == ".png" and not _have_matplotlib():
        raise MissingExtraError(f"--plot {p} (a PNG chart)", "plot", "matplotlib")
    parent = p.parent
    if not parent.is_dir():
        raise InputError(f"--plot {p}", f"the folder '{parent}' does not exist." if not parent.exists() else
                         f"'{parent}' is a file, not a folder.", "create the folder first, or choose another path.")
    if p.is_dir():
        raise InputError(f"--plot {p}", "is a folder.", "name a file ending .svg, .html or .png.")


def write_plot(path: str | Path, *, curve: Sequence[Mapping[str, Any]] | None = None, perf: Any = None,
               pareto: Iterable[Any] | None = None, overwrite: bool = True,
               load: Mapping[str, Any] | None = None) -> Path:
    """Write a chart of `curve` (serving), `perf` (training breakdown) or `pareto` to `path`
    (.svg, .html or .png) and return the path. With overwrite=False an existing file is an error."""
    p = Path(path)
    _check_target(p)
    if not overwrite and p.exists():
        raise InputError(f"--plot {p}", "exists and would be overwritten.",
                         "name that file exactly to overwrite it, or choose another path.")
    ext = p.suffix.lower()
    kind, data = ("load", _load_points(load)) if load is not None else _choose(curve, perf, pareto)
    if ext == ".png":
        _write_png(p, kind, data)
        return p
    svg = render_svg(kind, data)
    if ext in (".html", ".htm"):
        title = {"curve": "Serving throughput and latency", "train": "Training step time",
                 "serve": "Serving latency breakdown", "pareto": "Cost / time trade-off",
                 "load": "Serving under load: latency and goodput vs request rate"}[kind]
        text = ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>gpuplan: " + escape(title) +
                "</title></head>\n<body style=\"font-family:sans-serif\">\n<h1 style=\"font-size:18px\">"
                + escape(title) + "</h1>\n" + svg + "\n</body></html>\n")
    else:
        text = '<?xml version="1.0" encoding="UTF-8"?>\n' + svg + "\n"
    p.write_text(text, encoding="utf-8")
    return p


# ---- what to draw ----------------------------------------------------------------------------

def _choose(curve, perf, pareto) -> tuple[str, Any]:
    if curve:
        pts = [c for c in curve if c.get("fits", True) and c.get("output_tokens_per_s")]
        if not pts:
            raise InputError("plot", "no point of the serving curve fits in memory.", "use more or larger GPUs.")
        return "curve", pts
    if pareto is not None:
        pts = [_pareto_point(x) for x in pareto]
        pts = [q for q in pts if q[0] and q[1] and q[0] > 0 and q[1] > 0]
        if not pts:
            raise InputError("plot", "no plan has both a cost and a time.", "relax the constraints.")
        return "pareto", pts
    if perf is not None and getattr(perf, "breakdown", None):
        if getattr(perf, "step_time_s", None):
            return "train", perf
        return "serve", perf
    raise InputError("plot", "nothing to draw: no serving curve, time breakdown or plans.",
                     "run `gpuplan train` or `gpuplan serve` on a scenario that fits.")


def _load_points(load: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    pts = [p for p in (load.get("sweep") or []) if p.get("rate_per_s")]
    if not pts:
        raise InputError("plot", "the load simulation has no rate sweep to draw (a trace, or no capacity).",
                         "plot a Poisson or gamma load (--rate R).")
    return pts


def _pareto_point(x: Any) -> tuple[float, float, str, bool]:
    if isinstance(x, Mapping):
        return (x.get("x"), x.get("y"), str(x.get("label", "")), bool(x.get("front", True)))
    t = tuple(x)
    return (t[0], t[1], str(t[2]) if len(t) > 2 else "", bool(t[3]) if len(t) > 3 else True)


# ---- SVG --------------------------------------------------------------------------------------

def _fmt(v: float) -> str:
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e3:
        return f"{v / 1e3:.3g}k"
    return f"{v:.3g}"


def log_ticks(lo: float, hi: float, most: int = 8) -> list[float]:
    """Tick values for a log axis from lo to hi (both > 0): 1-2-5 steps of each decade, only the decades when
    that is too many, and the two ends when not even two steps fall inside (a narrow range)."""
    if not (lo > 0 and hi > lo):
        return [lo] if lo > 0 else []
    values = [m * 10.0 ** k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
              for m in (1, 2, 5)]
    inside = [v for v in values if lo <= v * (1 + 1e-12) and v <= hi * (1 + 1e-12)]
    if len(inside) > most:
        decades = [v for v in inside if math.log10(v) == round(math.log10(v))]
        inside = decades if len(decades) >= 2 else inside[::max(1, len(inside) // most + 1)]
    if len(inside) < 2:
        ends = [min(max(float(f"{v:.3g}"), lo), hi) for v in (lo, hi)]
        inside = sorted(set(ends + inside))
    return inside


def _fmt_s(v: float) -> str:
    if v >= 86400:
        return f"{v / 86400:.3g} d"
    if v >= 3600:
        return f"{v / 3600:.3g} h"
    if v >= 60:
        return f"{v / 60:.3g} min"
    if v >= 1:
        return f"{v:.3g} s"
    if v >= 1e-3:
        return f"{v * 1e3:.3g} ms"
    return f"{v * 1e6:.3g} µs"


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    e = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if m * e >= v:
            return m * e
    return 10 * e


def _svg_open(title: str) -> list[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
            f'font-family="sans-serif" font-size="11">',
            f'<rect width="{W}" height="{H}" fill="white"/>',
            f'<text x="{W / 2:.1f}" y="22" text-anchor="middle" font-size="14">{escape(title)}</text>']


def render_svg(kind: str, data: Any) -> str:
    """The chart as an SVG string (kind: curve | train | serve | pareto)."""
    return {"curve": _svg_curve, "train": _svg_train, "serve": _svg_serve, "pareto": _svg_pareto,
            "load": _svg_load}[kind](data)


def _svg_curve(pts: list[Mapping[str, Any]]) -> str:
    out = _svg_open("Serving: output throughput and latency vs concurrency")
    x0, y0, x1, y1 = ML, H - MB, W - MR, MT         # plot box (y grows downwards)
    conc = [float(p["concurrency"]) for p in pts]
    lx0, lx1 = math.log2(min(conc)), math.log2(max(conc))
    if lx1 - lx0 < 1e-9:
        lx0, lx1 = lx0 - 1, lx1 + 1
    X = lambda c: x0 + (math.log2(c) - lx0) / (lx1 - lx0) * (x1 - x0)  # noqa: E731
    tmax = _nice_max(max(float(p["output_tokens_per_s"]) for p in pts) * 1.05)
    Yl = lambda v: y0 - v / tmax * (y0 - y1)  # noqa: E731
    lt0, lt1, Yr = _log_time_axis([float(p[k]) for p in pts for k in ("ttft_s", "tpot_s") if p.get(k)], y0, y1)
    out.append(f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none" stroke="#333"/>')
    for i in range(6):   # left axis: throughput
        v = tmax * i / 5
        y = Yl(v)
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" fill="{COLORS["throughput"]}">{_fmt(v)}</text>')
    for e in range(lt0, lt1 + 1):   # right axis: time, log scale
        y = Yr(10.0 ** e)
        out.append(f'<text x="{x1 + 6}" y="{y + 4:.1f}" text-anchor="start">{escape(_fmt_s(10.0 ** e))}</text>')
    for c in conc:
        out.append(f'<text x="{X(c):.1f}" y="{y0 + 16}" text-anchor="middle">{int(c)}</text>')
    out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{H - 18}" text-anchor="middle">concurrency (requests in flight)</text>')
    out.append(f'<text transform="translate(18,{(y0 + y1) / 2:.1f}) rotate(-90)" text-anchor="middle" '
               f'fill="{COLORS["throughput"]}">output tokens/s</text>')
    out.append(f'<text transform="translate({W - 14},{(y0 + y1) / 2:.1f}) rotate(90)" text-anchor="middle">'
               f'latency (log scale)</text>')
    series = [("throughput", "output tokens/s", [(X(float(p["concurrency"])), Yl(float(p["output_tokens_per_s"])))
                                                 for p in pts], "")]
    for key, label, dash in (("ttft_s", "TTFT", "6,3"), ("tpot_s", "TPOT", "2,3")):
        xy = [(X(float(p["concurrency"])), Yr(float(p[key]))) for p in pts if p.get(key)]
        series.append((key[:4], label, xy, dash))
    for sid, label, xy, dash in series:
        out += _polyline(sid, label, xy, COLORS[sid], dash, 3)
    for i, (sid, label, _, dash) in enumerate(series):   # legend
        lx, ly = x0 + 10 + i * 150, y1 + 14
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 24}" y2="{ly}" stroke="{COLORS[sid]}" stroke-width="2"{dash_attr}/>')
        out.append(f'<text x="{lx + 30}" y="{ly + 4}">{escape(label)}</text>')
    limited = [p for p in pts if p.get("limited_by") not in (None, "concurrency")]
    if limited:
        p = limited[0]
        out.append(f'<text x="{x1 - 6}" y="{y0 - 8}" text-anchor="end" fill="#555">batch capped at '
                   f'{p.get("batch")} from concurrency {p["concurrency"]} ({escape(str(p["limited_by"]))})</text>')
    out.append("</svg>")
    return "\n".join(out)


def _svg_load(pts: list[Mapping[str, Any]]) -> str:
    """Latency percentiles (right, log scale) and requests/s served and goodput (left) versus the
    arrival rate, from the load simulator's sweep up to the capacity."""
    out = _svg_open("Serving under load: latency percentiles and goodput vs request rate")
    x0, y0, x1, y1 = ML, H - MB, W - MR, MT
    rates = [float(p["rate_per_s"]) for p in pts]
    xmax = _nice_max(max(rates) * 1.02)
    X = lambda r: x0 + r / xmax * (x1 - x0)  # noqa: E731
    rmax = _nice_max(max(max(rates), max(float(p.get("requests_per_s") or 0) for p in pts)) * 1.05)
    Yl = lambda v: y0 - v / rmax * (y0 - y1)  # noqa: E731
    lt0, lt1, Yr = _log_time_axis([float(p[k]) for p in pts for k, *_ in LOAD_SERIES if p.get(k)], y0, y1)
    out.append(f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none" stroke="#333"/>')
    for i in range(6):
        v = rmax * i / 5
        y = Yl(v)
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" fill="{COLORS["goodput"]}">{_fmt(v)}</text>')
        xv = xmax * i / 5
        out.append(f'<text x="{X(xv):.1f}" y="{y0 + 16}" text-anchor="middle">{_fmt(xv)}</text>')
    for e in range(lt0, lt1 + 1):
        y = Yr(10.0 ** e)
        out.append(f'<text x="{x1 + 6}" y="{y + 4:.1f}" text-anchor="start">{escape(_fmt_s(10.0 ** e))}</text>')
    out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{H - 18}" text-anchor="middle">arrival rate (requests/s, '
               f'Poisson; the last point is the capacity)</text>')
    out.append(f'<text transform="translate(18,{(y0 + y1) / 2:.1f}) rotate(-90)" text-anchor="middle" '
               f'fill="{COLORS["goodput"]}">requests/s served, goodput</text>')
    out.append(f'<text transform="translate({W - 14},{(y0 + y1) / 2:.1f}) rotate(90)" text-anchor="middle">'
               f'latency (log scale)</text>')
    series = [("served", "requests/s served", "throughput", "",
               [(X(float(p["rate_per_s"])), Yl(float(p["requests_per_s"]))) for p in pts if p.get("requests_per_s")])]
    if any(p.get("goodput_requests_per_s") is not None for p in pts):
        series.append(("goodput", "goodput (meets SLO)", "goodput", "", [
            (X(float(p["rate_per_s"])), Yl(float(p["goodput_requests_per_s"]))) for p in pts
            if p.get("goodput_requests_per_s") is not None]))
    for key, label, color, dash in LOAD_SERIES:
        series.append((key.replace("_s", ""), label, color, dash,
                       [(X(float(p["rate_per_s"])), Yr(float(p[key]))) for p in pts if p.get(key)]))
    for i, (sid, label, color, dash, xy) in enumerate(series):
        c = COLORS[color]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out += _polyline(sid, label, xy, c, dash, 2.5)
        lx, ly = x0 + 10 + (i % 3) * 160, y1 + 14 + (i // 3) * 14
        out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 24}" y2="{ly}" stroke="{c}" stroke-width="2"{dash_attr}/>')
        out.append(f'<text x="{lx + 30}" y="{ly + 4}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _svg_train(perf: Any) -> str:
    bd = perf.breakdown
    step = float(perf.step_time_s)
    out = _svg_open(f"Training: where one step's {_fmt_s(step)} goes")
    x0, x1 = ML + 40, W - 40
    y, hbar = 110, 60
    out.append(f'<rect x="{x0}" y="{y}" width="{x1 - x0}" height="{hbar}" fill="none" stroke="#333"/>')
    x = float(x0)
    for key, color in STACK:
        v = float(bd.get(key, 0.0) or 0.0)
        if v <= 0:
            continue
        w = v / step * (x1 - x0)
        out.append(f'<rect id="seg-{key}" class="segment" data-seconds="{v:.6g}" x="{x:.1f}" y="{y}" '
                   f'width="{w:.1f}" height="{hbar}" fill="{color}"><title>{escape(TRAIN_LABELS[key])}: '
                   f'{escape(_fmt_s(v))}</title></rect>')
        if w > 50:
            out.append(f'<text x="{x + w / 2:.1f}" y="{y + hbar / 2 + 4}" text-anchor="middle" fill="white">'
                       f'{100 * v / step:.0f} %</text>')
        x += w
    for i in range(5):
        t = step * i / 4
        xt = x0 + (x1 - x0) * i / 4
        out.append(f'<line x1="{xt:.1f}" y1="{y + hbar}" x2="{xt:.1f}" y2="{y + hbar + 5}" stroke="#333"/>')
        out.append(f'<text x="{xt:.1f}" y="{y + hbar + 18}" text-anchor="middle">{escape(_fmt_s(t))}</text>')
    ly = y + hbar + 60
    # the host wait is listed only where the step has one (an eager HF step its host issues slower than the GPU runs)
    for i, (key, color) in enumerate(kc for kc in STACK if kc[0] != "host_wait" or bd.get("host_wait")):
        v = float(bd.get(key, 0.0) or 0.0)
        yy = ly + i * 20
        out.append(f'<rect x="{x0}" y="{yy - 10}" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="{x0 + 20}" y="{yy}">{escape(TRAIN_LABELS[key])}: {escape(_fmt_s(v)) if v > 0 else "0"}'
                   f' ({100 * v / step:.1f} %)</text>')
    extra = []
    if getattr(perf, "tokens_per_s_per_gpu", None):
        extra.append(f"{perf.tokens_per_s_per_gpu:,.0f} tokens/s per GPU")
    if getattr(perf, "mfu", None):
        extra.append(f"MFU {100 * perf.mfu:.1f} %")
    if extra:
        out.append(f'<text x="{x0}" y="{y - 20}">{escape(" · ".join(extra))}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _svg_serve(perf: Any) -> str:
    items = [(k, float(v)) for k, v in perf.breakdown.items() if v and float(v) > 0]
    out = _svg_open("Serving: latency breakdown (one decode step and one prefill)")
    x0, x1 = ML + 70, W - 60
    vmax = max((v for _, v in items), default=1.0)
    for i, (k, v) in enumerate(items):
        y = MT + 30 + i * 34
        w = v / vmax * (x1 - x0)
        out.append(f'<text x="{x0 - 8}" y="{y + 15}" text-anchor="end">{escape(k)}</text>')
        out.append(f'<rect id="bar-{escape(k)}" class="segment" data-seconds="{v:.6g}" x="{x0}" y="{y}" '
                   f'width="{max(w, 1):.1f}" height="22" fill="#1f77b4"/>')
        out.append(f'<text x="{x0 + max(w, 1) + 6:.1f}" y="{y + 15}">{escape(_fmt_s(v))}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _svg_pareto(pts: list[tuple[float, float, str, bool]]) -> str:
    out = _svg_open("Plans: cost vs time (log-log; the Pareto front in red)")
    x0, y0, x1, y1 = ML, H - MB, W - 40, MT
    lx = [math.log10(p[0]) for p in pts]
    ly = [math.log10(p[1]) for p in pts]
    a0, a1 = min(lx) - 0.05, max(lx) + 0.05
    b0, b1 = min(ly) - 0.05, max(ly) + 0.05
    X = lambda v: x0 + (math.log10(v) - a0) / (a1 - a0) * (x1 - x0)  # noqa: E731
    Y = lambda v: y0 - (math.log10(v) - b0) / (b1 - b0) * (y0 - y1)  # noqa: E731
    out.append(f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none" stroke="#333"/>')
    front = sorted((p for p in pts if p[3]), key=lambda p: p[0])
    if len(front) > 1:
        out.append('<polyline id="series-front" class="series" points="' +
                   " ".join(f"{X(p[0]):.1f},{Y(p[1]):.1f}" for p in front) + '" fill="none" stroke="#d62728"/>')
    for c, t, label, on in pts:
        out.append(f'<circle cx="{X(c):.1f}" cy="{Y(t):.1f}" r="4" fill="{"#d62728" if on else "#999"}">'
                   f'<title>{escape(label)}</title></circle>')
        if label:
            out.append(f'<text x="{X(c) + 6:.1f}" y="{Y(t) - 6:.1f}" font-size="9">{escape(label[:40])}</text>')
    for v in log_ticks(10 ** a0, 10 ** a1):
        out.append(f'<line class="tick-x" x1="{X(v):.1f}" y1="{y0}" x2="{X(v):.1f}" y2="{y0 + 4}" stroke="#333"/>')
        out.append(f'<text class="tick-x" x="{X(v):.1f}" y="{y0 + 16}" text-anchor="middle" font-size="10">'
                   f'{_fmt(v)}</text>')
    for v in log_ticks(10 ** b0, 10 ** b1):
        out.append(f'<text class="tick-y" x="{x0 - 6}" y="{Y(v) + 3:.1f}" text-anchor="end" font-size="10">'
                   f'{_fmt(v)}</text>')
    out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{H - 18}" text-anchor="middle">cost</text>')
    out.append(f'<text transform="translate(18,{(y0 + y1) / 2:.1f}) rotate(-90)" text-anchor="middle">time</text>')
    out.append("</svg>")
    return "\n".join(out)


# ---- PNG (matplotlib) --------------------------------------------------------------------------

def _have_matplotlib() -> bool:
    """Whether matplotlib can be imported, without importing it (checked before any work is done)."""
    import importlib.util
    import sys
    if "matplotlib" in sys.modules:
        return sys.modules["matplotlib"] is not None
    return importlib.util.find_spec("matplotlib") is not None


def _write_png(path: Path, kind: str, data: Any) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise GpuplanError(f"--plot {path}", "PNG charts need matplotlib, which is not installed.",
                           install_hint("plot", "matplotlib") + "; or write .svg / .html, "
                           "which need nothing.") from None
    fig, ax = plt.subplots(figsize=(9, 5))
    if kind == "curve":
        c = [p["concurrency"] for p in data]
        ax.plot(c, [p["output_tokens_per_s"] for p in data], "o-", color=COLORS["throughput"], label="output tokens/s")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel("output tokens/s")
        ax2 = ax.twinx()
        for key, label, style in (("ttft_s", "TTFT", "s--"), ("tpot_s", "TPOT", "^:")):
            xs = [p["concurrency"] for p in data if p.get(key)]
            ax2.plot(xs, [p[key] for p in data if p.get(key)], style, color=COLORS[key[:4]], label=label)
        ax2.set_yscale("log")
        ax2.set_ylabel("latency (s)")
        lines = ax.get_legend_handles_labels()
        lines2 = ax2.get_legend_handles_labels()
        ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper left")
        ax.set_title("Serving: output throughput and latency vs concurrency")
    elif kind == "load":
        r = [p["rate_per_s"] for p in data]
        ax.plot(r, [p["requests_per_s"] for p in data], "o-", color=COLORS["throughput"], label="requests/s served")
        if any(p.get("goodput_requests_per_s") is not None for p in data):
            ax.plot(r, [p["goodput_requests_per_s"] for p in data], "o-", color=COLORS["goodput"], label="goodput")
        ax.set_xlabel("arrival rate (requests/s)")
        ax.set_ylabel("requests/s")
        ax2 = ax.twinx()
        for key, label, color, dash in LOAD_SERIES:
            ax2.plot(r, [p[key] for p in data], "--" if dash else "-", color=COLORS[color], label=label)
        ax2.set_yscale("log")
        ax2.set_ylabel("latency (s)")
        lines, lines2 = ax.get_legend_handles_labels(), ax2.get_legend_handles_labels()
        ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper left")
        ax.set_title("Serving under load: latency percentiles and goodput vs request rate")
    elif kind == "train":
        left = 0.0
        for key, color in STACK:
            v = float(data.breakdown.get(key, 0.0) or 0.0)
            if v > 0:
                ax.barh([0], [v], left=left, color=color, label=TRAIN_LABELS[key])
                left += v
        ax.set_yticks([])
        ax.set_xlabel("seconds per step")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=5)
        ax.set_title(f"Training: where one step's {_fmt_s(float(data.step_time_s))} goes")
    elif kind == "serve":
        items = [(k, float(v)) for k, v in data.breakdown.items() if v and float(v) > 0]
        ax.barh([k for k, _ in items], [v for _, v in items], color="#1f77b4")
        ax.set_xlabel("seconds")
        ax.set_title("Serving: latency breakdown")
    else:
        for c, t, label, on in data:
            ax.scatter(c, t, color="#d62728" if on else "#999")
            if label:
                ax.annotate(label[:40], (c, t), fontsize=7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("cost")
        ax.set_ylabel("time")
        ax.set_title("Plans: cost vs time")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
