"""How the command line's text reaches the terminal: styled or plain, colour, width, quiet, progress bars.

One small state, set once per command by `gpuplan.cli.main` (`configure`); everything else reads it. The
default is plain, so library callers, tests and `scripts/update_guide.py` get the same text whatever the
terminal. `rich` renders the styled tables and progress bars and is imported only when something is drawn
on a terminal (it costs start-up time; piped output never imports it).

- styled: stdout is a terminal -> tables drawn by rich, fitted to the terminal width (COLUMNS wins).
  Piped or redirected output is the plain, stable text the tests and docs/guide.md compare.
- colour: styled, and neither NO_COLOR (https://no-color.org: set and not empty), --no-color nor TERM=dumb.
- quiet (--quiet): only the result and errors; notes, hints, footers and progress bars are left out.
- progress: on stderr, only when stderr is a terminal, never under --quiet or --json.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any, Iterable


class Settings:
    """How this command's output is drawn. (A plain class: `dataclasses` costs ~60 ms of `gpuplan --help`.)"""
    __slots__ = ("styled", "color", "quiet", "progress", "width")

    def __init__(self, styled: bool = False, color: bool = False, quiet: bool = False, progress: bool = False,
                 width: int = 100) -> None:
        self.styled = styled          # rich tables fitted to the terminal
        self.color = color            # ANSI colour (only when styled)
        self.quiet = quiet            # --quiet
        self.progress = progress      # progress bars on stderr
        self.width = width            # terminal columns (styled only)


_state = Settings()


def settings() -> Settings:
    return _state


def no_color_env(env: dict[str, str] | None = None) -> bool:
    """NO_COLOR set to any non-empty value turns colour off (no-color.org); TERM=dumb too."""
    env = os.environ if env is None else env
    return bool(env.get("NO_COLOR")) or env.get("TERM") == "dumb"


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):   # closed or replaced streams
        return False


def configure(*, quiet: bool = False, no_color: bool = False, as_json: bool = False,
              stdout: Any = None, stderr: Any = None, env: dict[str, str] | None = None) -> Settings:
    """Decide, once per command, how its output is drawn (see the module docstring)."""
    global _state
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    styled = _isatty(out) and not as_json
    _state = Settings(styled=styled, color=styled and not no_color and not no_color_env(env), quiet=quiet,
                      progress=_isatty(err) and not quiet and not as_json,
                      width=shutil.get_terminal_size((100, 24)).columns)
    return _state


def reset() -> None:
    """Back to plain output (what library callers get)."""
    global _state
    _state = Settings()


# ---- text ---------------------------------------------------------------------------------------------

# line starts that carry no result: left out under --quiet
_CHATTER = ("note: ", "computed by gpuplan.pipeline", "How it was measured:", "plot written to", "`gpuplan ")

_STYLE_OF_START = (("warning:", "yellow"), ("error:", "bold red"), ("note:", "dim"), ("OVERLOADED", "bold red"),
                   ("DOES NOT FIT", "bold red"))
_ANSI = {"yellow": "33", "bold red": "1;31", "dim": "2", "green": "32", "red": "31", "bold": "1", "cyan": "36"}


def paint(text: str, style: str) -> str:
    """`text` in `style` (one of a few named styles) when colour is on; unchanged otherwise."""
    if not _state.color or not text:
        return text
    return f"\x1b[{_ANSI[style]}m{text}\x1b[0m"


def _paint_line(line: str) -> str:
    for start, style in _STYLE_OF_START:
        if line.startswith(start):
            return paint(line, style)
    if "does NOT fit" in line:
        return line.replace("does NOT fit", paint("does NOT fit", "bold red"))
    if line.startswith("Peak ") and ": fits" in line:
        return line.replace(": fits", ": " + paint("fits", "green"), 1)
    return line


def keep(line: str) -> bool:
    """Whether a line of a report is shown (under --quiet only what is not chatter)."""
    return not (_state.quiet and line.lstrip().startswith(_CHATTER))


def shown(text: str) -> str:
    """A report as shown: chatter left out under --quiet, warnings/verdicts coloured when colour is on."""
    lines = [ln for ln in text.split("\n") if keep(ln)]
    if _state.color:
        lines = [_paint_line(ln) for ln in lines]
    return "\n".join(lines)


