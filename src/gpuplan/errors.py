"""Error hierarchy. Every message says what failed, why, and how to fix it.

The CLI catches `GpuplanError` and prints its message (no traceback) with exit code 2.
"""
from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, Union

Catalog = Literal["gpus", "models", "schema", "presets"]


@dataclass(frozen=True)
class CatalogHint:
    """A catalog the reader can list to find the right name (the one the close matches come from): `shows` is what
    the listing holds ("the ids"), `filter` narrows it ("apple")."""
    catalog: Catalog
    shows: str
    filter: str = ""


@dataclass(frozen=True)
class InputHint:
    """An input the reader sets (a command's flag, a request's field) and the value it takes ("a serving engine")."""
    name: str
    to: str


@dataclass(frozen=True)
class CommandHint:
    """Another of gpuplan's computations that answers what this one refuses (`command`: the CLI's command, which the
    web serves as POST /api/<command>) and what it gives there ("the memory of this plan")."""
    command: Literal["estimate", "recommend", "compare"]
    gives: str


# Where the reader acts on an error, as data: each surface words it (cli_words here, web/jobs.web_words on the web)
Hint = Union[CatalogHint, InputHint, CommandHint]


def cli_words(hint: Hint) -> str:
    """A hint as the library and the CLI say it: the listing command or the flag."""
    if isinstance(hint, CatalogHint):
        command = f"gpuplan {hint.catalog}" + (f" {hint.filter}" if hint.filter else "")
        return f"`{command}` lists {hint.shows}"
    if isinstance(hint, CommandHint):
        return f"`gpuplan {hint.command}` gives {hint.gives}"
    return f"set --{hint.name.replace('_', '-')} to {hint.to}"


class GpuplanError(Exception):
    """Base class: a problem with the user's input or environment that we can explain.

    `fix` says what to do in words every surface shares; `see` is a hint, a catalog to list or an input to set, that
    each surface words itself (`words`: cli_words, web/jobs.web_words); `local_fix` is what only a user on their own
    machine can do (a library call, an environment variable), which a web server's clients are not told. The `fix`
    and `message` attributes read all three as the library and the CLI say them."""

    def __init__(self, what: str, why: str, fix: str = "", matches: Iterable[str] = (),
                 see: Hint | None = None, local_fix: str = ""):
        self.what, self.why = what, why
        self.advice, self.see, self.local_fix = fix, see, local_fix
        self.matches = list(matches)
        super().__init__(self.message)

    def fix_in(self, words: Callable[[Hint], str], local: bool = True) -> str:
        """The fix as one surface says it: the shared advice, the hint in that surface's `words` and (`local`) the
        advice only a local user can follow, as clauses of one sentence."""
        if self.see is None and not self.local_fix:
            return self.advice
        clauses = [self.advice.rstrip(" ."), words(self.see) if self.see else "",
                   self.local_fix if local else ""]
        return "; ".join(c for c in clauses if c) + "."

    @property
    def fix(self) -> str:
        return self.fix_in(cli_words)

    def about(self, what: str) -> GpuplanError:
        """The same error said of `what` (a caller naming where the input sat), its hint and fix kept."""
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.what = what
        Exception.__init__(new, new.message)
        return new

    def message_in(self, words: Callable[[Hint], str], local: bool = True) -> str:
        """The whole message as one surface says it (fix_in)."""
        text = f"{self.what}: {self.why}"
        if self.matches:
            text += f" Close matches: {', '.join(self.matches)}."
        fix = self.fix_in(words, local)
        if fix:
            text += f" Fix: {fix}"
        return text

    @property
    def message(self) -> str:
        return self.message_in(cli_words)


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
