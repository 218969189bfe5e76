"""The real-report corpus in eval/: loading its items and splitting them into train and test.

    python bench/corpus.py          # how many items of each kind fall in each split

Shared by bench/bench_eval.py (the figures) and bench/fit_confidence.py (the confidence model,
fitted on train only). An item's split is a hash of its thread (eval/README.md), so every item of
one thread lands on the same side; `source: synthetic` items hash their own text instead, which
spreads them over both splits.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from triage.core.model import KnowledgeBase

REPO = Path(__file__).resolve().parent.parent
EVAL = REPO / "eval"
Kind = Literal["queries", "logs", "abstain"]
Split = Literal["train", "test"]
KINDS: tuple[Kind, ...] = ("queries", "logs", "abstain")
TEST_BUCKETS = 3  # sha256(thread) % 10 < 3 is test


@dataclass(frozen=True)
class Item:
    kind: Kind
    text: str
    expect: tuple[str, ...]  # best first; ("none",) = out of scope (and every abstain item)
    alternates: tuple[str, ...]
    source: str
    first_rank: int | None
    is_log: bool
    origin: str  # file:position, for listing train misses
    split: Split = field(default="train")

    @property
    def accepted(self) -> frozenset[str]:
        """Every id that counts as a right answer (the thread's label and its unsettled alternates)."""
        return frozenset((*self.expect, *self.alternates))


def names_right(kb: KnowledgeBase, item: Item, entry_id: str) -> bool:
    """Whether an entry named first is a right answer for the item: one of its labels or of the
    alternates of an unsettled thread; for an out-of-scope item (`none`), an out-of-scope leaf (X)
    or one of its alternates (eval/LABELS.md: alternates are the other ids an unsettled thread
    leaves open, a `none` label's included)."""
    if item.expect == ("none",):
        return not kb.entries[entry_id].covered or entry_id in item.alternates
    return entry_id in item.accepted


def thread_of(source: str) -> str:
    """The thread a source URL names: no #fragment, no query string, no trailing slash."""
    return source.split("#", 1)[0].split("?", 1)[0].rstrip("/")


def split_of(source: str, text: str) -> Split:
    key = text if source.strip() == "synthetic" else thread_of(source.strip())
    bucket = int(hashlib.sha256(key.encode("utf-8")).hexdigest(), 16) % 10
    return "test" if bucket < TEST_BUCKETS else "train"


def _ids(raw: object) -> tuple[str, ...]:
    if raw is None:
        return ()
    values = raw if isinstance(raw, list) else [raw]
    return tuple(str(v).strip().upper() if str(v).strip().lower() != "none" else "none" for v in values)


def item_of(raw: dict[str, object], kind: Kind, origin: str, split: Split | None = None) -> Item:
    """One labelled item as the YAML holds it (`query` or `log`, `expect`, `alternates`, `source`,
    `first_rank`); its split by its thread unless given."""
    is_log = "log" in raw
    text = str(raw["log"] if is_log else raw["query"])
    source = str(raw.get("source", ""))
    rank = raw.get("first_rank")
    return Item(
        kind=kind,
        text=text,
        expect=("none",) if kind == "abstain" else _ids(raw.get("expect")),
        alternates=_ids(raw.get("alternates")),
        source=source,
        first_rank=int(rank) if isinstance(rank, int) else None,
        is_log=is_log,
        origin=origin,
        split=split or split_of(source, text),
    )


def load(kind: Kind, root: Path = EVAL) -> list[Item]:
    """Every item of one kind, from every YAML file in its folder, in a stable order."""
    import yaml

    items: list[Item] = []
    for path in sorted((root / kind).glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or []
        for position, raw in enumerate(data, 1):
            items.append(item_of(raw, kind, f"{path.relative_to(root.parent)}#{position}"))
    return items


def load_all(root: Path = EVAL) -> dict[str, list[Item]]:
    return {kind: load(kind, root) for kind in KINDS}


def dev_dir() -> Path | None:
    """../shared/eval (the small dev set) beside the checkout, or beside its parent for worktrees."""
    for base in (REPO.parent, REPO.parent.parent):
        candidate = base / "shared" / "eval"
        if (candidate / "dev_queries.yaml").is_file():
            return candidate
    return None


def main() -> int:
    for kind, items in load_all().items():
        train = sum(1 for i in items if i.split == "train")
        print(f"{kind:8} {len(items):4} items: train {train}, test {len(items) - train}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
