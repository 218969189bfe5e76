"""The compiled knowledge: one JSON file that `ask` loads instead of parsing YAML and Markdown.

`triage kb build` writes it; `triage kb check` fails when it is stale. At load time the
fingerprint of the sources is compared, so a stale file is never used silently.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from triage.core.model import (
    Cases,
    Confirm,
    Entry,
    Fact,
    Graph,
    KnowledgeBase,
    Node,
    Option,
    ProbeNode,
    QuestionNode,
    Reference,
    Section,
    Signature,
    Verify,
    to_plain,
)

FORMAT = 3  # 3: signatures carry their bounded pattern and reach
DOC_FIELDS = ("root_cause", "fix")


class _LazyDocs(Mapping[str, Mapping[str, list[dict[str, object]]]]):
    """Each entry's parsed Markdown stays a JSON string until asked for: `ask` renders one entry,
    so decoding the others would be wasted work on every run."""

    def __init__(self, raw: dict[str, str]) -> None:
        self._raw = raw
        self._decoded: dict[str, Mapping[str, list[dict[str, object]]]] = {}

    def __getitem__(self, key: str) -> Mapping[str, list[dict[str, object]]]:
        if key not in self._decoded:
            self._decoded[key] = json.loads(self._raw[key])
        return self._decoded[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


def with_docs(kb: KnowledgeBase, root: str | None = None) -> KnowledgeBase:
    """Attach the parsed Markdown of every entry (imports markdown-it) and the matcher's index, with
    the English background and, from `root`, the confidence model (triage.kb.matching)."""
    from triage.core.match_index import build_index_data, compact_index
    from triage.kb import markdown_ast
    from triage.kb.matching import english_zipf, read_confidence

    docs = {
        e.id: {name: markdown_ast.parse(getattr(e, name)) for name in DOC_FIELDS} for e in kb.entries.values()
    }
    confidence = read_confidence(root) if root is not None else None
    index = compact_index(build_index_data(kb, english_zipf(), confidence))
    return kb._replace(docs=docs, match_index=index)


def to_json(kb: KnowledgeBase, fingerprint: str) -> str:
    """The knowledge base as compiled.json text."""
    payload = {
        "format": FORMAT,
        "fingerprint": fingerprint,
        "sections": to_plain(kb.sections),
        "facts": to_plain(list(kb.facts.values())),
        "graph": {"start": kb.graph.start, "nodes": to_plain(list(kb.graph.nodes.values()))},
        "entries": to_plain(list(kb.entries.values())),
        "docs": {k: json.dumps(v, ensure_ascii=False, separators=(",", ":")) for k, v in kb.docs.items()},
        "vocabulary": to_plain(kb.vocabulary),
        "index": kb.match_index,
    }
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), sort_keys=False) + "\n"


MAX_COMPILED_BYTES = 64 << 20


def read(path: str) -> dict[str, Any] | None:
    """The compiled knowledge, or None when it is missing, unreadable or not ours (then the YAML
    sources are used, and `kb check` says why)."""
    from triage.kb.fingerprint import read_source

    try:
        data = json.loads(read_source(path, MAX_COMPILED_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


def from_json(data: dict[str, Any]) -> KnowledgeBase:
    """The knowledge base from compiled.json data."""
    entries = {}
    for raw in data["entries"]:
        entry = Entry(
            id=raw["id"],
            title=raw["title"],
            section=raw["section"],
            kind=raw["kind"],
            summary=raw["summary"],
            symptoms=tuple(raw["symptoms"]),
            signatures=tuple(
                Signature(**{**s, "examples": tuple(s.get("examples", ()))}) for s in raw["signatures"]
            ),
            root_cause=raw["root_cause"],
            fix=raw["fix"],
            verify=Verify(raw["verify"]["needed"], raw["verify"]["why"], tuple(raw["verify"]["changes"])),
            related=tuple(raw["related"]),
            references=tuple(Reference(**r) for r in raw["references"]),
            confirm=tuple(Confirm(c["fact"], tuple(c["values"]), c["note"]) for c in raw["confirm"]),
            cases=Cases(tuple(raw["cases"]["match"]), tuple(raw["cases"]["no_match"])),
            source=raw["source"],
        )
        entries[entry.id] = entry
    nodes: dict[str, Node] = {}
    for raw in data["graph"]["nodes"]:
        if raw["type"] == "question":
            options = tuple(Option(o["label"], o["target"], tuple(o["keywords"])) for o in raw["options"])
            nodes[raw["id"]] = QuestionNode(raw["id"], raw["prompt"], options, raw["help"], raw["unknown"])
        else:
            nodes[raw["id"]] = ProbeNode(
                raw["id"], raw["fact"], raw["prompt"], dict(raw["branches"]), raw["fallback"], raw["default"]
            )
    return KnowledgeBase(
        entries=entries,
        sections=tuple(Section(**s) for s in data["sections"]),
        facts={
            f["name"]: Fact(f["name"], f["probe"], f["type"], f["description"], tuple(f["values"]))
            for f in data["facts"]
        },
        graph=Graph(data["graph"]["start"], nodes),
        docs=_LazyDocs(data["docs"]),
        vocabulary={k: tuple(v) for k, v in data["vocabulary"].items()},
        match_index=data.get("index"),
    )
