"""The one reader of software version strings (torch, transformers, vLLM releases and the data tables keyed by them).

A version is MAJOR.MINOR[.PATCH[.more]] with an optional leading `v` and PEP 440's suffixes (pre-release `rc1`,
`a0`, `b2`; post-release `.post1`; development build `.dev20250801`; local label `+cu130`, `+rocm6.4`, `+git1963fc8`):
the grammar of PEP 440's appendix B (packaging's VERSION_PATTERN) without the epoch, lower case as pip and torch
print it, and with at least a minor number. Its key is `Version(major, minor, patch)`; a suffix does not move it
(`0.6.3.post1`, `v0.6.3` and `0.6.3+cu124` are 0.6.3, `2.11.0rc1` and `2.9.0.dev20250811` are their release's):
what the tables and thresholds here compare is which release's code runs.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from .errors import InputError

UNKNOWN = "unknown"
_SUFFIX = (r"(?:[-_.]?(?:alpha|beta|preview|pre|rc|a|b|c)[-_.]?[0-9]*)?"       # pre-release
           r"(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?"                     # post-release
           r"(?:[-_.]?dev[-_.]?([0-9]*))?"                                      # development build (its number)
           r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?")                              # local label
# MAJOR.MINOR[.PATCH[.more]] and a suffix; `full` forms need the patch number
_BODY = r"v?([0-9]+)\.([0-9]+)(?:\.([0-9]+)(?:\.[0-9]+)*)?" + _SUFFIX
_FULL_BODY = r"v?([0-9]+)\.([0-9]+)\.([0-9]+)(?:\.[0-9]+)*" + _SUFFIX
# the same grammar as JSON Schema patterns (the scenario fields carry them; no named groups, no flags)
PATTERN = "^" + _BODY + "$"
FULL_PATTERN = "^" + _FULL_BODY + "$"
PATTERN_OR_UNKNOWN = f"^({UNKNOWN}|{_BODY})$"
_FORM = re.compile(_BODY)
_FULL_FORM = re.compile(_FULL_BODY)

FORM = "MAJOR.MINOR[.PATCH] with an optional suffix (rc1, .post1, .dev20250801, +cu130)"
FULL_FORM = "MAJOR.MINOR.PATCH with an optional suffix (rc1, .post1, .dev20250801, +cu130)"


class Version(NamedTuple):
    """A release as the code compares it: (major, minor, patch), patch 0 where not written."""
    major: int
    minor: int
    patch: int = 0

    @property
    def major_minor(self) -> tuple[int, int]:
        return self.major, self.minor


class VersionError(InputError):
    """A version string outside the grammar above; names the field, the value, the form and an example."""

    def __init__(self, field: str, value: str, example: str, full: bool = False, unknown: bool = False):
        self.field, self.example = field, example
        self.value = value if len(value) <= 60 else value[:60] + "…"      # a pasted blob is echoed as an excerpt
        self.form = (FULL_FORM if full else FORM) + (f", or {UNKNOWN}" if unknown else "")
        self.noun = "release number" if full else "version number"
        super().__init__(f"{field} '{self.value}'", f"is not a {self.noun}.",
                         f"write it as {self.form}, e.g. {example}.")

    @property
    def inline(self) -> str:
        """The problem said after the field's name (a scenario field's validation line)."""
        return f"is '{self.value}', not a {self.noun}: write it as {self.form}, e.g. {self.example}"


def _match(text: str, field: str, example: str, full: bool = False, unknown: bool = False) -> re.Match[str]:
    m = (_FULL_FORM if full else _FORM).fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise VersionError(field, str(text), example, full, unknown)
    return m


def _key(m: re.Match[str]) -> Version:
    return Version(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


def parse_version(text: str, field: str = "version", example: str = "2.11.0", full: bool = False) -> Version:
    """The key of a version string ("0.6.3.post1" -> (0, 6, 3), "v0.10.1rc1" -> (0, 10, 1), "4.46" -> (4, 46, 0));
    `full`: the patch number is required ("0.5" is refused). VersionError naming `field` and `example` otherwise."""
    return _key(_match(text, field, example, full))


def known_version(text: str | None, field: str = "version", example: str = "2.11.0") -> Version | None:
    """parse_version, or None for a version not stated (None, "unknown")."""
    if text is None or text == UNKNOWN:
        return None
    return _key(_match(text, field, example, unknown=True))


def dev_build(text: str | None, field: str = "version", example: str = "2.9.0.dev20250811") -> int | None:
    """The number of a development build ("2.9.0.dev20250811+rocm6.4" -> 20250811); None for any other version or
    a version not stated."""
    if text is None or text == UNKNOWN:
        return None
    number = _match(text, field, example, unknown=True).group(4)
    return int(number) if number else None
