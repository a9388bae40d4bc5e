"""The page in a real browser: headless Chromium (Debian package `chromium`) driven by Playwright.

Starts the server on a free loopback port, fills the form, runs an estimate, a serving plan and a
recommendation, checks what is rendered (numbers, charts, launch files), checks that the URL holds
the state (a shared link restores the form and re-runs it), and takes screenshots: into a temporary
folder, or into $GPUPLAN_DOC_IMAGES when scripts/make_doc_images.py regenerates docs/img.
Skipped only when /usr/bin/chromium or the playwright package is missing.
"""
from __future__ import annotations

import os
import re
import socket
import threading
import time
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("GPUPLAN_CHROMIUM", "/usr/bin/chromium")
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)", allow_module_level=True)
pytest.importorskip("playwright.sync_api", reason="pip install playwright")
pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from playwright.sync_api import expect, sync_playwright  # noqa: E402

from gpuplan.web import create_app  # noqa: E402

SHOTS_ENV = "GPUPLAN_DOC_IMAGES"     # set by scripts/make_doc_images.py; tests never write tracked files
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 60_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    app = create_app(allowed_hosts=("127.0.0.1", "localhost"))
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not srv.started:
        if time.time() > deadline or not thread.is_alive():
            pytest.fail("uvicorn did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="module")
def shots_dir(tmp_path_factory) -> Path:
    return Path(os.environ[SHOTS_ENV]) if os.environ.get(SHOTS_ENV) else tmp_path_factory.mktemp("shots")


@pytest.fixture()
def page(browser, server, shots_dir):
    ctx = browser.new_context(viewport={"width": 1440, "height": 1000}, device_scale_factor=1,
                              base_url=server)
    try:
        ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=server)
    except Exception:   # older Chromium builds: the copy button falls back to execCommand
        pass
    pg = ctx.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    problems: list[str] = []
    pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    outside: list[str] = []
    pg.on("request", lambda r: outside.append(r.url) if not r.url.startswith((server, "data:", "about:")) else None)
    pg.problems = problems          # type: ignore[attr-defined]
    pg.outside = outside            # type: ignore[attr-defined]
    pg.shots_dir = shots_dir        # type: ignore[attr-defined]
    yield pg
    ctx.close()


def _ready(pg) -> None:
    pg.wait_for_selector("body[data-ready='1']")


def _shot(pg, name: str) -> None:
    pg.shots_dir.mkdir(parents=True, exist_ok=True)
    pg.evaluate("window.scrollTo(0, 0)")
    pg.screenshot(path=str(pg.shots_dir / f"web-{name}.png"), full_page=True)


def _task(pg, value: str) -> None:
    pg.locator(f"input[name=task][value={value}] + span").click()


def _mode(pg, value: str) -> None:
    pg.locator(f"input[name=mode][value={value}] + span").click()


def _number(text: str) -> float:
    m = re.search(r"[\d.,]+", text)
    assert m, text
    return float(m.group(0).replace(",", ""))


def _clean(pg) -> None:
    assert not pg.problems, pg.problems
    assert not pg.outside, f"the page requested outside resources: {pg.outside}"


def test_estimate_training_plan(page, server):
    page.goto("/")
    _ready(page)
    # the datalist is filled from /api/models and the GPU list from /api/gpus
    assert page.locator("#model-list option").count() > 20
    assert page.locator("#gpu option").count() > 20
    page.fill("#model", "llama-3.1-8b")
    expect(page.locator("#model-info")).to_contain_text("8.03B params")
    _task(page, "train")
    page.select_option("#gpu", "h100-sxm")
    page.fill("#count", "8")
    page.select_option("#zero", "3")
    page.fill("#seq_len", "4096")
    page.fill("#micro_batch", "1")
    page.select_option("#recompute", "selective")
    page.fill("#tokens", "1e11")
    page.select_option("#launch_engine", "torchrun")
    page.click("#run")
    page.wait_for_selector("#summary")
    summary = page.locator("#summary")
    expect(summary).to_contain_text("llama-3.1-8b")
    expect(summary).to_contain_text("8× NVIDIA H100")
    peak = page.locator("[data-kpi=peak] .value").inner_text()
    assert "GiB" in peak and _number(peak) > 1
    assert page.locator("#fit-badge").inner_text() in ("fits", "does not fit")
    assert "ms" in page.locator("[data-kpi=step] .value").inner_text() or "s" in page.locator("[data-kpi=step] .value").inner_text()
    assert "%" in page.locator("[data-kpi=mfu] .value").inner_text()
    assert page.locator("[data-kpi=usd_hour] .value").inner_text().startswith("$")
    assert page.locator("[data-kpi=usd_total] .value").inner_text().startswith("$")
    # memory chart: one rect per non-zero component plus the capacity line
    rects = page.locator("#memory-chart rect[data-component]")
    assert rects.count() >= 3
    assert page.locator("#memory-chart line.cap").count() == 1
    assert page.locator("#fit-limits .chip").count() >= 1
    # launch files with a copy button
    page.wait_for_selector("#launch-code")
    assert page.locator(".tab").count() >= 1
    code = page.locator("#launch-code").inner_text()
    assert "torchrun" in code and "gpuplan" in code
    page.click("#copy-file")
    expect(page.locator("#copy-file")).to_have_text("copied ✓")
    _shot(page, "estimate")
    _clean(page)


