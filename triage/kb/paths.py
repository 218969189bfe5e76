"""Where the knowledge lives: inside an installed wheel, or beside the package in a checkout.

Plain strings and os.path on purpose: pathlib's import (with urllib.parse and ipaddress) costs
more than locating the files, and this runs on every `triage ask`.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # mypy reads it as true; importing it from typing would load typing
if TYPE_CHECKING:
    from pathlib import Path

# triage/kb/paths.py -> the triage package directory.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def knowledge_root() -> str:
    """The knowledge directory: $TRIAGE_KNOWLEDGE, the wheel's copy, or the checkout's."""
    override = os.environ.get("TRIAGE_KNOWLEDGE")
    if override:
        return override
    bundled = os.path.join(_PACKAGE_DIR, "_knowledge")
    if os.path.isdir(bundled):
        return bundled
    return os.path.join(os.path.dirname(_PACKAGE_DIR), "knowledge")


def knowledge_dir() -> Path:
    """knowledge_root() as a Path, for the commands that work with files."""
    from pathlib import Path

    return Path(knowledge_root())
