"""The library's front door. Every whole-plan answer comes from the one pipeline (pipeline.py):
resolve → memory → performance(memory) → cost. CLI, web, search and launch are thin shells over it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from .estimate.results import MemoryEstimate
from .pipeline import Estimate, Resolved, as_scenario, evaluate, resolve, software_warnings
from .scenario import Scenario


def estimate_memory_for(r: Resolved) -> MemoryEstimate:
    from . import pipeline
    return pipeline.memory(r)


def estimate(scenario: Scenario | Mapping[str, Any] | str | Path, *, allow_hub: bool = True) -> Estimate:
    """Memory, performance and cost of one scenario (DESIGN §3.2)."""
    from . import pipeline
    return pipeline.evaluate(scenario, allow_hub=allow_hub)


__all__ = ["Estimate", "Resolved", "as_scenario", "estimate", "estimate_memory_for", "evaluate", "resolve",
           "software_warnings"]
