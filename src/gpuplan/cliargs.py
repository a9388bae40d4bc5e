"""Command-line plumbing shared by every command module: scenario flags, number parsers with ranges,
the JSON envelope (DESIGN §3.2) and the error → exit-code mapping.

It sits below `gpuplan.cli` (the top-level parser) and below every subpackage's `cli.py`, so no
subpackage imports the top-level CLI. Only the standard library is imported at module level:
`gpuplan --help` must start fast.

Exit codes: 0 ok; 1 a "no plan / does not fit" answer; 2 bad input or environment (unreadable file,
missing folder, permission denied); 3 a gpuplan bug; 130 interrupted (Ctrl-C).
"""
from __future__ import annotations

import argparse
import errno
import math
import os
import sys
from typing import Any, Callable

from .errors import GpuplanError, InputError
from .inputs import excerpt

OK, NO_PLAN, BAD_INPUT, BUG, INTERRUPTED = 0, 1, 2, 3, 130

# the largest values any command accepts: far beyond real clusters and contexts, far below overflow
MAX_GPUS = 1 << 20
MAX_TOKENS_IN_SEQ = 1 << 24
MAX_TOTAL_TOKENS = 1e18

# scenario flag -> (section, field, parser kind, low, high); ranges are inclusive
SCENARIO_FLAGS: dict[str, tuple[str | None, str, type, float | None, float | None]] = {
    "model": (None, "model", str, None, None), "task": (None, "task", str, None, None),
    "framework": (None, "framework", str, None, None),
    "gpu": ("hardware", "gpu", str, None, None), "count": ("hardware", "count", int, 1, MAX_GPUS),
    "gpus_per_node": ("hardware", "gpus_per_node", int, 1, 1024), "network": ("hardware", "network", str, None, None),
    "profile": ("hardware", "profile", str, None, None), "host_cpu": ("hardware", "host_cpu", str, None, None),
    "dp": ("parallel", "dp", int, 1, MAX_GPUS), "tp": ("parallel", "tp", int, 1, 65536),
    "pp": ("parallel", "pp", int, 1, 65536), "cp": ("parallel", "cp", int, 1, 65536),
    "ep": ("parallel", "ep", int, 1, 65536), "vpp": ("parallel", "vpp", int, 1, 1024),
    "zero": ("parallel", "zero", int, 0, 3), "offload": ("parallel", "offload", str, None, None),
    "shard_group": ("parallel", "shard_group", int, 1, MAX_GPUS),
    "method": ("train", "method", str, None, None),
    # `--objective` is recommend's ranking (cheapest, fastest, ...): the training loss has its own name
    "train_objective": ("train", "objective", str, None, None), "precision": ("train", "precision", str, None, None),
    "optimizer": ("train", "optimizer", str, None, None), "seq_len": ("train", "seq_len", int, 1, MAX_TOKENS_IN_SEQ),
    "target_len": ("train", "target_len", int, 1, MAX_TOKENS_IN_SEQ),
    "document_len": ("train", "document_len", int, 1, MAX_TOKENS_IN_SEQ),
    "micro_batch": ("train", "micro_batch", int, 1, 65536),
    "global_batch": ("train", "global_batch", int, 1, MAX_TOKENS_IN_SEQ),
    "recompute": ("train", "recompute", str, None, None), "attention": ("train", "attention", str, None, None),
    "lora_rank": ("train", "lora_rank", int, 1, 65536), "tokens": ("train", "tokens", float, 0, MAX_TOTAL_TOKENS),
    "weights": ("infer", "weights", str, None, None), "kv_cache": ("infer", "kv_cache", str, None, None),
    "engine": ("infer", "engine", str, None, None),
    "prompt_len": ("infer", "prompt_len", int, 1, MAX_TOKENS_IN_SEQ),
    "output_len": ("infer", "output_len", int, 1, MAX_TOKENS_IN_SEQ),
    "concurrency": ("infer", "concurrency", int, 1, MAX_GPUS),
    "beam_width": ("infer", "beam_width", int, 1, 1024),
}


# ---- numbers ------------------------------------------------------------------------------------

def _shown(text: str) -> str:
    return text if len(text) <= 24 else text[:20] + f"... ({len(text)} characters)"


def _named(flag: str, field: str | None) -> str:
    return f"{flag} ({field})" if field else flag


