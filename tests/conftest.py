import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VALIDATION = ROOT / "validation" / "public"
os.environ.setdefault("GPUPLAN_OFFLINE", "1")


@pytest.fixture
def validation_dir() -> Path:
    return VALIDATION

# Property tests and fuzzing must be deterministic: the same examples on every run and machine.
try:
    from hypothesis import settings

    settings.register_profile("deterministic", derandomize=True, deadline=None, print_blob=True)
    settings.load_profile("deterministic")
except ImportError:  # hypothesis is a test dependency; without it the property tests are not collected
    pass
