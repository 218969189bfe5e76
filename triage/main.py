"""The `triage` command line: parse, dispatch to a command module, turn errors into exit codes.

This is the one module above the front ends. Each subcommand is a module that defines HELP,
`add_arguments(parser)` and `run(args) -> int`: the terminal commands are discovered in
`triage/cli/`, and the two commands that open another front end live in that front end's package
(`triage tui` in `triage/tui/command.py`, `triage docs` in `triage/site/command.py`).
Command modules import their heavy dependencies inside `run`, keeping `triage ask` fast.
"""

from __future__ import annotations

import gc
import os
import sys

from triage import __version__
from triage.core.errors import UserError, shown
from triage.core.exitcodes import Exit

TYPE_CHECKING = False  # mypy reads it as true; importing it from typing would load typing
if TYPE_CHECKING:
    from typing import NoReturn, TextIO

if TYPE_CHECKING:
    import argparse
    from types import ModuleType, SimpleNamespace

    from triage.core.termination import Terminated

DEFAULT_COMMAND = "tui"  # `triage` with no arguments opens the interactive app when installed


_CLI_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cli")
# Commands that belong to a front end other than the terminal one.
_FRONT_END_COMMANDS = {"tui": "triage.tui.command", "docs": "triage.site.command"}
_GLOBAL_OPTIONS_WITH_VALUE = ("--kb", "--script")
_DESCRIBES_ALL = ("completion",)  # commands that need every other command's parser


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
    wanted = [chosen] if chosen and chosen not in _DESCRIBES_ALL else names
    import importlib  # not at the top: `ask` imports its one module itself (importlib loads warnings)

    return {name: importlib.import_module(_module_path(name)) for name in wanted}


def terminal_columns() -> int:
    """COLUMNS when set (as shutil reads it), else the terminal's width, else 100."""
    raw = os.environ.get("COLUMNS", "")
    if raw.isdigit() and int(raw) > 20:
        return int(raw)
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        return 100


def _formatters() -> tuple[type[argparse.HelpFormatter], type[argparse.HelpFormatter]]:
    """argparse's formatter, given the width itself (the default asks shutil, whose import pulls in
    the compression modules, on every run), and one that keeps the epilog's line breaks. Made here,
    with argparse imported, because `triage ask` does without argparse."""
    import argparse

    class Formatter(argparse.HelpFormatter):
        def __init__(
            self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None
        ) -> None:
            if width is None:
                width = terminal_columns() - 2
            super().__init__(prog, indent_increment, max_help_position, width)

    class RawEpilogFormatter(Formatter):
        def _fill_text(self, text: str, width: int, indent: str) -> str:
            if "\n" in text:
                return "\n".join(indent + line for line in text.splitlines())
            return super()._fill_text(text, width, indent)

    return Formatter, RawEpilogFormatter


