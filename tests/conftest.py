import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VALIDATION = ROOT / "validation" / "public"
os.environ.setdefault("GPUPLAN_OFFLINE", "1")


@pytest.fixture
def validation_dir() -> Path:
    return VALIDATION
