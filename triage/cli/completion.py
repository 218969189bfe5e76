"""`triage completion bash|zsh|fish`: a tab-completion script, generated from the command line itself.

The script is built from the parser `triage` runs with (every command, its options and the values
argparse knows), plus the words no parser holds: entry ids for `show`, reproduction ids for
`repro`, probe names for `probe`. A new command or option is completed without touching this file.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from triage.core.errors import UserError
from triage.core.exitcodes import Exit

HELP = "print a shell completion script: bash, zsh or fish"
DESCRIPTION = (
    "Print a tab-completion script for triage. Load it for this shell session, or add the line to "
    "your shell's startup file:\n"
    '  bash:  eval "$(triage completion bash)"     (in ~/.bashrc)\n'
    '  zsh:   eval "$(triage completion zsh)"      (in ~/.zshrc, after compinit)\n'
    "  fish:  triage completion fish > ~/.config/fish/completions/triage.fish"
)
SHELLS = ("bash", "zsh", "fish")
# Options and positionals whose values are paths: completed as files.
_PATH_METAVARS = frozenset({"PATH", "FILE", "DIR", "FILE.json"})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments on its parser."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")


@dataclass
class Command:
    """What completes after `triage NAME`: its options (those taking a file apart) and its words."""

    name: str
    help: str
    options: list[tuple[str, str]] = field(default_factory=list)  # (flag, help)
    file_options: list[str] = field(default_factory=list)
    value_options: list[str] = field(default_factory=list)  # take a value that is not a file
    words: list[str] = field(default_factory=list)
    files: bool = False  # positionals are paths


def _entry_ids() -> list[str]:
    from triage.kb.loader import load_kb

    return list(load_kb().entries)


def _repro_ids() -> list[str]:
    from triage.repro import SCENARIOS

    return [s.id for s in SCENARIOS]


def _probe_names() -> list[str]:
    from probes.registry import PROBES

    return list(PROBES)


_WORDS: dict[str, Callable[[], list[str]]] = {
    "show": _entry_ids,
    "repro": _repro_ids,
    "probe": _probe_names,
}


def describe(root: argparse.ArgumentParser) -> tuple[Command, list[Command]]:
    """The top level (global options, command names) and each command, from the parser."""
    top = Command("", "")
    commands: list[Command] = []
    for action in root._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: str(choice.help or "") for choice in action._choices_actions}
            for name, sub in sorted(action.choices.items()):
                commands.append(_command(name, helps.get(name, ""), sub))
        else:
            _add_option(top, action)
    top.words = [c.name for c in commands]
    return top, commands


def _command(name: str, help_text: str, parser: argparse.ArgumentParser) -> Command:
    command = Command(name, help_text)
    for action in parser._actions:
        if action.option_strings:
            _add_option(command, action)
        elif action.choices:
            command.words += [str(c) for c in action.choices]
        elif action.metavar in _PATH_METAVARS or action.dest in ("files", "file"):
            command.files = True
    if name in _WORDS:
        # A broken knowledge base or install still gets the options completed.
        with contextlib.suppress(UserError, ImportError, OSError):
            command.words += _WORDS[name]()
    return command


def _add_option(command: Command, action: argparse.Action) -> None:
    if action.help == argparse.SUPPRESS:
        return
    for flag in action.option_strings:
        command.options.append((flag, str(action.help or "")))
        if action.nargs == 0:
            continue
        if (
            action.metavar in _PATH_METAVARS
            or action.type in (argparse.FileType,)
            or "DIR" in str(action.metavar)
        ):
            command.file_options.append(flag)
        else:
            command.value_options.append(flag)


# -- scripts ----------------------------------------------------------------------------------


def bash_script(top: Command, commands: list[Command]) -> str:
    """The bash completion script for the command tree."""
    skip = " ".join(top.value_options + top.file_options)
    cases = []
    for c in commands:
        words = " ".join(c.words)
        options = " ".join(flag for flag, _ in c.options)
        files = "1" if c.files else ""
        cases.append(f'        {c.name}) words="{words}"; options="{options}"; files="{files}";;')
    file_flags = sorted({f for c in [top, *commands] for f in c.file_options})
    value_flags = sorted({f for c in [top, *commands] for f in c.value_options} - set(file_flags))
    top_words = " ".join(top.words)
    top_options = " ".join(flag for flag, _ in top.options)
    return "\n".join(
        [
            '# triage tab completion for bash: eval "$(triage completion bash)"',
            "_triage() {",
            '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
            '    local cmd="" words="" options="" files="" i',
            "    for ((i = 1; i < COMP_CWORD; i++)); do",
            '        case "${COMP_WORDS[i]}" in',
            f"            {_alternatives(skip.split())}) ((i++));;",
            "            -*) ;;",
            '            *) cmd="${COMP_WORDS[i]}"; break;;',
            "        esac",
            "    done",
            '    case "$prev" in',
            f'        {_alternatives(file_flags)}) COMPREPLY=($(compgen -f -- "$cur")); return;;',
            f"        {_alternatives(value_flags)}) COMPREPLY=(); return;;",
            "    esac",
            '    case "$cmd" in',
            f'        "") words="{top_words}"; options="{top_options}";;',
            *cases,
            "    esac",
            '    if [[ "$cur" == -* ]]; then words="$options"; fi',
            '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
            '    if [[ -n "$files" && "$cur" != -* ]]; then',
            '        COMPREPLY+=($(compgen -f -- "$cur"))',
            "    fi",
            "}",
            "complete -o default -F _triage triage",
            "",
        ]
    )


def _alternatives(flags: list[str]) -> str:
    return "|".join(flags) if flags else "--no-such-option--"


def zsh_script(top: Command, commands: list[Command]) -> str:
    """zsh runs the bash function through its bashcompinit layer (part of zsh itself)."""
    return "\n".join(
        [
            '# triage tab completion for zsh: eval "$(triage completion zsh)" (after compinit)',
            "autoload -U +X compinit && { (( $+functions[compdef] )) || compinit; }",
            "autoload -U +X bashcompinit && bashcompinit",
            bash_script(top, commands),
        ]
    )


def fish_script(top: Command, commands: list[Command]) -> str:
    """The fish completion script for the command tree."""
    lines = [
        "# triage tab completion for fish: triage completion fish > ~/.config/fish/completions/triage.fish",
        "complete -c triage -f",
    ]
    names = " ".join(c.name for c in commands)
    for flag, help_text in top.options:
        lines.append(
            f"complete -c triage -n 'not __fish_seen_subcommand_from {names}' {_fish_flag(flag)}"
            f" -d {_fish_quote(help_text)}"
        )
    for c in commands:
        lines.append(
            f"complete -c triage -n 'not __fish_seen_subcommand_from {names}' -a {c.name} -d {_fish_quote(c.help)}"
        )
    for c in commands:
        when = f"-n '__fish_seen_subcommand_from {c.name}'"
        for flag, help_text in c.options:
            takes = " -r -F" if flag in c.file_options else " -x" if flag in c.value_options else ""
            lines.append(f"complete -c triage {when} {_fish_flag(flag)}{takes} -d {_fish_quote(help_text)}")
        if c.words:
            lines.append(f"complete -c triage {when} -a {_fish_quote(' '.join(c.words))}")
        if c.files:
            lines.append(f"complete -c triage {when} -F")
    return "\n".join(lines) + "\n"


def _fish_flag(flag: str) -> str:
    return f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}"


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def run(args: argparse.Namespace) -> int:
    """Run the command; returns its exit status."""
    root = getattr(args, "root_parser", None)
    if not isinstance(root, argparse.ArgumentParser):
        raise UserError("completion needs the whole command line; run it as `triage completion SHELL`")
    top, commands = describe(root)
    script = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}[args.shell](top, commands)
    print(script, end="")
    return Exit.OK
