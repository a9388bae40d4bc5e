"""Charts: hand-written SVG is well-formed and carries the series; HTML embeds it; PNG needs matplotlib."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.estimate.results import PerformanceEstimate
from gpuplan.plot import write_plot

SVG = "{http://www.w3.org/2000/svg}"

CURVE = [
    {"concurrency": 1, "batch": 1, "limited_by": "concurrency", "fits": True, "ttft_s": 0.05, "tpot_s": 0.008,
     "output_tokens_per_s": 120.0},
    {"concurrency": 16, "batch": 16, "limited_by": "concurrency", "fits": True, "ttft_s": 0.09, "tpot_s": 0.011,
     "output_tokens_per_s": 1400.0},
    {"concurrency": 256, "batch": 200, "limited_by": "kv_cache", "fits": True, "ttft_s": 4.0, "tpot_s": 0.04,
     "output_tokens_per_s": 5000.0},
    {"concurrency": 512, "batch": 0, "limited_by": "memory", "fits": False, "ttft_s": None, "tpot_s": None,
     "output_tokens_per_s": 0.0},
]
TRAIN = PerformanceEstimate(step_time_s=2.0, tokens_per_s_per_gpu=3000.0, mfu=0.41, hfu=0.41,
                            breakdown={"compute": 1.5, "exposed_comm": 0.3, "bubble": 0.15, "offload": 0.0,
                                       "optimizer": 0.05, "compute_matmul": 1.2})


def _series(root):
    return {el.get("id") for el in root.iter() if el.get("class") in ("series", "segment")}


def test_serving_svg_well_formed_with_three_series(tmp_path):
    p = write_plot(tmp_path / "curve.svg", curve=CURVE)
    root = ET.parse(p).getroot()
    assert root.tag == SVG + "svg"
    assert {"series-throughput", "series-ttft", "series-tpot"} <= _series(root)
    pts = next(el for el in root.iter(SVG + "polyline") if el.get("id") == "series-throughput").get("points").split()
    assert len(pts) == 3                     # the point that does not fit is left out
    assert "kv_cache" in ET.tostring(root, encoding="unicode")


def test_training_svg_stacked_bar_segments_sum_to_step(tmp_path):
    p = write_plot(tmp_path / "train.svg", perf=TRAIN)
    root = ET.parse(p).getroot()
    segs = [el for el in root.iter(SVG + "rect") if el.get("class") == "segment"]
    assert {s.get("id") for s in segs} == {"seg-compute", "seg-exposed_comm", "seg-bubble", "seg-optimizer"}
    assert sum(float(s.get("data-seconds")) for s in segs) == pytest.approx(2.0)
    widths = sum(float(s.get("width")) for s in segs)
    frame = next(el for el in root.iter(SVG + "rect") if el.get("fill") == "none")
    assert widths == pytest.approx(float(frame.get("width")), rel=1e-3)


def test_html_embeds_the_svg(tmp_path):
    p = write_plot(tmp_path / "curve.html", curve=CURVE)
    text = p.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    svg = text[text.index("<svg"):text.index("</svg>") + 6]
    assert "series-tpot" in ET.tostring(ET.fromstring(svg), encoding="unicode")


def test_serving_breakdown_and_pareto(tmp_path):
    perf = PerformanceEstimate(ttft_s=0.1, tpot_s=0.01, output_tokens_per_s=900.0,
                               breakdown={"prefill": 0.09, "decode_step": 0.01, "tp_comm": 0.0})
    root = ET.parse(write_plot(tmp_path / "s.svg", perf=perf)).getroot()
    assert {"bar-prefill", "bar-decode_step"} <= _series(root)
    pts = [(10.0, 3600.0, "8x h100", True), {"x": 5.0, "y": 7200.0, "label": "4x h100", "front": True},
           (20.0, 4000.0, "dominated", False)]
    root = ET.parse(write_plot(tmp_path / "p.svg", pareto=pts)).getroot()
    assert "series-front" in _series(root)


def test_bad_extension_and_nothing_to_draw(tmp_path):
    with pytest.raises(GpuplanError):
        write_plot(tmp_path / "x.pdf", curve=CURVE)
    with pytest.raises(GpuplanError):
        write_plot(tmp_path / "x.svg")


def test_png_needs_matplotlib(tmp_path):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        with pytest.raises(GpuplanError, match="pip install"):
            write_plot(tmp_path / "c.png", curve=CURVE)
    else:
        p = write_plot(tmp_path / "c.png", curve=CURVE)
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_real_serving_curve_plots(tmp_path):
    from gpuplan.estimate.speed import serving_curve
    from gpuplan.models import get_model
    from gpuplan.scenario import scenario_from_dict
    from gpuplan.hardware import get_gpu
    scn = scenario_from_dict({"model": "llama-3.1-8b", "task": "infer", "hardware": {"gpu": "h100-sxm", "count": 1},
                              "infer": {"engine": "vllm", "prompt_len": 1024, "output_len": 256}})
    curve = serving_curve(scn, get_model("llama-3.1-8b"), get_gpu("h100-sxm"), [1, 4, 16, 64, 256, 1024])
    root = ET.parse(write_plot(tmp_path / "real.svg", curve=curve)).getroot()
    assert {"series-throughput", "series-ttft", "series-tpot"} <= _series(root)
