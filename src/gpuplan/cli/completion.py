"""`gpuplan completion bash|zsh|fish`: a shell completion script generated from the argparse parser.

The script is written once (`gpuplan completion bash > ~/.local/share/bash-completion/completions/gpuplan`,
or `eval "$(gpuplan completion bash)"` in a shell's start-up file) and completes without running gpuplan:
command names, every command's flags, the values a flag accepts (from its argparse choices or the scenario
schema), model names for --model and `gpuplan model`, GPU ids for --gpu, --gpus and `gpuplan gpu`, explain's
quantities, and files for scenario files and output paths. The lists are those of this install when the
script was generated; regenerate after adding models or GPUs.
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field

SHELLS = ("bash", "zsh", "fish")

# flags whose value is a path: the shell's file completion
FILE_FLAGS = {"--plot", "--out", "--oom", "--scenario", "--profile"}
# positionals (by dest) whose values are a path
FILE_POSITIONALS = {"scenario"}


def add_parser(sub) -> None:
    s = sub.add_parser("completion", help="print a shell completion script (bash, zsh, fish)",
                       description="Print a completion script for your shell, generated from gpuplan's own "
                                   "parser: commands, flags, allowed values, model names and GPU ids.",
                       epilog='bash: eval "$(gpuplan completion bash)" in ~/.bashrc;  zsh: eval "$(gpuplan '
                              'completion zsh)" in ~/.zshrc (after compinit);  fish: gpuplan completion fish > '
                              '~/.config/fish/completions/gpuplan.fish')
    s.add_argument("shell", choices=SHELLS, help="the shell to complete in: " + ", ".join(SHELLS))
    s.set_defaults(func=cmd_completion)


def cmd_completion(args: argparse.Namespace) -> int:
    print(script(args.shell), end="")
    return 0


# ---- what the parser says ---------------------------------------------------------------------------------

@dataclass
class Option:
    flags: list[str]
    help: str
    takes_value: bool
    values: list[str] | None = None     # words to offer for the value
    files: bool = False                 # the value is a path


@dataclass
class Command:
    name: str
    help: str
    options: list[Option] = field(default_factory=list)
    words: list[str] = field(default_factory=list)     # values of its positionals (model names, quantities)
    files: bool = False                                 # a positional takes a path


def _clean(text: str | None) -> str:
    """Help text on one line without the characters completion syntaxes treat specially."""
    text = re.sub(r"\s+", " ", (text or "").replace("%%", "%")).strip()
    text = re.sub(r"[\[\]`'\"\\$:]", "", text)
    return text if len(text) <= 70 else text[:67].rstrip() + "..."


def _values(action: argparse.Action) -> list[str] | None:
    """The words a flag's value may be: argparse choices, the scenario schema's allowed values, or the
    catalog's model names / GPU ids."""
    from ..cliargs import SCENARIO_FLAGS, _allowed, _schema_class
    if action.choices:
        return [str(c) for c in action.choices]
    flag = action.dest
    if action.option_strings and flag in ("model",):
        return model_names()
    if action.option_strings and flag in ("gpu", "gpus"):
        return gpu_ids()
    if action.option_strings and flag == "why":
        from ..explain import QUANTITIES
        return ["list", *QUANTITIES]
    if action.option_strings and flag in SCENARIO_FLAGS:
        section, name, _, _, _ = SCENARIO_FLAGS[flag]
        values = _allowed(section, name, _schema_class(section).model_fields[name].annotation)
        return values or None
    return None


def model_names() -> list[str]:
    from ..models import list_models
    return sorted(e.name for e in list_models())


def gpu_ids() -> list[str]:
    from ..hardware import list_gpus
    return sorted(g.id for g in list_gpus())


def _positional_words(command: str, action: argparse.Action) -> list[str]:
    if action.choices:
        return [str(c) for c in action.choices]
    if (command, action.dest) == ("model", "name"):
        return model_names()
    if (command, action.dest) == ("gpu", "id"):
        return gpu_ids()
    if (command, action.dest) == ("explain", "quantity"):
        from ..explain import QUANTITIES
        return sorted(QUANTITIES)
    return []