def test_url_state_round_trip(page, browser, server):
    page.goto("/")
    _ready(page)
    page.fill("#model", "qwen2.5-7b")
    _task(page, "finetune")
    page.select_option("#gpu", "rtx-4090")
    page.fill("#count", "2")
    page.select_option("#method", "qlora")
    page.fill("#seq_len", "1024")
    page.click("#run")
    page.wait_for_selector("#summary")
    peak = page.locator("[data-kpi=peak] .value").inner_text()
    url = page.url
    assert "model=qwen2.5-7b" in url and "task=finetune" in url and "gpu=rtx-4090" in url
    assert "method=qlora" in url and "seq_len=1024" in url and "count=2" in url
    # the shared link, opened fresh, restores the form and runs the plan
    other = browser.new_context(viewport={"width": 1440, "height": 1000})
    p2 = other.new_page()
    p2.set_default_timeout(TIMEOUT_MS)
    p2.goto(url)
    p2.wait_for_selector("#summary")
    assert p2.input_value("#model") == "qwen2.5-7b"
    assert p2.input_value("#gpu") == "rtx-4090"
    assert p2.input_value("#count") == "2"
    assert p2.input_value("#method") == "qlora"
    assert p2.locator("input[name=task][value=finetune]").is_checked()
    assert p2.locator("[data-kpi=peak] .value").inner_text() == peak
    other.close()
    # back button restores the previous plan
    page.fill("#seq_len", "2048")
    page.click("#run")
    page.wait_for_function("() => location.search.includes('seq_len=2048')")
    page.go_back()
    page.wait_for_function("() => location.search.includes('seq_len=1024')")
    expect(page.locator("#seq_len")).to_have_value("1024")
    _clean(page)


def test_serving_plan_with_curve(page):
    page.goto("/")
    _ready(page)
    page.fill("#model", "llama-3.1-8b")
    _task(page, "infer")
    page.select_option("#gpu", "h100-sxm")
    page.select_option("#weights", "fp8")
    page.fill("#concurrency", "32")
    page.select_option("#launch_engine", "vllm")
    page.click("#run")
    page.wait_for_selector("#serving-chart")
    assert "tok/s" in page.locator("[data-kpi=throughput] .value").inner_text()
    assert page.locator("[data-kpi=tpot] .value").inner_text() != "–"
    assert page.locator("#serving-chart circle").count() >= 8
    assert page.locator("#latency-chart circle").count() >= 16
    assert page.locator("#serving-table tbody tr").count() >= 8
    page.wait_for_selector("#launch-code")
    assert "vllm" in page.locator("#launch-code").inner_text()
    assert page.locator("#memory-chart rect[data-component=kv_cache]").count() == 1
    _shot(page, "serving")
    _clean(page)


def test_serving_under_load_charts(page):
    # a request rate on the serving form draws the simulator's latency percentiles and goodput versus
    # rate (8 sweep points from 10 % to 100 % of the capacity) and its percentile table
    page.goto("/")
    _ready(page)
    page.fill("#model", "llama-3.1-8b")
    _task(page, "infer")
    page.select_option("#gpu", "h100-sxm")
    page.fill("#load_rate", "5")
    page.click("#run")
    page.wait_for_selector("#load-latency-chart", timeout=120_000)
    assert page.locator("#load-latency-chart circle").count() == 4 * 8
    assert page.locator("#load-goodput-chart circle").count() >= 8
    assert page.locator("#load-table tbody tr").count() == 4
    page.wait_for_function("() => location.search.includes('load_rate=5')")
    _clean(page)


def test_recommendation(page):
    page.goto("/")
    _ready(page)
    _mode(page, "recommend")
    page.fill("#model", "llama-3.1-8b")
    _task(page, "finetune")
    page.select_option("#gpu", "")
    page.select_option("#method", "lora")
    page.fill("#max_gpus", "8")
    page.fill("#top", "8")
    page.select_option("#launch_engine", "hf")
    expect(page.locator("#run")).to_have_text("Recommend hardware")
    page.click("#run")
    page.wait_for_selector("#plans-table")
    rows = page.locator("#plans-table tbody tr")
    assert 1 <= rows.count() <= 8
    assert page.locator("#pareto-chart circle").count() >= 1
    assert page.locator("#recommend-view").inner_text().count("$") >= 2
    page.wait_for_selector("#launch-code")      # launch files of the best plan
    url = page.url
    assert "mode=recommend" in url and "max_gpus=8" in url
    _shot(page, "recommend")
    # open the best plan: the form switches to an estimate of exactly that plan
    rows.first.locator("button.use-plan").click()
    page.wait_for_selector("#summary")
    assert page.locator("input[name=mode][value=estimate]").is_checked()
    assert page.input_value("#gpu") != ""
    _clean(page)


def test_errors_are_explained(page):
    page.goto("/")
    _ready(page)
    page.fill("#model", "/etc/passwd")
    page.select_option("#gpu", "h100-sxm")
    page.click("#run")
    err = page.locator("#error")
    expect(err).to_be_visible()
    expect(err).to_contain_text("never reads files")
    page.fill("#model", "lama-3.1-8b")
    page.click("#run")
    expect(err).to_contain_text("llama-3.1-8b")      # a close match, clickable
    _shot(page, "error")
    err.locator("a", has_text="llama-3.1-8b").first.click()
    page.wait_for_selector("#summary")
    expect(err).to_be_hidden()
    expect(page.locator("#model-info")).to_contain_text("params")
    # console errors from the failed requests (HTTP 400) are expected here; nothing else
    assert all("400" in p for p in page.problems), page.problems
    assert not page.outside