def whole_number(flag: str, low: int, high: int, field: str | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high]; '1e3' is 1000, '1.5', 'inf' and 'nan' are refused.
    `field` (e.g. 'train.micro_batch') is named in the message beside the flag."""
    def parse(text: str) -> int:
        expects = f"{_named(flag, field)}: expects a whole number from {low:,} to {high:,}"
        try:
            value = int(text)
        except ValueError:
            try:
                number = float(text)
            except (ValueError, OverflowError):
                raise argparse.ArgumentTypeError(f"{expects}; got '{_shown(text)}'.") from None
            if not math.isfinite(number) or number != int(number):
                raise argparse.ArgumentTypeError(f"{expects}; got '{_shown(text)}'.") from None
            value = int(number)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{expects}; got '{_shown(text)}'.")
        return value
    return parse


def real_number(flag: str, low: float, high: float, *, low_open: bool = True, high_open: bool = False,
                field: str | None = None) -> Callable[[str], float]:
    """An argparse type: a finite number in the range (low, high] (the ends as told)."""
    lo, hi = ("(" if low_open else "["), (")" if high_open else "]")

    def parse(text: str) -> float:
        expects = f"{_named(flag, field)}: expects a number in {lo}{low:g}, {high:g}{hi}"
        try:
            value = float(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{expects}; got '{_shown(text)}'.") from None
        inside = math.isfinite(value) and (value > low if low_open else value >= low) and \
            (value < high if high_open else value <= high)
        if not inside:
            raise argparse.ArgumentTypeError(f"{expects}; got '{_shown(text)}'.")
        return value
    return parse


def positive_int(flag: str, high: int = MAX_GPUS, field: str | None = None) -> Callable[[str], int]:
    return whole_number(flag, 1, high, field)


# ---- scenario flags -----------------------------------------------------------------------------

def _flag_name(flag: str) -> str:
    return "--" + flag.replace("_", "-")


def add_scenario_args(p: argparse.ArgumentParser, positional: bool = True, exclude: tuple[str, ...] = ()) -> None:
    if positional:
        p.add_argument("scenario", nargs="?", help="scenario file (YAML or JSON); flags override its fields")
    g = p.add_argument_group("scenario fields (override the file)")
    p.set_defaults(_scenario_flags=tuple(f for f in SCENARIO_FLAGS if f not in exclude))
    for flag, (section, field, kind, low, high) in SCENARIO_FLAGS.items():
        if flag in exclude:
            continue
        name, path = _flag_name(flag), f"{section}.{field}" if section else field
        parse: Callable[[str], Any] = str
        if kind is int:
            parse = whole_number(name, int(low), int(high), path)
        elif kind is float:
            parse = real_number(name, float(low), float(high), field=path)
        g.add_argument(name, dest=flag, type=parse, default=None, metavar=flag.upper(), help=_LAZY_HELP)


# what a scenario field is, for the fields whose schema entry carries no description of its own
_WHAT = {
    "model": "the model: a registry name, an HF repo id or a path to a config.json (list: `gpuplan models`)",
    "task": "what to plan for: pre-training, fine-tuning or serving",
    "framework": "training framework whose memory behaviour (and launch files) to follow",
    "offload": "what ZeRO/FSDP moves to host (CPU) memory",
    "method": "full training, LoRA adapters, or QLoRA (4-bit frozen base + adapters)",
    "precision": "training compute precision",
    "optimizer": "optimizer (sets the optimizer-state bytes per parameter)",
    "recompute": "activation recomputation (checkpointing): none, per-block selective, or full",
    "attention": "attention kernel (eager materialises the score matrix)",
    "weights": "weight format of the served model (quantisation)",
    "kv_cache": "KV-cache element format",
    "engine": "serving engine",
}
# a marker: the scenario flags' help is built from the schema only when help is printed (keeps start-up fast)
_LAZY_HELP = "(scenario field)"


def _schema_class(section: str | None):
    from . import scenario
    return {None: scenario.Scenario, "hardware": scenario.Hardware, "parallel": scenario.Parallel,
            "train": scenario.Train, "infer": scenario.Infer}[section]


def _allowed(section: str | None, field: str, annotation: Any) -> list[str]:
    """The values a field accepts, from its Literal type (or the dtype vocabulary for formats)."""
    from typing import Literal, get_args, get_origin
    if (section, field) == ("infer", "weights"):
        from .dtypes import WEIGHT_FORMATS
        return sorted(WEIGHT_FORMATS)
    if (section, field) == ("infer", "kv_cache"):
        from .dtypes import KV_FORMAT_BITS
        return sorted(KV_FORMAT_BITS)
    pending, values = [annotation], []
    while pending:
        t = pending.pop()
        if get_origin(t) is Literal:
            values += [str(v) for v in get_args(t)]
        else:
            pending += list(get_args(t))
    return values


def scenario_flag_help(flag: str) -> str:
    """Help for one scenario flag from the scenario schema: what (with range and unit), allowed values,
    default, and the field it sets."""
    section, field, _, _, _ = SCENARIO_FLAGS[flag]
    info = _schema_class(section).model_fields[field]
    what = info.description or _WHAT.get(flag, field.replace("_", " "))
    parts = [what]
    allowed = _allowed(section, field, info.annotation)
    if allowed:
        parts.append("one of: " + ", ".join(allowed))
    if flag == "gpu":
        parts.append("list: `gpuplan gpus`")
    if info.is_required():
        parts.append("required (here or in the file)")
    elif info.default is not None:
        parts.append(f"default: {info.default}")
    path = f"{section}.{field}" if section else field
    return ("; ".join(parts) + f" [sets {path}]").replace("%", "%%")


def document_flags(parser: argparse.ArgumentParser) -> None:
    """Fill in the help of scenario flags (from the schema) and of --json, just before help is printed."""
    for action in parser._actions:
        if action.help == _LAZY_HELP and action.dest in SCENARIO_FLAGS:
            action.help = scenario_flag_help(action.dest)
        elif action.help is None and "--json" in action.option_strings:
            action.help = JSON_HELP


JSON_HELP = ('print one JSON object: {"command", "version", "result"}, or on failure {"command", "version", '
             '"error"} (its JSON Schema: `gpuplan schema --envelope`)')


def scenario_data_from_args(args: argparse.Namespace, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The scenario fields given as flags, laid over `base` (a file's contents), not yet validated."""
    data: dict[str, Any] = {k: dict(v) if isinstance(v, dict) else v for k, v in (base or {}).items()}
    changed_count = False
    registered = getattr(args, "_scenario_flags", tuple(SCENARIO_FLAGS))
    for flag, (section, field, _, _, _) in SCENARIO_FLAGS.items():
        value = getattr(args, flag, None) if flag in registered else None
        if value is None:
            continue
        if section is None:
            data[field] = value
        else:
            if data.get(section) is None:
                data[section] = {}
            elif not isinstance(data[section], dict):
                raise InputError(f"scenario '{section}'", f"is a {type(data[section]).__name__}, not a mapping, so "
                                 f"{_flag_name(flag)} cannot be set in it.", f"write `{section}:` as a mapping of fields.")
            data[section][field] = value
        if flag in ("count", "tp", "pp", "cp"):
            changed_count = True
    if changed_count and getattr(args, "dp", None) is None and isinstance(data.get("parallel"), dict):
        data["parallel"]["dp"] = None
    if "model" not in data:
        raise InputError("scenario", "names no model.", "pass a scenario file or --model NAME (see `gpuplan models`).")
    return data


