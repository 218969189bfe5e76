"""torchrun command lines in shell launch scripts: which script they start, with how many restarts.

`torchrun --nnodes=2 --max-restarts=3 train.py --lr 0.1` (also `python -m torch.distributed.run`
and the older `torch.distributed.launch`), joined across backslash continuations. Only the text
is read here; the caller resolves the script path and reads it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
_RESTARTS = re.compile(r"^--max[-_]restarts(?:=(?P<value>.*))?$")
# torchrun options that take no value; every other --option takes one (unless written --opt=value).
_FLAGS = frozenset(
    {
        "--standalone",
        "--no-python",
        "--no_python",
        "--run-path",
        "--run_path",
        "--module",
        "-m",
        "--use-env",
        "--use_env",
    }
)


@dataclass(frozen=True)
class Launch:
    """One launch command in a shell script and the settings it passes."""

    line: int  # 1-based line of the command in the shell file
    script: str  # the training script as written (a path, or "-m pkg.mod" for a module)
    max_restarts: int


def _logical_lines(text: str) -> list[tuple[int, str]]:
    joined: list[tuple[int, str]] = []
    start, parts = 0, list[str]()
    for number, raw in enumerate(text.splitlines(), 1):
        if not parts:
            start = number
        stripped = raw.rstrip()
        if stripped.endswith("\\"):
            parts.append(stripped[:-1])
            continue
        parts.append(stripped)
        joined.append((start, " ".join(parts)))
        parts = []
    if parts:
        joined.append((start, " ".join(parts)))
    return joined


def find_launches(text: str) -> list[Launch]:
    """Every torchrun-style command in a shell script, with its script and --max-restarts."""
    found = []
    for line, command in _logical_lines(text):
        if not any(word in command for word in _LAUNCHERS) or command.lstrip().startswith("#"):
            continue
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            continue
        launch = _parse(words, line)
        if launch is not None:
            found.append(launch)
    return found


def _parse(words: list[str], line: int) -> Launch | None:
    index = next((i for i, w in enumerate(words) if w.endswith(_LAUNCHERS)), None)
    if index is None:
        return None
    restarts = 0
    rest = words[index + 1 :]
    i = 0
    while i < len(rest):
        word = rest[i]
        match = _RESTARTS.match(word)
        if match:
            value = match.group("value")
            if value is None and i + 1 < len(rest):
                value = rest[i + 1]
                i += 1
            # A value from a variable ($RESTARTS) still asks for restarts.
            restarts = int(value) if value and value.isdigit() else 1 if value else 0
        elif word in ("-m", "--module") and i + 1 < len(rest):
            return Launch(line, f"-m {rest[i + 1]}", restarts)
        elif word.startswith("$"):
            pass  # an expanded variable of options: its contents are unknown
        elif word.startswith("-"):
            if "=" not in word and word not in _FLAGS:
                i += 1  # the option's value
        else:
            return Launch(line, word, restarts)
        i += 1
    return None
