"""Regenerate the screenshots in docs/img from the browser tests (tests/test_web_browser.py).

    python scripts/make_doc_images.py [--out docs/img]

The test suite itself writes its screenshots to a temporary folder (tests never write tracked files);
this script runs the same tests with GPUPLAN_DOC_IMAGES pointing at the docs folder. Needs Chromium
(/usr/bin/chromium or $GPUPLAN_CHROMIUM) and the playwright package, like the tests.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"), help="folder for the PNG files (default docs/img)")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GPUPLAN_DOC_IMAGES=str(out), PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p))
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "tests" / "test_web_browser.py"), "-q", "-p", "no:warnings",
           "-p", "no:cacheprovider", "-rs"]
    started = time.time()
    result = subprocess.run(cmd, cwd=ROOT, env=env)
    if result.returncode != 0:
        print(f"make_doc_images: the browser tests failed or were skipped (exit {result.returncode}); "
              f"see above.", file=sys.stderr)
        return result.returncode
    shots = sorted(p for p in out.glob("web-*.png") if p.stat().st_mtime >= started - 1)
    if not shots:
        print("make_doc_images: no screenshot was written (were the browser tests skipped? -rs above says why).",
              file=sys.stderr)
        return 1
    print(f"{len(shots)} screenshots in {out}: " + ", ".join(p.name for p in shots))
    return 0


if __name__ == "__main__":
    sys.exit(main())