def partial_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """A partial scenario (hardware/layout may be open) for recommend and compare."""
    base: dict[str, Any] = {}
    if getattr(args, "scenario", None):
        from .search.partial import load_partial
        base = load_partial(args.scenario)
    return scenario_data_from_args(args, base)


def scenario_from_args(args: argparse.Namespace, *, require_gpu: bool = True, default_task: str | None = None):
    """A Scenario from the positional file plus flag overrides; `default_task` where neither names a task
    (`gpuplan serve --model ... --gpu ...` is an inference question)."""
    from .inputs import read_mapping_file, short_path
    from .scenario import scenario_from_dict
    base: dict[str, Any] = {}
    source = "(flags)"
    if getattr(args, "scenario", None):
        # the file's own fields, not yet validated: flags may fill a section it lacks (e.g. --gpu for a
        # recommend file with no `hardware:`), and the result is validated once, as a whole
        base = read_mapping_file(args.scenario, "scenario file")
        source = f"file '{short_path(args.scenario)}'"
        check_file_values(base, source)
        if any(getattr(args, f, None) is not None for f in getattr(args, "_scenario_flags", ())):
            source += " with flags"
    data = scenario_data_from_args(args, base)
    if default_task and not data.get("task"):
        data["task"] = default_task
    if require_gpu and not (data.get("hardware") or {}).get("gpu"):
        raise InputError("scenario" if source == "(flags)" else f"scenario {source}", "names no GPU.",
                         "add `hardware: {gpu: ...}` or --gpu ID (see `gpuplan gpus`), or let `gpuplan recommend` "
                         "choose the GPUs.")
    data.setdefault("hardware", {})
    return scenario_from_dict(data, source)


def check_file_values(data: dict[str, Any], source: str) -> None:
    """Refuse a file whose own values are wrong (even where a flag overrides them); a missing field or section
    is left for the flags to fill, and the whole is validated after."""
    from pydantic import ValidationError

    from .scenario import Scenario, scenario_from_dict
    try:
        Scenario.model_validate(data)
    except ValidationError as err:
        if any(e.get("type") != "missing" for e in err.errors()):
            scenario_from_dict(data, source)        # raises the file's own one-paragraph message
    except (ValueError, TypeError, RecursionError):
        scenario_from_dict(data, source)


