"""The compiled knowledge: one file that `ask` loads instead of parsing YAML and Markdown.

`triage kb build` writes it; `triage kb check` fails when it is stale. At load time the
fingerprint of the sources is compared, so a stale file is never used silently.

The file is JSON Lines: a header (format, fingerprint, the name, byte offset and length of each
following line), then one
JSON value per part: sections, vocabulary, the graph's start, each node, each fact, each part of
the matcher's index, each entry, each entry's parsed Markdown, and the index's postings as plain
lines (term TAB posting TAB ...), the terms spread over POSTING_BUCKETS lines by a hash.
`ask` reads it all but decodes only what it uses: a few entries, one entry's Markdown, the index
parts it needs and the postings lines of the query's terms. Parsing the whole file as one JSON document was most of `ask`'s
time.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Mapping

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

TYPE_CHECKING = False  # mypy reads it as true; importing it from typing would load typing
if TYPE_CHECKING:
    from typing import Any


class _Scanning:
    """json.loads's settings, which its C scanner reads by name."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float  # NaN, Infinity, -Infinity


_SCAN: list[Callable[[str, int], tuple[Any, int]]] = []


def loads(data: bytes) -> Any:
    """json.loads for the compiled file's lines, done by the same C scanner, without importing the
    json package: its import compiles half a dozen regexes (whitespace, numbers, escapes) and cost
    more than all that `ask` decodes. A ValueError for what is not one JSON value."""
    text = data.decode("utf-8").strip(" \t\n\r")
    if not _SCAN:
        try:
            from _json import make_scanner
        except ImportError:  # an interpreter without json's C part
            import json

            return json.loads(text)
        _SCAN.append(make_scanner(_Scanning()))  # type: ignore[arg-type]
    try:
        value, end = _SCAN[0](text, 0)
    except StopIteration:
        raise ValueError("not a JSON value") from None
    if end != len(text):
        raise ValueError("more than one JSON value")
    return value


FORMAT = 7  # 7: the header gives each part's place; 6: nodes, facts and index parts on lines of their own; 5: postings in buckets, parts decoded on demand (3: signatures carry their bounded pattern and reach)
DOC_FIELDS = ("root_cause", "fix")


class _Lazy(Mapping[str, "Any"]):
    """Values kept as JSON text until asked for (in their order), decoded by `decode` once each;
    `ready` holds values that are decoded already."""

    def __init__(
        self,
        raw: Mapping[str, bytes],
        decode: Callable[[Any], Any] = lambda value: value,
        ready: dict[str, Any] | None = None,
    ) -> None:
        self._raw = raw
        self._decode = decode
        self._decoded: dict[str, Any] = dict(ready or {})

    def __getitem__(self, key: str) -> Any:
        if key not in self._decoded:
            self._decoded[key] = self._decode(loads(self._raw[key]))
        return self._decoded[key]

    def __iter__(self) -> Iterator[str]:
        yield from self._raw
        yield from (k for k in self._decoded if k not in self._raw)

    def __len__(self) -> int:
        return len(self._raw) + sum(1 for k in self._decoded if k not in self._raw)

    def __contains__(self, key: object) -> bool:
        return key in self._raw or key in self._decoded


POSTING_BUCKETS = 64  # the postings are split by a hash of the term into this many lines


def bucket_of(term: str) -> int:
    """The postings line that holds `term` (a stable hash: the same in every process)."""
    return zlib.crc32(term.encode("utf-8")) % POSTING_BUCKETS


class _Postings(Mapping[str, str]):
    """The index's postings (term -> "weight;entry:strength ...|...") from their plain lines
    (term TAB posting TAB ...), one line per bucket of terms (`lines` by the bucket's number); a
    line is read and split into a dictionary the first time one of its terms is looked up.
    Splitting all of them was a fifth of `ask`."""

    def __init__(self, lines: Mapping[str, bytes]) -> None:
        self._lines = lines
        self._tables: dict[int, dict[str, str]] = {}

    def _table(self, bucket: int) -> dict[str, str]:
        table = self._tables.get(bucket)
        if table is None:
            line = self._lines[str(bucket)].decode("utf-8")
            items = line.split("\t") if line else []
            table = self._tables[bucket] = dict(zip(items[::2], items[1::2], strict=True))
        return table

    def __getitem__(self, key: str) -> str:
        return self._table(bucket_of(key))[key]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._table(bucket_of(key))

    def __iter__(self) -> Iterator[str]:
        for bucket in range(POSTING_BUCKETS):
            yield from self._table(bucket)

    def __len__(self) -> int:
        return sum(len(self._table(b)) for b in range(POSTING_BUCKETS))


def with_docs(kb: KnowledgeBase, root: str | None = None) -> KnowledgeBase:
    """Attach the parsed Markdown of every entry (imports markdown-it) and the matcher's index, with
    the English background and, from `root`, the confidence model, the labelled reports and the
    signature evidence (triage.kb.matching)."""
    from triage.core.match_index import build_index_data, compact_index
    from triage.core.separate import REACH, stored_reach
    from triage.kb import markdown_ast
    from triage.kb.matching import (
        english_zipf,
        read_confidence,
        read_domain,
        read_reports,
        read_signature_evidence,
    )

    docs = {
        e.id: {name: markdown_ast.parse(getattr(e, name)) for name in DOC_FIELDS} for e in kb.entries.values()
    }
    confidence = read_confidence(root) if root is not None else None
    reports = read_reports(root) if root is not None else None
    domain = read_domain(root) if root is not None else None
    evidence = read_signature_evidence(root) if root is not None else None
    index = compact_index(build_index_data(kb, english_zipf(), confidence, reports, domain, evidence))
    index[REACH] = stored_reach(kb)
    return kb._replace(docs=docs, match_index=index)


