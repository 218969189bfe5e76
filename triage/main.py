"""The `triage` command line: parse, dispatch to a command module, turn errors into exit codes.

This is the one module above the front ends. Each subcommand is a module that defines HELP,
`add_arguments(parser)` and `run(args) -> int`: the terminal commands are discovered in
`triage/cli/`, and the two commands that open another front end live in that front end's package
(`triage tui` in `triage/tui/command.py`, `triage docs` in `triage/site/command.py`).
Command modules import their heavy dependencies inside `run`, keeping `triage ask` fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType

from triage import __version__
from triage.core.errors import UserError, shown
from triage.core.exitcodes import Exit
from triage.core.termination import Terminated, install_signal_handlers

DEFAULT_COMMAND = "tui"  # `triage` with no arguments opens the interactive app when installed


_CLI_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cli")
# Commands that belong to a front end other than the terminal one.
_FRONT_END_COMMANDS = {"tui": "triage.tui.command", "docs": "triage.site.command"}
_GLOBAL_OPTIONS_WITH_VALUE = ("--kb",)


def _command_names() -> list[str]:
    cli = [n[:-3] for n in os.listdir(_CLI_DIR) if n.endswith(".py") and not n.startswith("_")]
    return sorted([*cli, *_FRONT_END_COMMANDS])


def _module_path(name: str) -> str:
    return _FRONT_END_COMMANDS.get(name, f"triage.cli.{name}")


def _chosen(argv: list[str], names: list[str]) -> str | None:
    """The command named on the line, found without argparse (so only its module is imported)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _GLOBAL_OPTIONS_WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            return arg if arg in names else None
    return None


def _command_modules(argv: list[str]) -> dict[str, ModuleType]:
    """Import the command that will run; all of them only when help or an error needs the full list."""
    names = _command_names()
    chosen = _chosen(argv, names)
    wanted = [chosen] if chosen else names
    return {name: importlib.import_module(_module_path(name)) for name in wanted}


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter, given the width itself: the default asks shutil, whose import pulls
    in the compression modules, on every run (argparse builds formatters while parsing)."""

    def __init__(
        self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None
    ) -> None:
        if width is None:
            try:
                width = os.get_terminal_size(sys.stderr.fileno()).columns - 2
            except (OSError, ValueError):
                width = 98
        super().__init__(prog, indent_increment, max_help_position, width)


def build_parser(modules: dict[str, ModuleType]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="triage",
        formatter_class=_Formatter,
        description=(
            "Symptom-to-fix triage for distributed PyTorch jobs (torchrun, DDP, FSDP, DeepSpeed, "
            "Accelerate, NCCL, multi-node). Run with no command for the interactive app."
        ),
        epilog='Examples:  triage ask "hangs at end of epoch"   |   triage show D9   |   triage list',
    )
    parser.add_argument("--version", action="version", version=f"triage {__version__}")
    parser.add_argument("--kb", metavar="DIR", help="use this knowledge directory instead of the bundled one")
    parser.add_argument(
        "--no-color", action="store_true", help="plain output even on a terminal (NO_COLOR works too)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in sorted(modules.items()):
        command = sub.add_parser(
            name,
            help=module.HELP,
            description=getattr(module, "DESCRIPTION", module.HELP),
            formatter_class=_Formatter,
        )
        module.add_arguments(command)
    return parser


# Commands whose output is not a text stream: the app draws the terminal itself, docs writes files.
_UNREDACTED_COMMANDS = ("tui", "docs")


def main(argv: list[str] | None = None) -> int:
    streams = (sys.stdout, sys.stderr)
    argv = list(sys.argv[1:] if argv is None else argv)
    if _chosen(argv, _command_names()) not in _UNREDACTED_COMMANDS and argv:
        # The one redaction pass at the terminal boundary: every command's output, JSON and errors.
        from triage.core.redact import RedactingStream

        sys.stdout, sys.stderr = (RedactingStream(s) for s in streams)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = streams


def _main(argv: list[str]) -> int:
    debug = bool(os.environ.get("TRIAGE_DEBUG"))
    install_signal_handlers()  # SIGTERM unwinds like Ctrl-C, so no child is left behind
    try:
        modules = _command_modules(argv)
        parser = build_parser(modules)
        args = parser.parse_args(argv)
        if args.kb is not None:
            if not args.kb.strip():
                raise UserError("--kb: the directory name is empty")
            os.environ["TRIAGE_KNOWLEDGE"] = args.kb
        if args.no_color:
            os.environ["NO_COLOR"] = "1"
        name = args.command or (DEFAULT_COMMAND if DEFAULT_COMMAND in modules else None)
        if name is None:
            parser.print_help()
            return Exit.OK
        if args.command is None:
            args = parser.parse_args([*argv, name])
        return int(modules[name].run(args))
    except UserError as exc:
        print(f"triage: error: {exc}", file=sys.stderr)
        return Exit.USAGE
    except KeyboardInterrupt:
        print("triage: interrupted", file=sys.stderr)
        return Exit.INTERRUPTED
    except Terminated as exc:
        print(f"triage: terminated (signal {exc.signum})", file=sys.stderr)
        return 128 + exc.signum
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): not an error worth a traceback.
        sys.stderr.close()
        return Exit.OK
    except OSError as exc:
        if debug or exc.filename is None:
            return _internal(exc, debug)
        # A path the user named that the system refuses (too long, a loop of links, a full disk).
        print(f"triage: error: {shown(exc.filename)}: {exc.strerror or exc}", file=sys.stderr)
        return Exit.USAGE
    except Exception as exc:
        return _internal(exc, debug)


def _internal(exc: Exception, debug: bool) -> int:
    if debug:
        raise exc
    print(
        f"triage: internal error: {type(exc).__name__}: {shown(exc, 300)} (set TRIAGE_DEBUG=1 for the traceback)",
        file=sys.stderr,
    )
    return Exit.INTERNAL