def arrival_spec(text: str) -> dict[str, Any]:
    """--arrival poisson | server | gamma:CV | closed:N | offline | trace:FILE -> infer.load fields
    (server: MLPerf Server, Poisson at --rate; offline: MLPerf Offline, every request at t=0)."""
    kind, _, arg = text.strip().partition(":")
    kind = kind.strip().lower()
    fix = "use poisson, server, offline, gamma:CV (e.g. gamma:2), closed:N (e.g. closed:64) or trace:FILE."
    if kind in ("poisson", "server", "offline") and not arg:
        return {"arrival": "offline" if kind == "offline" else "poisson"}
    if kind == "trace" and arg.strip():
        return {"arrival": "trace", "trace": arg.strip()}
    if kind in ("gamma", "closed") and arg.strip():
        try:
            v = float(arg) if kind == "gamma" else int(arg)
        except ValueError:
            raise InputError(f"--arrival {excerpt(text)}", f"{excerpt(arg)} is not a "
                             f"{'number' if kind == 'gamma' else 'whole number'}.", fix) from None
        return {"arrival": "gamma", "arrival_cv": v} if kind == "gamma" else {"arrival": "closed", "clients": v}
    from .errors import close_matches
    raise InputError(f"--arrival {excerpt(text)}", "is not an arrival process.", fix,
                     close_matches(kind, ["poisson", "server", "offline", "gamma", "closed", "trace"]))


def disaggregation_spec(text: str) -> dict[str, int]:
    """--disaggregate N:M -> {prefill_instances: N, decode_instances: M}."""
    parts = text.split(":")
    try:
        n, m = (int(p) for p in parts)
        if n < 1 or m < 1:
            raise ValueError
    except ValueError:
        raise InputError(f"--disaggregate {excerpt(text)}", "is not two whole numbers >= 1 joined by ':'.",
                         "write N:M, e.g. --disaggregate 1:3 for one prefill and three decode instances.") from None
    return {"prefill_instances": n, "decode_instances": m}


def load_from_args(args: argparse.Namespace, current: dict[str, Any] | None) -> dict[str, Any] | None:
    """infer.load with the serve command's load flags applied (None: no load asked for)."""
    flags = {"rate_per_s": getattr(args, "rate", None), "requests": getattr(args, "requests", None),
             "slo_ttft_s": getattr(args, "slo_ttft", None), "slo_tpot_s": getattr(args, "slo_tpot", None),
             "slo_percentile": getattr(args, "slo_percentile", None), "seed": getattr(args, "seed", None),
             "prefix_cache_hit": getattr(args, "prefix_cache_hit", None)}
    given = {k: v for k, v in flags.items() if v is not None}
    if getattr(args, "arrival", None):
        given.update(arrival_spec(args.arrival))
    if getattr(args, "disaggregate", None):
        given["disaggregation"] = disaggregation_spec(args.disaggregate)
    if not given:
        return current
    out = {k: v for k, v in (current or {}).items() if v is not None}
    if given.get("arrival") not in (None, "trace"):
        out.pop("trace", None)
    out.update(given)
    return out


def split_list(text: str | None) -> list[str] | None:
    """'a, b,,c' -> ['a', 'b', 'c'] (None when empty)."""
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


# ---- output: the JSON envelope ------------------------------------------------------------------

def _version() -> str:
    from . import __version__
    return __version__