def build_parser(modules: dict[str, ModuleType]) -> argparse.ArgumentParser:
    """The `triage` parser with a subcommand per command module."""
    import argparse

    formatter, raw_epilog_formatter = _formatters()

    class Parser(argparse.ArgumentParser):
        """argparse, with a bad command line as one line (exit 2) like every other bad input,
        rather than the usage block and the error on separate lines."""

        def error(self, message: str) -> NoReturn:
            raise UserError(f"{message} (`{self.prog} --help` lists the options)")

    parser = Parser(
        prog="triage",
        formatter_class=raw_epilog_formatter,
        description=(
            "Symptom-to-fix triage for distributed PyTorch jobs (torchrun, DDP, FSDP, DeepSpeed, "
            "Accelerate, NCCL, multi-node). Run with no command for the interactive app."
        ),
        epilog=(
            "examples:\n"
            '  triage ask "hangs at end of epoch"   the likely cause and its fix\n'
            "  triage log train.log                 diagnose a failed run's output\n"
            "  triage report --out issue.md         what a bug report needs, secrets redacted\n"
            '  eval "$(triage completion bash)"     tab completion (also zsh and fish)\n'
            "Every command has --help."
        ),
    )
    parser.add_argument("-V", "--version", action="version", version=f"triage {__version__}")
    parser.add_argument("--kb", metavar="DIR", help="use this knowledge directory instead of the bundled one")
    parser.add_argument(
        "--no-color", action="store_true", help="plain output even on a terminal (NO_COLOR works too)"
    )
    parser.add_argument(
        "--script",
        dest="global_script",
        metavar="PATH",
        help="your training script, for the commands that read it (the app, walk, probe): same as their --script",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in sorted(modules.items()):
        command = sub.add_parser(
            name,
            help=module.HELP,
            description=getattr(module, "DESCRIPTION", module.HELP),
            formatter_class=formatter,
        )
        module.add_arguments(command)
    return parser


class _PipeSafeStdout:
    """stdout that turns a reader going away (`triage log big.log | head -1`) into silence.

    Without it the exit status would depend on the race between the reader closing the pipe and
    the command printing: BrokenPipeError, or not. With it the command runs to its end and exits
    with the status its result deserves, whatever the reader did."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._silence()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._silence()

    def _silence(self) -> None:
        self.broken = True
        # Point the descriptor at /dev/null so the interpreter's own flush at exit succeeds too.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def _fast_ask(argv: list[str]) -> SimpleNamespace | None:
    """`triage [--no-color] [--kb DIR] ask ...` parsed without argparse: `ask` is the path users
    feel, and importing argparse costs more than its own work. None for every other command line,
    and for an `ask` line with anything argparse should explain (help, a bad option)."""
    options: dict[str, str] = {}
    position = 0
    while position < len(argv) and argv[position] in ("--no-color", "--kb"):
        if argv[position] == "--kb":
            if position + 1 >= len(argv):
                return None
            options["kb"] = argv[position + 1]
            position += 2
        else:
            options["no_color"] = "1"
            position += 1
    if position >= len(argv) or argv[position] != "ask":
        return None
    from triage.cli.ask import parse_fast

    args = parse_fast(argv[position + 1 :])
    if args is None:
        return None
    if "kb" in options:
        if not options["kb"].strip():
            raise UserError("--kb: the directory name is empty")
        os.environ["TRIAGE_KNOWLEDGE"] = options["kb"]
    if "no_color" in options:
        os.environ["NO_COLOR"] = "1"
    return args


# Commands whose output is not a text stream: the app draws the terminal itself, docs writes files.
_UNREDACTED_COMMANDS = ("tui", "docs")


def main(argv: list[str] | None = None) -> int:
    """The `triage` command: run it with every line it prints redacted; returns the exit status."""
    streams = (sys.stdout, sys.stderr)
    whole_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    # `ask` is short and its input bounded (1 MB): it leaves few cycles, while the collector's passes
    # over the tens of thousands of objects that live to its end (its modules, the decoded knowledge)
    # and the full one at the interpreter's exit were a seventh of its time.
    paused = _chosen(argv, ["ask"]) is not None and gc.isenabled()
    if paused:
        gc.disable()
    if _chosen(argv, list(_UNREDACTED_COMMANDS)) is None and argv:  # (no directory listing for `ask`)
        # The one redaction pass at the terminal boundary: every command's output, JSON and errors.
        from triage.core.redact import RedactingStream

        sys.stdout, sys.stderr = (RedactingStream(s) for s in streams)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = streams
        if paused:
            if whole_process:
                gc.freeze()  # the process ends now: nothing for the final collection to walk
            gc.enable()


def _main(argv: list[str]) -> int:
    """Parse the command line, run the command, and turn errors into exit codes."""
    debug = bool(os.environ.get("TRIAGE_DEBUG"))
    if not isinstance(sys.stdout, _PipeSafeStdout) and sys.stdout is not None:
        sys.stdout = _PipeSafeStdout(sys.stdout)
    try:
        fast = _fast_ask(argv)
        if fast is not None:  # `ask` starts no process, so it needs no signal handlers either
            from triage.cli import ask

            return int(ask.run(fast))
        from triage.core.termination import install_signal_handlers

        install_signal_handlers()  # SIGTERM unwinds like Ctrl-C, so no child is left behind
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
        if args.global_script is not None:
            if not hasattr(args, "script"):
                raise UserError(f"--script: `triage {name}` does not read a training script")
            args.script = args.script or args.global_script
        args.root_parser = parser  # `triage completion` describes the whole command line
        return int(modules[name].run(args))
    except UserError as exc:
        print(f"triage: error: {exc}", file=sys.stderr)
        return Exit.USAGE
    except KeyboardInterrupt:
        print("triage: interrupted", file=sys.stderr)
        return _exit_after_signal(Exit.INTERRUPTED)
    except _terminated() as exc:
        print(f"triage: terminated (signal {exc.signum})", file=sys.stderr)
        return _exit_after_signal(128 + exc.signum)
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


def _terminated() -> type[Terminated]:
    """The exception a handled SIGTERM raises (imported only when an exception gets this far)."""
    from triage.core.termination import Terminated

    return Terminated


def _exit_after_signal(code: int) -> int:
    """After Ctrl-C or SIGTERM, with probe threads still running: end every child, then leave at
    once. A normal exit waits for the interpreter's lock, which a thread loading torch's libraries
    holds for as long as the loading takes (seconds, on a loaded machine)."""
    threading = sys.modules.get("threading")
    if threading is None or threading.active_count() <= 1:
        return code
    children = sys.modules.get("triage.core.children")
    if children is not None:
        children.kill_all()
    import contextlib

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _internal(exc: Exception, debug: bool) -> int:
    if debug:
        raise exc
    print(
        f"triage: internal error: {type(exc).__name__}: {shown(exc, 300)} (set TRIAGE_DEBUG=1 for the traceback)",
        file=sys.stderr,
    )
    return Exit.INTERNAL