def commands(parser: argparse.ArgumentParser | None = None) -> list[Command]:
    """Every command of the full parser (all optional commands loaded) with its options and values."""
    from . import build_parser
    parser = parser or build_parser("*")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    out = []
    for name, p in sub.choices.items():
        p.format_help()                           # fills the lazily built help of scenario flags
        cmd = Command(name, _clean(helps.get(name)))
        for a in p._actions:
            if isinstance(a, argparse._HelpAction):
                cmd.options.append(Option(list(a.option_strings), "show this help", False))
            elif a.option_strings:
                takes = a.nargs != 0
                files = any(f in FILE_FLAGS for f in a.option_strings)
                cmd.options.append(Option(list(a.option_strings), _clean(a.help), takes,
                                          None if files or not takes else _values(a), files))
            else:
                cmd.words += _positional_words(name, a)
                cmd.files = cmd.files or a.dest in FILE_POSITIONALS
        out.append(cmd)
    return out


def script(shell: str) -> str:
    cmds = commands()
    return {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}[shell](cmds)


# ---- bash -------------------------------------------------------------------------------------------------

def _words(values: list[str]) -> str:
    return " ".join(values)


def bash_script(cmds: list[Command]) -> str:
    # the model and GPU lists are written once and named where a flag takes them
    shared = {tuple(model_names()): "$_gpuplan_models", tuple(gpu_ids()): "$_gpuplan_gpus"}

    def _words(values: list[str]) -> str:
        return shared.get(tuple(values), " ".join(values))
    lines = ["# bash completion for gpuplan (generated by `gpuplan completion bash`)",
             f"_gpuplan_models=\"{' '.join(model_names())}\"",
             f"_gpuplan_gpus=\"{' '.join(gpu_ids())}\"",
             "_gpuplan() {",
             '    local cur prev cmd i',
             '    cur="${COMP_WORDS[COMP_CWORD]}"',
             '    prev="${COMP_WORDS[COMP_CWORD-1]}"',
             '    cmd=""',
             '    for ((i = 1; i < COMP_CWORD; i++)); do',
             '        case "${COMP_WORDS[i]}" in -*) ;; *) cmd="${COMP_WORDS[i]}"; break ;; esac',
             '    done',
             '    if [[ -z "$cmd" ]]; then',
             f'        COMPREPLY=( $(compgen -W "{_words([c.name for c in cmds])} --help --version --quiet '
             f'--no-color" -- "$cur") )',
             '        return',
             '    fi',
             '    case "$cmd" in']
    for c in cmds:
        lines.append(f"    {c.name})")
        value_cases = []
        for o in c.options:
            if not o.takes_value:
                continue
            pattern = "|".join(o.flags)
            if o.files:
                value_cases.append(f'            {pattern}) COMPREPLY=( $(compgen -f -- "$cur") ); return ;;')
            elif o.values and "--gpus" in o.flags:       # a comma-separated list: complete the last item
                value_cases.append(f'            {pattern}) local pre=""; [[ "$cur" == *,* ]] && pre="${{cur%,*}},"; '
                                   f'COMPREPLY=( $(compgen -P "$pre" -W "{_words(o.values)}" -- "${{cur##*,}}") ); '
                                   'return ;;')
            elif o.values:
                value_cases.append(f'            {pattern}) COMPREPLY=( $(compgen -W "{_words(o.values)}" -- "$cur") );'
                                   ' return ;;')
            else:
                value_cases.append(f"            {pattern}) return ;;")
        if value_cases:
            lines += ['        case "$prev" in', *value_cases, "        esac"]
        flags = [f for o in c.options for f in o.flags]
        lines.append('        if [[ "$cur" == -* ]]; then')
        lines.append(f'            COMPREPLY=( $(compgen -W "{_words(flags)}" -- "$cur") ); return')
        lines.append("        fi")
        positional = []
        if c.words:
            positional.append(f'$(compgen -W "{_words(c.words)}" -- "$cur")')
        if c.files:
            positional.append('$(compgen -f -- "$cur")')
        if positional:
            lines.append(f"        COMPREPLY=( {' '.join(positional)} )")
        lines.append("        ;;")
    lines += ["    esac", "}", "complete -o default -F _gpuplan gpuplan", ""]
    return "\n".join(lines)