def _finite(obj: Any) -> Any:
    """A non-finite float (inf, NaN) becomes null, as the web API writes it (web/jobs.clean): `Infinity` and
    `NaN` are not JSON (RFC 8259 §6), and a strict parser (jq, JavaScript's JSON.parse) rejects the document."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    import json
    return json.dumps(_finite(obj), indent=2, default=str, allow_nan=False)


def print_result(command: str, result: Any) -> None:
    """`--json` output on success: {"command", "version", "result"} (DESIGN §3.2)."""
    print(dumps({"command": command, "version": _version(), "result": result}))


def error_envelope(command: str | None, err: GpuplanError) -> dict[str, Any]:
    return {"command": command, "version": _version(),
            "error": {"what": err.what, "why": err.why, "fix": err.fix, "close_matches": list(err.matches)}}


# ---- errors → one paragraph and an exit code ----------------------------------------------------

class UsageError(InputError):
    """A flag the parser refuses (unknown flag, bad number, missing argument)."""


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting, so a malformed command
    line gets the same one paragraph (and --json envelope) as any other bad input."""

    def format_help(self) -> str:
        document_flags(self)
        return super().format_help()

    def error(self, message: str):  # type: ignore[override]
        import re
        what, why = self.prog, message
        m = re.match(r"argument (\S+?)(?:/\S+)?: (.*)$", message, re.S)
        if m:
            what, why = m.group(1), m.group(2)
            if why.startswith(what) and ": " in why:       # our number parsers name the flag (and field) first
                what, why = why.split(": ", 1)
        from .errors import close_matches
        matches: list[str] = []
        if why.startswith("unrecognized arguments: "):
            for word in why.split(": ", 1)[1].split():
                matches += close_matches(word.split("=")[0], self._all_options(), n=3) if word.startswith("-") else []
        choice = re.match(r"invalid choice: '?([^' ]*)'? \(choose from (.*)\)", why, re.S)
        if choice:
            options = [c.strip(" '") for c in choice.group(2).split(",")]
            matches = close_matches(choice.group(1), options, n=3)
        sub = self._command_parser()
        help_of = sub.prog if sub is not None else self.prog
        raise UsageError(what, why if why.endswith(".") else why + ".", f"see `{help_of} --help`.", matches)

    def _command_parser(self) -> "argparse.ArgumentParser | None":
        """The subcommand's parser when this top-level parser knows which one the command line named
        (`command`, set by the CLI); argparse reports a subcommand's unknown flags from the top level."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return action.choices.get(getattr(self, "command", None) or "")
        return None

    def _all_options(self) -> list[str]:
        """The flags a close match may suggest: the named command's own (flags of other commands would only
        fail again), else every command's."""
        options = set(self._option_string_actions)
        chosen = self._command_parser()
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in [chosen] if chosen is not None else action.choices.values():
                    options.update(sub._option_string_actions)
        return sorted(o for o in options if o.startswith("--"))


_OS_FIXES = {
    errno.ENOENT: "check the path; a folder that does not exist yet must be created first.",
    errno.EACCES: "check the permissions of the file or folder, or choose another path.",
    errno.EPERM: "check the permissions of the file or folder, or choose another path.",
    errno.EISDIR: "name a file, not a folder.",
    errno.ENOTDIR: "a part of the path is a file, not a folder: name a folder.",
    errno.ENOSPC: "free some disk space or choose another path.",
    errno.EROFS: "choose a writable location.",
}


def environment_error(err: OSError) -> InputError:
    """An OSError (unreadable file, missing folder, permission denied) as a one-paragraph input error."""
    what = str(err.filename) if err.filename is not None else "file system"
    why = (err.strerror or str(err)).rstrip(".") + "."
    return InputError(what, why, _OS_FIXES.get(err.errno or 0, "check the path and try again."))


def report(command: str | None, as_json: bool, func: Callable[[], int | None]) -> int:
    """Run one command; map what it raises to one paragraph on stderr (and, under --json, the error
    envelope on stdout) and an exit code."""
    try:
        return int(func() or 0)
    except KeyboardInterrupt:
        _flush()
        print("interrupted.", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:             # `gpuplan ... | head`: the reader has all it wants
        _silence_stdout()
        return OK
    except GpuplanError as err:
        return _bad_input(command, as_json, err)
    except OSError as err:
        return _bad_input(command, as_json, environment_error(err))
    except Exception as err:  # an unexpected failure is still reported as one paragraph
        if os.environ.get("GPUPLAN_DEBUG"):
            raise
        bug = GpuplanError("internal error", f"{type(err).__name__}: {_shown_error(err)}. This is a gpuplan bug.",
                           "rerun with GPUPLAN_DEBUG=1 for the traceback and report it.")
        if as_json:
            print(dumps(error_envelope(command, bug)))
        print(f"error: internal error {type(err).__name__}: {_shown_error(err)}. This is a gpuplan bug; rerun with "
              "GPUPLAN_DEBUG=1 for the traceback and report it.", file=sys.stderr)
        return BUG


def _shown_error(err: Exception) -> str:
    text = str(err)
    return text if len(text) <= 300 else text[:300] + "..."


def _bad_input(command: str | None, as_json: bool, err: GpuplanError) -> int:
    if as_json:
        print(dumps(error_envelope(command, err)))
    from .term import paint
    message = " ".join(err.message.split("\n"))
    print(f"{paint('error:', 'bold red')} {message}", file=sys.stderr)     # red only on a colour terminal
    return BAD_INPUT


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):      # not a real file descriptor (tests, notebooks)
        pass


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed pipe: nothing more to say on it
            pass
