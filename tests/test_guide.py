"""docs/guide.md answers the common questions with runnable commands; each command's output must still be
what the guide shows (`...` stands for one line that changes from run to run). Refresh with
`python scripts/update_guide.py`."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import update_guide  # noqa: E402

BLOCKS = update_guide.blocks((ROOT / "docs" / "guide.md").read_text(encoding="utf-8"))


def test_the_guide_answers_the_common_questions():
    text = (ROOT / "docs" / "guide.md").read_text(encoding="utf-8")
    for topic in ("train", "serve", "rules of thumb", "Consumer or data-centre", "Rent or buy", "NVLink or PCIe",
                  "AMD"):
        assert re.search(topic, text, re.I), topic
    assert len(BLOCKS) >= 8
    assert "docs/guide.md" in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("command,shown", BLOCKS, ids=[c for c, _ in BLOCKS])
def test_guide_output_is_current(command, shown):
    rc, lines = update_guide.run(command)
    assert rc in (0, 1, 2), command
    assert len(lines) == len(shown), f"{command}: {len(lines)} lines now, {len(shown)} in the guide " \
                                     "(python scripts/update_guide.py refreshes it)"
    for now, doc in zip(lines, shown):
        if doc != "...":
            assert now == doc, f"{command}: the guide shows\n{doc}\nbut it prints\n{now}"
