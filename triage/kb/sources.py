"""Reading the knowledge directory: the raw files, parsed with line numbers, and their fingerprint."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triage.core.errors import UserError, shown
from triage.kb.fingerprint import COMPILED_NAME, fingerprint, read_source, source_files

__all__ = ["COMPILED_NAME", "SourceFile", "Sources", "fingerprint", "read_sources", "source_paths"]


def source_paths(root: Path) -> list[Path]:
    """Every file the knowledge base is built from, in a stable order."""
    return [Path(p) for p in source_files(root)]


@dataclass
class SourceFile:
    """One knowledge file: its text, parsed data, or why it could not be read."""

    path: Path
    rel: str  # path relative to the knowledge directory's parent, for messages
    text: str | None = None
    data: Any = None
    error: str | None = None  # why the file could not be read or parsed
    error_line: int = 0


@dataclass
class Sources:
    """Every knowledge file of one directory."""

    root: Path
    entries: list[SourceFile] = field(default_factory=list)
    top: dict[str, SourceFile] = field(default_factory=dict)

    def all_files(self) -> list[SourceFile]:
        return [*self.top.values(), *self.entries]


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root.parent))
    except ValueError:
        return str(path)


def read_sources(root: Path) -> Sources:
    """Read and parse every knowledge file; problems are recorded per file, not raised."""
    from triage.kb import yaml_lines

    if not root.is_dir():
        raise UserError(f"knowledge directory not found: {shown(str(root))}")
    sources = Sources(root=root)
    for path in source_paths(root):
        item = SourceFile(path=path, rel=_display(path, root))
        try:
            item.text = read_source(path).decode("utf-8")
        except FileNotFoundError:
            item.error = "file is missing"
        except UnicodeDecodeError as exc:
            item.error = f"not UTF-8 (byte {exc.start})"
        except OSError as exc:
            item.error = f"cannot be read ({exc.strerror})"
        if item.text is not None:
            try:
                item.data = yaml_lines.parse(item.text)
            except yaml_lines.YamlSyntaxError as exc:
                item.error = f"YAML syntax error: {exc}"
                item.error_line = exc.line
        if path.parent.name == "entries":
            sources.entries.append(item)
        else:
            sources.top[path.name] = item
    return sources