# ---- zsh --------------------------------------------------------------------------------------------------

def _zq(text: str) -> str:
    """A single-quoted zsh word."""
    return "'" + text.replace("'", "'\\''") + "'"


def _zsh_spec(o: Option) -> str:
    names = o.flags
    head = ("(" + " ".join(names) + ")" + "{" + ",".join(names) + "}") if len(names) > 1 else names[0]
    desc = f"[{o.help}]"
    if not o.takes_value:
        return (f"'({' '.join(names)})'" + "{" + ",".join(names) + "}" + _zq(desc)) if len(names) > 1 \
            else _zq(head + desc)
    if o.files:
        action = ":file:_files"
    elif o.values and "--gpus" in o.flags:
        action = ":gpu ids:_sequence compadd - " + " ".join(o.values)
    elif o.values:
        action = ":value:(" + " ".join(o.values) + ")"
    else:
        action = ":value: "
    return _zq(names[-1] + desc + action) if len(names) == 1 else \
        f"'({' '.join(names)})'" + "{" + ",".join(names) + "}" + _zq(desc + action)


def zsh_script(cmds: list[Command]) -> str:
    lines = ["#compdef gpuplan", "# zsh completion for gpuplan (generated by `gpuplan completion zsh`)", "",
             "_gpuplan() {", "    local curcontext=\"$curcontext\" state line", "    local -a commands",
             "    commands=("]
    lines += [f"        {_zq(c.name + ':' + c.help)}" for c in cmds]
    lines += ["    )",
              "    _arguments -C '(- *)--help[show help]' '(- *)--version[show the version]' "
              "'(-q --quiet)'{-q,--quiet}'[only results and errors]' '--no-color[no colour]' "
              "'1:command:->command' '*::argument:->argument'",
              "    case $state in",
              "        command) _describe -t commands 'gpuplan command' commands ;;",
              "        argument)",
              "            case $line[1] in"]
    for c in cmds:
        specs = [_zsh_spec(o) for o in c.options]
        if c.words and c.files:
            specs.append(_zq("*:argument:_alternative 'words:value:(" + " ".join(c.words) + ")' 'files:file:_files'"))
        elif c.words:
            specs.append(_zq("*:value:(" + " ".join(c.words) + ")"))
        elif c.files:
            specs.append(_zq("*:file:_files"))
        lines.append(f"                {c.name}) _arguments -s \\")
        lines += [f"                    {s} \\" for s in specs[:-1]]
        lines.append(f"                    {specs[-1]} ;;" if specs else "                    ;;")
    lines += ["            esac ;;", "    esac", "}", "",
              'if [[ "${zsh_eval_context[-1]}" == loadautofunc ]]; then',
              '    _gpuplan "$@"', "else", "    compdef _gpuplan gpuplan", "fi", ""]
    return "\n".join(lines)


# ---- fish -------------------------------------------------------------------------------------------------

def _fq(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish_script(cmds: list[Command]) -> str:
    lines = ["# fish completion for gpuplan (generated by `gpuplan completion fish`)",
             "complete -c gpuplan -f"]
    for c in cmds:
        lines.append(f"complete -c gpuplan -n __fish_use_subcommand -a {c.name} -d {_fq(c.help)}")
    for c in cmds:
        cond = f"-n '__fish_seen_subcommand_from {c.name}'"
        for o in c.options:
            parts = []
            for f in o.flags:
                parts.append(f"-l {f[2:]}" if f.startswith("--") else f"-s {f[1:]}")
            line = f"complete -c gpuplan {cond} {' '.join(parts)} -d {_fq(o.help)}"
            if o.files:
                line += " -r -F"
            elif o.values:
                line += " -x -a " + _fq(" ".join(o.values))
            elif o.takes_value:
                line += " -x"
            lines.append(line)
        if c.words:
            lines.append(f"complete -c gpuplan {cond} -a {_fq(' '.join(c.words))}")
        if c.files:
            lines.append(f"complete -c gpuplan {cond} -F")
    return "\n".join(lines) + "\n"


__all__ = ["add_parser", "cmd_completion", "commands", "script", "bash_script", "zsh_script", "fish_script",
           "SHELLS"]