def _line(value: object) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def to_json(kb: KnowledgeBase, fingerprint: str) -> str:
    """The knowledge base as compiled.json text (JSON Lines, see the module docstring)."""
    index = dict(kb.match_index or {})
    postings = index.pop("postings", {})
    assert isinstance(postings, Mapping)
    buckets: list[list[str]] = [[] for _ in range(POSTING_BUCKETS)]
    for term, posting in postings.items():
        if "\t" in term or "\n" in term or "\t" in posting or "\n" in posting:
            raise ValueError(f"a term or posting with a tab or newline: {term!r}")
        buckets[bucket_of(term)] += [term, posting]
    parts: dict[str, str] = {
        "sections": _line(to_plain(kb.sections)),
        "vocabulary": _line(to_plain(kb.vocabulary)),
        "graph": _line({"start": kb.graph.start}),
    }
    parts |= {f"node:{node_id}": _line(to_plain(node)) for node_id, node in kb.graph.nodes.items()}
    parts |= {f"fact:{name}": _line(to_plain(fact)) for name, fact in kb.facts.items()}
    parts |= {f"index:{key}": _line(value) for key, value in index.items()}
    parts |= {f"postings:{b}": "\t".join(items) for b, items in enumerate(buckets)}
    parts |= {f"entry:{e.id}": _line(to_plain(e)) for e in kb.entries.values()}
    parts |= {f"docs:{k}": _line(v) for k, v in kb.docs.items()}
    places: dict[str, list[int]] = {}
    offset = 0
    for name, line in parts.items():
        size = len(line.encode("utf-8"))
        places[name] = [offset, size]
        offset += size + 1
    header = _line({"format": FORMAT, "fingerprint": fingerprint, "parts": places})
    return "\n".join([header, *parts.values()]) + "\n"


MAX_COMPILED_BYTES = 64 << 20


class _Lines(Mapping[str, bytes]):
    """The parts of a compiled file by name, each sliced out of the file's bytes when asked for
    (splitting the whole file into lines cost more than everything `ask` decodes, and so did
    slicing out every part: a copy of the whole file in new memory)."""

    def __init__(self, raw: bytes, body: int, places: dict[str, list[int]]) -> None:
        self._raw = raw
        self._body = body
        self._places = places

    def __getitem__(self, name: str) -> bytes:
        offset, size = self._places[name]
        return self._raw[self._body + offset : self._body + offset + size]

    def __contains__(self, name: object) -> bool:
        return name in self._places

    def groups(self, kinds: tuple[str, ...]) -> dict[str, _Lines]:
        """The parts named `kind:key`, for each of `kinds`, by their key (nothing is sliced yet)."""
        places: dict[str, dict[str, list[int]]] = {kind: {} for kind in kinds}
        for name, place in self._places.items():
            kind, colon, key = name.partition(":")
            if colon and kind in places:
                places[kind][key] = place
        return {kind: _Lines(self._raw, self._body, found) for kind, found in places.items()}

    def __iter__(self) -> Iterator[str]:
        return iter(self._places)

    def __len__(self) -> int:
        return len(self._places)


def read(path: str) -> dict[str, Any] | None:
    """The compiled knowledge's header (format, fingerprint) with its parts as undecoded lines, or
    None when it is missing, unreadable or not ours (then the YAML sources are used, and `kb check`
    says why)."""
    from triage.kb.fingerprint import read_source

    try:
        raw = read_source(path, MAX_COMPILED_BYTES)
        body = raw.index(b"\n") + 1
        data = loads(raw[:body])
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("parts"), dict):
        return None
    places: dict[str, list[int]] = data["parts"]
    end = max((offset + size + 1 for offset, size in places.values()), default=0)
    if body + end != len(raw) or any(
        raw[body + o + s : body + o + s + 1] != b"\n" for o, s in places.values()
    ):
        return None
    data["lines"] = _Lines(raw, body, places)
    return data


def _node(raw: dict[str, Any]) -> Node:
    if raw["type"] == "question":
        options = tuple(Option(o["label"], o["target"], tuple(o["keywords"])) for o in raw["options"])
        return QuestionNode(raw["id"], raw["prompt"], options, raw["help"], raw["unknown"])
    return ProbeNode(
        raw["id"], raw["fact"], raw["prompt"], dict(raw["branches"]), raw["fallback"], raw["default"]
    )


def _fact(raw: dict[str, Any]) -> Fact:
    return Fact(raw["name"], raw["probe"], raw["type"], raw["description"], tuple(raw["values"]))


def _entry(raw: dict[str, Any]) -> Entry:
    return Entry(
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


def from_json(data: dict[str, Any]) -> KnowledgeBase:
    """The knowledge base from what `read` returned; entries, their Markdown, the graph's nodes, the
    facts and the index's parts stay undecoded until used."""
    lines: _Lines = data["lines"]
    part = lines.groups(("entry", "fact", "node", "docs", "index", "postings"))
    return KnowledgeBase(
        entries=_Lazy(part["entry"], _entry),
        sections=tuple(Section(**s) for s in loads(lines["sections"])),
        facts=_Lazy(part["fact"], _fact),
        graph=Graph(loads(lines["graph"])["start"], _Lazy(part["node"], _node)),
        docs=_Lazy(part["docs"]),
        vocabulary={k: tuple(v) for k, v in loads(lines["vocabulary"]).items()},
        match_index=_Lazy(part["index"], ready={"postings": _Postings(part["postings"])}),
    )