def emit(text: str = "", *, info: bool = False, file: Any = None) -> None:
    """Print a report (or, with info=True, a hint or footer that --quiet leaves out)."""
    if info and _state.quiet:
        return
    print(shown(text), file=file)


# ---- tables ---------------------------------------------------------------------------------------------

_GOOD = {"yes", "fits"}
_BAD = {"no", "NO", "does NOT fit"}


def _cell_style(cell: str) -> str:
    if not _state.color:
        return ""
    if cell in _GOOD:
        return "green"
    if cell in _BAD:
        return "red"
    if cell.endswith(" !"):           # a memory bar past capacity (report.bar)
        return "red"
    return ""


def rich_table(headers: Iterable[str], rows: Iterable[Iterable[str]], align: str, width: int | None = None,
               color: bool | None = None) -> str:
    """The table drawn by rich for a terminal: header in bold, a rule under it, columns fitted to `width`
    (cells wrap inside their column rather than running past the edge), yes/no and over-capacity bars
    coloured when colour is on."""
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    color = _state.color if color is None else color
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold" if color else "",
              collapse_padding=True)
    for h, a in zip(headers, align):
        # numbers (right-aligned) never wrap, so a narrow terminal wraps the text columns instead
        t.add_column(h, justify="left" if a == "l" else "right", overflow="fold", no_wrap=a != "l")
    for r in rows:
        t.add_row(*(Text(c, style=_cell_style(c) if color else "") for c in r))
    buf = io.StringIO()
    console = Console(file=buf, width=width or _state.width, force_terminal=color, no_color=not color,
                      color_system="standard" if color else None, highlight=False, emoji=False, markup=False,
                      legacy_windows=False)
    console.print(t)
    return "\n".join(line.rstrip() for line in buf.getvalue().rstrip("\n").split("\n"))


def wrap(line: str) -> str:
    """A long plain line as shown: wrapped to the terminal's width on a terminal (indenting the rest), as is
    in plain text."""
    if not _state.styled or len(line) <= _state.width:
        return line
    import textwrap
    return textwrap.fill(line, _state.width, subsequent_indent="  ", break_on_hyphens=False)


def bar_width(default: int) -> int:
    """Characters of a memory bar: `default` in plain text; on a terminal what is left beside the other
    columns of the memory table (about 46 characters), between 8 and `default`."""
    if not _state.styled:
        return default
    return max(8, min(default, _state.width - 46))


# ---- progress -------------------------------------------------------------------------------------------

class Progress:
    """A progress bar on stderr for work that may take over a second: nothing is drawn before `delay_s`
    has passed, nor ever when progress is off (not a terminal, --quiet, --json). Use as a context manager;
    `update(done, total, text)` moves it. rich draws it (imported only when it is first shown)."""

    def __init__(self, label: str, total: float | None = None, *, delay_s: float = 1.0, enabled: bool | None = None):
        self.label, self.total, self.delay_s = label, total, delay_s
        self.enabled = _state.progress if enabled is None else enabled
        self.t0 = time.monotonic()
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def update(self, done: float | None = None, total: float | None = None, text: str = "") -> None:
        if not self.enabled:
            return
        if total is not None:
            self.total = total
        if self._bar is None:
            if time.monotonic() - self.t0 < self.delay_s:
                return
            self._start()
        kw: dict[str, Any] = {"description": f"{self.label} {text}".strip()}
        if self.total is not None:
            kw["total"] = self.total
        if done is not None:
            kw["completed"] = done
        self._bar.update(self._task, **kw)

    def __call__(self, text: str) -> None:
        """A callback for features that report status lines (the trace): the text, no count."""
        self.update(text=text)

    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar, SpinnerColumn, TextColumn,
                                   TimeElapsedColumn)
        columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn()] if self.total else [SpinnerColumn(), TextColumn("{task.description}"),
                                                            TimeElapsedColumn()]
        console = Console(file=sys.stderr, no_color=not _state.color or no_color_env())
        self._bar = Bar(*columns, console=console, transient=True)
        self._task = self._bar.add_task(self.label, total=self.total)
        self._bar.start()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


__all__ = ["Settings", "settings", "configure", "reset", "no_color_env", "paint", "keep", "shown", "emit",
           "rich_table", "Progress"]
