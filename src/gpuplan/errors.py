"""Error hierarchy. Every message says what failed, why, and how to fix it.

The CLI catches `GpuplanError` and prints its message (no traceback) with exit code 2.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable


class GpuplanError(Exception):
    """Base class: a problem with the user's input or environment that we can explain."""

    def __init__(self, what: str, why: str, fix: str = "", matches: Iterable[str] = ()):
        self.what, self.why, self.fix = what, why, fix
        self.matches = list(matches)
        super().__init__(self.message)

    @property
    def message(self) -> str:
        text = f"{self.what}: {self.why}"
        if self.matches:
            text += f" Close matches: {', '.join(self.matches)}."
        if self.fix:
            text += f" Fix: {self.fix}"
        return text


class InputError(GpuplanError):
    """A scenario field, flag or file is missing, malformed or out of range."""


class UnknownNameError(InputError):
    """A name (model, GPU, dtype, provider, ...) that is not in the vocabulary."""


class AmbiguousNameError(InputError):
    """A name that matches several entries; the candidates are listed."""


class UnsupportedError(GpuplanError):
    """A valid request that gpuplan (or the software stack) cannot do."""


class TimeLimitError(GpuplanError):
    """Work that ran past its time limit and stopped (the message says what was done and how to narrow it)."""


def install_hint(extra: str, packages: str = "") -> str:
    """How to install an optional extra. gpuplan is installed from a checkout (it is not on a package index
    yet), so the command is the checkout's: run in the gpuplan folder."""
    hint = f"from the gpuplan checkout: pip install '.[{extra}]'"
    return hint + (f" (or just: pip install {packages})" if packages else "")


class MissingExtraError(GpuplanError):
    """An optional dependency is not installed."""

    def __init__(self, feature: str, extra: str, package: str):
        packages = " ".join(p.strip() for p in package.replace(" and ", ",").split(",") if p.strip())
        super().__init__(
            f"{feature} needs the optional package '{package}'",
            "it is not installed.",
            install_hint(extra, packages) + ".",
        )


def close_matches(name: str, choices: Iterable[str], n: int = 5) -> list[str]:
    """Up to `n` entries of `choices` that look like `name` (case-insensitive)."""
    lowered = {c.lower(): c for c in choices}
    hits = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.5)
    contains = [c for k, c in lowered.items() if name.lower() in k and c not in hits]
    return ([lowered[h] for h in hits] + contains)[:n]
