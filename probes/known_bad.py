"""Known-bad versions: knowledge/known_bad_versions.yaml compared with what is installed.

The list is data (one item per release with a verified bug: its condition, fix, entry and the thread
that established it). This module finds the file the way `triage` finds its knowledge (the
TRIAGE_KNOWLEDGE override, the copy bundled in the wheel, the checkout's), reads it, and matches the
version specifiers. Specifiers are the small subset the file uses, compared numerically: `==X`
(`==X.*` for a series), `!=X`, `>=X`, `>X`, `<=X`, `<X`, comma-separated, all of which must hold.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FILE_NAME = "known_bad_versions.yaml"
COMPONENTS = ("torch", "nccl")
FIELDS = ("id", "component", "versions", "when", "symptom", "fix", "entry", "reference")
_CLAUSE = re.compile(r"^\s*(==|!=|>=|<=|>|<)\s*([0-9][0-9A-Za-z.+*-]*)\s*$")


@dataclass(frozen=True)
class KnownBad:
    """A release known to break distributed jobs (knowledge/known_bad_versions.yaml)."""

    id: str
    component: str
    versions: str
    when: str
    symptom: str
    fix: str
    entry: str
    reference: str
    see_also: tuple[str, ...] = ()


def knowledge_root() -> Path:
    """The knowledge directory: $TRIAGE_KNOWLEDGE, the wheel's bundled copy, or the checkout's."""
    override = os.environ.get("TRIAGE_KNOWLEDGE")
    if override:
        return Path(override)
    base = Path(__file__).resolve().parent.parent  # site-packages, or the checkout
    bundled = base / "triage" / "_knowledge"
    return bundled if bundled.is_dir() else base / "knowledge"


def parse_items(data: Any) -> tuple[list[KnownBad], list[str]]:
    """The items of a parsed file, and what is wrong with the ones that are not usable."""
    items: list[KnownBad] = []
    problems: list[str] = []
    if not isinstance(data, list):
        return [], [f"{FILE_NAME} must be a list of items"]
    for index, raw in enumerate(data):
        if not isinstance(raw, dict):
            problems.append(f"item {index} is not a mapping")
            continue
        missing = [name for name in FIELDS if not isinstance(raw.get(name), str) or not raw[name].strip()]
        if missing:
            problems.append(f"item {index} ({raw.get('id', '?')}) lacks {', '.join(missing)}")
            continue
        if raw["component"] not in COMPONENTS:
            problems.append(f"item {raw['id']}: component {raw['component']!r} is not one of {COMPONENTS}")
            continue
        bad = [c for c in raw["versions"].split(",") if not _CLAUSE.match(c)]
        if bad:
            problems.append(f"item {raw['id']}: cannot read the specifier {bad[0]!r}")
            continue
        see_also = raw.get("see_also") or []
        items.append(
            KnownBad(
                **{name: raw[name].strip() for name in FIELDS},
                see_also=tuple(str(u) for u in see_also) if isinstance(see_also, list) else (),
            )
        )
    return items, problems


def load(root: Path | None = None) -> tuple[list[KnownBad], list[str], Path]:
    """(items, problems, path) of the known-bad list; a missing file is a problem, not a crash."""
    import yaml

    path = (root or knowledge_root()) / FILE_NAME
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        return [], [f"cannot read {path}: {exc.strerror or exc}"], path
    except yaml.YAMLError as exc:
        return [], [f"cannot parse {path}: {exc}"], path
    items, problems = parse_items(data)
    return items, problems, path


def _numbers(version: str) -> tuple[int, ...]:
    """'2.7.0+cu126' -> (2, 7, 0); '2.26.2' -> (2, 26, 2); pre-release tails are ignored."""
    core = version.split("+", 1)[0]
    parts = []
    for piece in core.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


def _pad(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def matches(version: str, specifier: str) -> bool:
    """Whether `version` satisfies every clause of `specifier`."""
    have = _numbers(version)
    if not have:
        return False
    for clause in specifier.split(","):
        found = _CLAUSE.match(clause)
        if found is None:
            return False
        op, raw = found.groups()
        if op == "==" and raw.endswith(".*"):
            prefix = _numbers(raw[:-2])
            if have[: len(prefix)] != prefix:
                return False
            continue
        mine, theirs = _pad(have, _numbers(raw))
        ok = {
            "==": mine == theirs,
            "!=": mine != theirs,
            ">=": mine >= theirs,
            "<=": mine <= theirs,
            ">": mine > theirs,
            "<": mine < theirs,
        }[op]
        if not ok:
            return False
    return True


def installed_matches(items: Sequence[KnownBad], installed: Mapping[str, str]) -> list[KnownBad]:
    """The items whose component is installed (installed: component -> version) at a listed version."""
    return [
        item
        for item in items
        if installed.get(item.component) and matches(installed[item.component], item.versions)
    ]
