"""The knowledge base as typed, immutable values.

Everything downstream (matcher, walker, renderers, front ends) works on these types, never on
raw YAML, so a field renamed in the data is caught in one place: the loader.

They are NamedTuples rather than dataclasses on purpose: `triage ask` builds them on every run,
and importing and creating dataclasses costs more than the rest of the matching (about 25 ms).
"""

from __future__ import annotations

from collections.abc import Mapping

TYPE_CHECKING = False  # mypy reads it as true; importing it from typing would load typing
if TYPE_CHECKING:
    from typing import Literal, NamedTuple

    EntryKind = Literal["diagnosis", "technique", "checklist", "out-of-scope"]
else:
    from triage.core.records import NamedTuple

ENTRY_KINDS: tuple[str, ...] = ("diagnosis", "technique", "checklist", "out-of-scope")
VERIFY_CHANGES: tuple[str, ...] = (
    "batch_size",
    "learning_rate",
    "precision",
    "data_order",
    "data_sharding",
    "resume_point",
    "normalization",
)
FACT_TYPES: tuple[str, ...] = ("enum", "bool", "int", "float", "string", "list")
BRANCHABLE_FACT_TYPES: tuple[str, ...] = ("enum", "bool")


class Signature(NamedTuple):
    """A log line an entry's failure prints: a regex, its weight and a note."""

    pattern: str
    weight: float = 1.0
    note: str = ""
    # True for lines that usually echo another rank's failure (a watchdog timeout on a survivor,
    # torchrun's ChildFailedError summary): a log scan ranks them below an earlier real failure.
    echo: bool = False
    # Real log lines the pattern must match (checked by `triage kb check`).
    examples: tuple[str, ...] = ()
    # True for lines that name the entry only when several processes did the same thing (raced on
    # one file): in a log that shows one process at most, the line is only a hint (single.py).
    several: bool = False


class Verify(NamedTuple):
    """Whether the fix changes the experiment, what it changes and why."""

    needed: bool
    why: str
    changes: tuple[str, ...] = ()


class Reference(NamedTuple):
    """A link carried over from the source material."""

    title: str
    url: str


class Confirm(NamedTuple):
    """A probe fact whose values support an entry."""

    fact: str
    values: tuple[str, ...]
    note: str = ""


class Cases(NamedTuple):
    """Phrasings that must and must not rank an entry first."""

    match: tuple[str, ...] = ()
    no_match: tuple[str, ...] = ()


class Entry(NamedTuple):
    """One failure, technique, checklist or out-of-scope leaf."""

    id: str
    title: str
    section: str
    kind: str
    summary: str
    symptoms: tuple[str, ...]
    signatures: tuple[Signature, ...]
    root_cause: str
    fix: str
    verify: Verify
    related: tuple[str, ...] = ()
    references: tuple[Reference, ...] = ()
    confirm: tuple[Confirm, ...] = ()
    cases: Cases = Cases()
    source: str = ""

    @property
    def covered(self) -> bool:
        """False for the honest out-of-scope leaves."""
        return self.kind != "out-of-scope"


class Section(NamedTuple):
    """A section of the knowledge base."""

    id: str
    title: str
    blurb: str = ""


class Fact(NamedTuple):
    """A fact a probe may report: its probe, type and values."""

    name: str
    probe: str
    type: str
    description: str
    values: tuple[str, ...] = ()

    @property
    def branch_values(self) -> tuple[str, ...]:
        """The values a probe node may branch on."""
        if self.type == "bool":
            return ("true", "false")
        return self.values


class Option(NamedTuple):
    """One answer to a question and where it leads."""

    label: str
    target: str
    keywords: tuple[str, ...] = ()


class QuestionNode(NamedTuple):
    """A question the user answers."""

    id: str
    prompt: str
    options: tuple[Option, ...]
    help: str = ""
    unknown: str | None = None
    type: Literal["question"] = "question"


class ProbeNode(NamedTuple):
    """A node answered by a probe's fact, with a question to fall back on."""

    id: str
    fact: str
    prompt: str
    branches: dict[str, str]
    fallback: str
    default: str | None = None
    type: Literal["probe"] = "probe"


Node = QuestionNode | ProbeNode


class Graph(NamedTuple):
    """The decision graph: its start and its nodes."""

    start: str
    nodes: Mapping[str, Node]


class KnowledgeBase(NamedTuple):
    """Everything triage knows, loaded and validated."""

    entries: Mapping[str, Entry]
    sections: tuple[Section, ...]
    facts: Mapping[str, Fact]
    graph: Graph
    # Pre-parsed Markdown of each entry's fields (see triage.kb.markdown_ast), keyed by entry id and
    # field name, so the terminal renderer never imports markdown-it.
    docs: Mapping[str, Mapping[str, list[dict[str, object]]]] = {}
    # Matching vocabulary (knowledge/vocabulary.yaml): canonical term -> the variants users type.
    vocabulary: Mapping[str, tuple[str, ...]] = {}
    # The matcher's precomputed index (triage.core.matcher.build_index_data), when loaded from
    # compiled.json; None means the matcher builds it from the entries.
    match_index: Mapping[str, object] | None = None

    def entry(self, entry_id: str) -> Entry | None:
        """Look an entry up by id, forgiving case and zero padding (d09, D9, d9)."""
        return self.entries.get(normalize_id(entry_id))

    def section_title(self, section_id: str) -> str:
        for section in self.sections:
            if section.id == section_id:
                return section.title
        return section_id


def to_plain(value: object) -> object:
    """NamedTuples and tuples as JSON-ready dicts and lists, recursively."""
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: to_plain(v) for k, v in value._asdict().items()}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: to_plain(v) for k, v in value.items()}
    return value


def normalize_id(raw: str) -> str:
    """'d09' -> 'D9', 'mn01' -> 'MN1'; anything else is returned upper-cased."""
    text = raw.strip().upper()
    prefix = text.rstrip("0123456789")
    digits = text[len(prefix) :]
    if prefix and digits:
        return f"{prefix}{int(digits)}"
    return text


def file_prefix(entry_id: str) -> str:
    """'D9' -> 'D09', the prefix an entry's file name must carry."""
    prefix = entry_id.rstrip("0123456789")
    digits = entry_id[len(prefix) :]
    return f"{prefix}{int(digits):02d}" if digits else entry_id
