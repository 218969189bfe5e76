"""Validation of the knowledge base: numbered codes, each error naming file, line, field and fix.

`check(sources)` turns raw parsed files into a KnowledgeBase while collecting Diagnostics. A
knowledge base with any diagnostic is not used: front ends refuse to run on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from triage.core.model import (
    BRANCHABLE_FACT_TYPES,
    ENTRY_KINDS,
    FACT_TYPES,
    VERIFY_CHANGES,
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
    file_prefix,
)
from triage.kb.sources import SourceFile, Sources
from triage.kb.yaml_lines import line_of

# The table of codes. Each has a failing fixture in tests/fixtures/kb/<code>/.
CODES: dict[str, str] = {
    "KB000": "file cannot be read or parsed",
    "KB001": "target does not resolve",
    "KB002": "cycle in the decision graph",
    "KB003": "entry or node unreachable from the start of the graph",
    "KB004": "unknown probe fact, or a value the fact does not have",
    "KB005": "regular expression does not compile",
    "KB006": "missing or inconsistent verify note",
    "KB007": "missing required field",
    "KB008": "field has the wrong type",
    "KB009": "id does not match the file name or the id format",
    "KB010": "duplicate id",
    "KB011": "too few symptom phrasings",
    "KB012": "unknown section",
    "KB013": "unknown field",
    "KB014": "probe node branches on a fact it cannot branch on",
    "KB015": "bad reference or related id",
    "KB016": "compiled knowledge is stale",
    "KB017": "duplicate key in a mapping",
    "KB018": "malformed graph node",
    "KB019": "signature without a real example line it matches",
}

MIN_SYMPTOMS = 6
ID_RE = re.compile(r"^(D|MN|P|CK|X|E)([1-9][0-9]?)$")
NODE_ID_RE = re.compile(r"^[a-z][a-z0-9_]*$")
ENTRY_FIELDS_REQUIRED = (
    "id",
    "title",
    "section",
    "kind",
    "summary",
    "symptoms",
    "root_cause",
    "fix",
    "verify",
)
ENTRY_FIELDS_OPTIONAL = ("signatures", "related", "references", "confirm", "cases")


@dataclass(frozen=True)
class Diagnostic:
    code: str
    file: str
    line: int
    field: str
    message: str
    hint: str = ""

    def format(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        field = f" {self.field}:" if self.field else ""
        hint = f" Fix: {self.hint}" if self.hint else ""
        return f"{where}: {self.code}{field} {self.message}.{hint}"


class _Checker:
    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []

    def add(self, code: str, src: SourceFile, line: int, field: str, message: str, hint: str = "") -> None:
        self.diagnostics.append(Diagnostic(code, src.rel, line, field, message, hint))

    # -- typed field access ---------------------------------------------------------------

    def text(self, src: SourceFile, data: Any, key: str, where: str, required: bool = True) -> str:
        value = data.get(key) if isinstance(data, dict) else None
        if value is None:
            if required:
                self.add(
                    "KB007",
                    src,
                    line_of(data, key),
                    f"{where}{key}",
                    "is missing",
                    f"add `{key}:` with a non-empty value",
                )
            return ""
        if not isinstance(value, str) or not value.strip():
            self.add(
                "KB008",
                src,
                line_of(data, key),
                f"{where}{key}",
                "must be a non-empty string",
                "quote the value if YAML reads it as another type",
            )
            return ""
        return value.strip()

    def strings(self, src: SourceFile, data: Any, key: str, where: str) -> tuple[str, ...]:
        value = data.get(key) if isinstance(data, dict) else None
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            self.add(
                "KB008",
                src,
                line_of(data, key),
                f"{where}{key}",
                "must be a list of non-empty strings",
                "write one quoted string per `- ` item",
            )
            return ()
        return tuple(v.strip() for v in value)

    def mapping(self, src: SourceFile, data: Any, key: str, where: str) -> dict[str, Any] | None:
        value = data.get(key) if isinstance(data, dict) else None
        if value is None:
            return None
        if not isinstance(value, dict):
            self.add(
                "KB008",
                src,
                line_of(data, key),
                f"{where}{key}",
                "must be a mapping",
                "indent its fields under it",
            )
            return None
        return value

    def duplicates(self, src: SourceFile, data: Any) -> None:
        if isinstance(data, dict):
            for key, line in getattr(data, "duplicates", []):
                self.add(
                    "KB017",
                    src,
                    line,
                    str(key),
                    "is given twice in the same mapping",
                    "keep one; YAML silently keeps the last",
                )
            for value in data.values():
                self.duplicates(src, value)
        elif isinstance(data, list):
            for value in data:
                self.duplicates(src, value)

    # -- files ----------------------------------------------------------------------------

    def readable(self, src: SourceFile, expect: type) -> bool:
        if src.error:
            self.add("KB000", src, src.error_line, "", src.error, "correct the file so it parses as YAML")
            return False
        if not isinstance(src.data, expect):
            kind = "mapping" if expect is dict else "list"
            self.add(
                "KB000", src, 1, "", f"top level must be a {kind}", "see knowledge/README.md for the layout"
            )
            return False
        self.duplicates(src, src.data)
        return True

    def sections(self, src: SourceFile) -> tuple[Section, ...]:
        if not self.readable(src, list):
            return ()
        result = []
        for index, item in enumerate(src.data):
            where = f"[{index}]."
            if not isinstance(item, dict):
                self.add(
                    "KB008",
                    src,
                    line_of(src.data, index),
                    f"[{index}]",
                    "must be a mapping",
                    "give id and title",
                )
                continue
            result.append(
                Section(
                    self.text(src, item, "id", where),
                    self.text(src, item, "title", where),
                    self.text(src, item, "blurb", where, required=False),
                )
            )
        return tuple(result)

    def facts(self, src: SourceFile) -> dict[str, Fact]:
        if not self.readable(src, dict):
            return {}
        result: dict[str, Fact] = {}
        for name, item in src.data.items():
            line = line_of(src.data, name)
            if not isinstance(item, dict):
                self.add(
                    "KB008", src, line, str(name), "must be a mapping", "give probe, type and description"
                )
                continue
            where = f"{name}."
            ftype = self.text(src, item, "type", where)
            if ftype and ftype not in FACT_TYPES:
                self.add(
                    "KB008",
                    src,
                    line_of(item, "type"),
                    f"{where}type",
                    f"unknown type {ftype!r}",
                    f"use one of {', '.join(FACT_TYPES)}",
                )
            values = self.strings(src, item, "values", where)
            if ftype == "enum" and not values:
                self.add("KB007", src, line, f"{where}values", "an enum fact needs its values", "list them")
            result[str(name)] = Fact(
                str(name),
                self.text(src, item, "probe", where),
                ftype,
                self.text(src, item, "description", where),
                values,
            )
        return result

    def vocabulary(self, src: SourceFile) -> dict[str, tuple[str, ...]]:
        if not self.readable(src, dict):
            return {}
        result: dict[str, tuple[str, ...]] = {}
        for term in src.data:
            if not isinstance(term, str) or not term.isidentifier() or term != term.lower():
                self.add(
                    "KB008",
                    src,
                    line_of(src.data, term),
                    str(term),
                    "canonical terms must be single lower-case words",
                    "use letters, digits and _ only",
                )
                continue
            result[term] = self.strings(src, src.data, term, "")
        return result

    def entry(self, src: SourceFile, sections: set[str], facts: dict[str, Fact]) -> Entry | None:
        if not self.readable(src, dict):
            return None
        data = src.data
        for key in data:
            if key not in ENTRY_FIELDS_REQUIRED + ENTRY_FIELDS_OPTIONAL:
                self.add(
                    "KB013",
                    src,
                    line_of(data, key),
                    str(key),
                    "is not a field of an entry",
                    f"known fields: {', '.join(ENTRY_FIELDS_REQUIRED + ENTRY_FIELDS_OPTIONAL)}",
                )
        entry_id = self.text(src, data, "id", "")
        if entry_id:
            if not ID_RE.match(entry_id):
                self.add(
                    "KB009",
                    src,
                    line_of(data, "id"),
                    "id",
                    f"{entry_id!r} is not a valid id",
                    "use D<n>, MN<n>, P<n>, CK<n> or X<n>",
                )
            elif not src.path.name.startswith(file_prefix(entry_id) + "-"):
                self.add(
                    "KB009",
                    src,
                    line_of(data, "id"),
                    "id",
                    f"{entry_id!r} does not match the file name {src.path.name!r}",
                    f"name the file {file_prefix(entry_id)}-<slug>.yaml",
                )
        section = self.text(src, data, "section", "")
        if section and section not in sections:
            self.add(
                "KB012",
                src,
                line_of(data, "section"),
                "section",
                f"{section!r} is not in sections.yaml",
                f"use one of {', '.join(sorted(sections))}",
            )
        kind = self.text(src, data, "kind", "")
        if kind and kind not in ENTRY_KINDS:
            self.add(
                "KB008",
                src,
                line_of(data, "kind"),
                "kind",
                f"unknown kind {kind!r}",
                f"use one of {', '.join(ENTRY_KINDS)}",
            )
        symptoms = self.strings(src, data, "symptoms", "")
        if "symptoms" in data and len(symptoms) < MIN_SYMPTOMS and isinstance(data.get("symptoms"), list):
            self.add(
                "KB011",
                src,
                line_of(data, "symptoms"),
                "symptoms",
                f"has {len(symptoms)} phrasings, needs at least {MIN_SYMPTOMS}",
                "add phrasings in the words users type, terse to long, with pasted error text",
            )
        return Entry(
            id=entry_id,
            title=self.text(src, data, "title", ""),
            section=section,
            kind=kind,
            summary=self.text(src, data, "summary", ""),
            symptoms=symptoms,
            signatures=self.signatures(src, data),
            root_cause=self.text(src, data, "root_cause", ""),
            fix=self.text(src, data, "fix", ""),
            verify=self.verify(src, data),
            related=self.strings(src, data, "related", ""),
            references=self.references(src, data),
            confirm=self.confirm(src, data, facts),
            cases=self.cases(src, data),
            source=f"entries/{src.path.name}",  # relative to the knowledge dir, wherever it is installed
        )

    def signatures(self, src: SourceFile, data: dict[str, Any]) -> tuple[Signature, ...]:
        raw = data.get("signatures")
        if raw is None:
            return ()
        if not isinstance(raw, list):
            self.add(
                "KB008",
                src,
                line_of(data, "signatures"),
                "signatures",
                "must be a list",
                "write `signatures: []` when the failure prints nothing specific",
            )
            return ()
        result = []
        for index, item in enumerate(raw):
            where = f"signatures[{index}]."
            if isinstance(item, str):
                item = {"pattern": item}
            if not isinstance(item, dict):
                self.add(
                    "KB008",
                    src,
                    line_of(raw, index),
                    f"signatures[{index}]",
                    "must be a mapping",
                    "give `pattern:` (and optional weight, note)",
                )
                continue
            pattern = self.text(src, item, "pattern", where)
            weight = item.get("weight", 1.0)
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight <= 1:
                self.add(
                    "KB008",
                    src,
                    line_of(item, "weight"),
                    f"{where}weight",
                    "must be a number in (0, 1]",
                    "use 1.0 for a line only this failure prints, less for shared lines",
                )
                weight = 1.0
            examples = self.strings(src, item, "examples", where)
            if pattern:
                self.pattern(src, item, where, pattern, examples)
            echo = item.get("echo", False)
            if not isinstance(echo, bool):
                self.add(
                    "KB008",
                    src,
                    line_of(item, "echo"),
                    f"{where}echo",
                    "must be true or false",
                    "write `echo: true` for a line that usually echoes another rank's failure",
                )
                echo = False
            result.append(
                Signature(
                    pattern,
                    float(weight),
                    self.text(src, item, "note", where, required=False),
                    echo,
                    examples,
                )
            )
        return tuple(result)

    def pattern(
        self, src: SourceFile, item: dict[str, Any], where: str, pattern: str, examples: tuple[str, ...]
    ) -> None:
        """KB005: the regex compiles and needs real text; KB019: real lines it matches."""
        try:
            compiled = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            self.add(
                "KB005",
                src,
                line_of(item, "pattern"),
                f"{where}pattern",
                f"regex does not compile ({exc})",
                "escape literal ( ) [ ] . * + ? with a backslash, in single quotes",
            )
            return
        if compiled.search(""):
            self.add(
                "KB005",
                src,
                line_of(item, "pattern"),
                f"{where}pattern",
                "regex matches the empty string, so it would match every line",
                "make the pattern require real text",
            )
            return
        if not examples and item.get("examples") in (None, []):
            self.add(
                "KB019",
                src,
                line_of(item, "pattern"),
                f"{where}examples",
                "is missing: a signature needs at least one real line of output it matches",
                "add `examples:` with a line copied from a real run or report (triage repro prints real ones)",
            )
        for number, example in enumerate(examples):
            if not compiled.search(example):
                self.add(
                    "KB019",
                    src,
                    line_of(item, "examples"),
                    f"{where}examples[{number}]",
                    "is not matched by the pattern",
                    "correct the pattern (or the example, if it was not copied exactly from real output)",
                )

    def verify(self, src: SourceFile, data: dict[str, Any]) -> Verify:
        raw = data.get("verify")
        if raw is None:
            self.add(
                "KB006",
                src,
                line_of(data, "verify", data.line if hasattr(data, "line") else 0),
                "verify",
                "is missing",
                "add `verify:` with `needed: true|false` and `why:`",
            )
            return Verify(False, "")
        if not isinstance(raw, dict):
            self.add(
                "KB006",
                src,
                line_of(data, "verify"),
                "verify",
                "must be a mapping",
                "give `needed:`, `changes:` and `why:`",
            )
            return Verify(False, "")
        needed = raw.get("needed")
        if not isinstance(needed, bool):
            self.add(
                "KB006",
                src,
                line_of(raw, "needed"),
                "verify.needed",
                "must be true or false",
                "say whether the fix changes the science of the run",
            )
            needed = False
        why = raw.get("why")
        if not isinstance(why, str) or not why.strip():
            self.add(
                "KB006",
                src,
                line_of(raw, "why"),
                "verify.why",
                "is missing",
                "explain in a sentence why the numbers do or do not need re-checking",
            )
            why = ""
        changes = self.strings(src, raw, "changes", "verify.")
        for change in changes:
            if change not in VERIFY_CHANGES:
                self.add(
                    "KB006",
                    src,
                    line_of(raw, "changes"),
                    "verify.changes",
                    f"unknown change {change!r}",
                    f"use any of {', '.join(VERIFY_CHANGES)}",
                )
        if needed and not changes:
            self.add(
                "KB006",
                src,
                line_of(raw, "needed"),
                "verify",
                "needed is true but changes is empty",
                "list what the fix changes (batch_size, learning_rate, ...)",
            )
        if not needed and changes:
            self.add(
                "KB006",
                src,
                line_of(raw, "needed"),
                "verify",
                "needed is false but changes is not empty",
                "set needed: true, or remove changes",
            )
        return Verify(bool(needed), str(why).strip(), changes)

    def references(self, src: SourceFile, data: dict[str, Any]) -> tuple[Reference, ...]:
        raw = data.get("references")
        if raw is None:
            return ()
        if not isinstance(raw, list):
            self.add(
                "KB008",
                src,
                line_of(data, "references"),
                "references",
                "must be a list",
                "one title+url each",
            )
            return ()
        result = []
        for index, item in enumerate(raw):
            where = f"references[{index}]."
            if not isinstance(item, dict):
                self.add(
                    "KB008",
                    src,
                    line_of(raw, index),
                    f"references[{index}]",
                    "must be a mapping",
                    "give title and url",
                )
                continue
            url = self.text(src, item, "url", where)
            if url and not url.startswith(("https://", "http://")):
                self.add(
                    "KB015",
                    src,
                    line_of(item, "url"),
                    f"{where}url",
                    f"{url!r} is not an http(s) link",
                    "give the full URL",
                )
            result.append(Reference(self.text(src, item, "title", where), url))
        return tuple(result)

    def confirm(self, src: SourceFile, data: dict[str, Any], facts: dict[str, Fact]) -> tuple[Confirm, ...]:
        raw = data.get("confirm")
        if raw is None:
            return ()
        if not isinstance(raw, list):
            self.add(
                "KB008", src, line_of(data, "confirm"), "confirm", "must be a list", "one fact+values each"
            )
            return ()
        result = []
        for index, item in enumerate(raw):
            where = f"confirm[{index}]."
            if not isinstance(item, dict):
                self.add(
                    "KB008",
                    src,
                    line_of(raw, index),
                    f"confirm[{index}]",
                    "must be a mapping",
                    "give fact and values",
                )
                continue
            name = self.text(src, item, "fact", where)
            values = self.strings(src, item, "values", where)
            fact = facts.get(name)
            if name and fact is None:
                self.add(
                    "KB004",
                    src,
                    line_of(item, "fact"),
                    f"{where}fact",
                    f"{name!r} is not in facts.yaml",
                    "use a fact from the catalogue, or add it there with the probe that reports it",
                )
            elif fact is not None and fact.type in BRANCHABLE_FACT_TYPES:
                for value in values:
                    if value not in fact.branch_values:
                        self.add(
                            "KB004",
                            src,
                            line_of(item, "values"),
                            f"{where}values",
                            f"{name} has no value {value!r}",
                            f"use one of {', '.join(fact.branch_values)} (quote true/false)",
                        )
            result.append(Confirm(name, values, self.text(src, item, "note", where, required=False)))
        return tuple(result)

    def cases(self, src: SourceFile, data: dict[str, Any]) -> Cases:
        raw = self.mapping(src, data, "cases", "")
        if raw is None:
            return Cases()
        return Cases(self.strings(src, raw, "match", "cases."), self.strings(src, raw, "no_match", "cases."))

    # -- graph ----------------------------------------------------------------------------

    def graph(self, src: SourceFile, facts: dict[str, Fact]) -> Graph | None:
        if not self.readable(src, dict):
            return None
        start = self.text(src, src.data, "start", "")
        raw_nodes = self.mapping(src, src.data, "nodes", "")
        if raw_nodes is None:
            self.add("KB007", src, 1, "nodes", "is missing", "add the `nodes:` mapping")
            return None
        nodes: dict[str, Node] = {}
        for node_id, raw in raw_nodes.items():
            line = line_of(raw_nodes, node_id)
            where = f"nodes.{node_id}."
            if not isinstance(node_id, str) or not NODE_ID_RE.match(node_id):
                self.add(
                    "KB018",
                    src,
                    line,
                    f"nodes.{node_id}",
                    "node ids must be lower_snake_case",
                    "rename it; upper-case ids are reserved for entries",
                )
                continue
            if not isinstance(raw, dict):
                self.add(
                    "KB018", src, line, f"nodes.{node_id}", "must be a mapping", "give type and its fields"
                )
                continue
            node_type = raw.get("type")
            if node_type == "question":
                options = []
                raw_options = raw.get("options")
                if not isinstance(raw_options, list) or len(raw_options) < 2:
                    self.add(
                        "KB018",
                        src,
                        line,
                        f"{where}options",
                        "a question needs at least two options",
                        "list options, each with label and target",
                    )
                    raw_options = raw_options if isinstance(raw_options, list) else []
                for index, opt in enumerate(raw_options):
                    owhere = f"{where}options[{index}]."
                    if not isinstance(opt, dict):
                        self.add(
                            "KB018",
                            src,
                            line_of(raw_options, index),
                            owhere[:-1],
                            "must be a mapping",
                            "give label and target",
                        )
                        continue
                    options.append(
                        Option(
                            self.text(src, opt, "label", owhere),
                            self.text(src, opt, "target", owhere),
                            self.strings(src, opt, "keywords", owhere),
                        )
                    )
                nodes[node_id] = QuestionNode(
                    node_id,
                    self.text(src, raw, "prompt", where),
                    tuple(options),
                    self.text(src, raw, "help", where, required=False),
                    raw.get("unknown") if isinstance(raw.get("unknown"), str) else None,
                )
            elif node_type == "probe":
                fact_name = self.text(src, raw, "fact", where)
                fact = facts.get(fact_name)
                branches_raw = self.mapping(src, raw, "branches", where) or {}
                branches = {
                    str(k).lower() if isinstance(k, bool) else str(k): str(v) for k, v in branches_raw.items()
                }
                if fact_name and fact is None:
                    self.add(
                        "KB004",
                        src,
                        line_of(raw, "fact"),
                        f"{where}fact",
                        f"{fact_name!r} is not in facts.yaml",
                        "branch on a fact from the catalogue",
                    )
                elif fact is not None:
                    if fact.type not in BRANCHABLE_FACT_TYPES:
                        self.add(
                            "KB014",
                            src,
                            line_of(raw, "fact"),
                            f"{where}fact",
                            f"{fact_name} is of type {fact.type}; probe nodes branch on enum or bool facts",
                            "add a categorical fact to facts.yaml, or ask a question instead",
                        )
                    else:
                        for value in branches:
                            if value not in fact.branch_values:
                                self.add(
                                    "KB004",
                                    src,
                                    line_of(branches_raw, value),
                                    f"{where}branches.{value}",
                                    f"{fact_name} has no value {value!r}",
                                    f"use {', '.join(fact.branch_values)}",
                                )
                if not branches:
                    self.add(
                        "KB018",
                        src,
                        line,
                        f"{where}branches",
                        "a probe node needs branches",
                        "map fact values to targets",
                    )
                fallback = self.text(src, raw, "fallback", where)
                default = raw.get("default") if isinstance(raw.get("default"), str) else None
                nodes[node_id] = ProbeNode(
                    node_id, fact_name, self.text(src, raw, "prompt", where), branches, fallback, default
                )
            else:
                self.add(
                    "KB018",
                    src,
                    line_of(raw, "type", line),
                    f"{where}type",
                    f"unknown node type {node_type!r}",
                    "use `question` or `probe`",
                )
        return Graph(start, nodes)

    def graph_links(self, src: SourceFile, graph: Graph, entries: dict[str, Entry]) -> None:
        raw_nodes = src.data.get("nodes", {})

        def line(node_id: str) -> int:
            return line_of(raw_nodes, node_id)

        def resolves(target: str) -> bool:
            return target in graph.nodes or target in entries

        if graph.start and graph.start not in graph.nodes:
            self.add(
                "KB001",
                src,
                line_of(src.data, "start"),
                "start",
                f"{graph.start!r} is not a node",
                "point start at a question node",
            )
        edges: dict[str, list[str]] = {}
        for node in graph.nodes.values():
            targets: list[tuple[str, str]] = []
            if isinstance(node, QuestionNode):
                targets += [(f"options[{i}].target", o.target) for i, o in enumerate(node.options)]
                if node.unknown:
                    targets.append(("unknown", node.unknown))
            else:
                targets += [(f"branches.{k}", v) for k, v in node.branches.items()]
                if node.default:
                    targets.append(("default", node.default))
                if node.fallback:
                    targets.append(("fallback", node.fallback))
                    fb = graph.nodes.get(node.fallback)
                    if fb is not None and not isinstance(fb, QuestionNode):
                        self.add(
                            "KB018",
                            src,
                            line(node.id),
                            f"nodes.{node.id}.fallback",
                            f"{node.fallback!r} is not a question node",
                            "the fallback is asked when the probe is unavailable, so it must be a question",
                        )
            for field, target in targets:
                if target and not resolves(target):
                    self.add(
                        "KB001",
                        src,
                        line(node.id),
                        f"nodes.{node.id}.{field}",
                        f"{target!r} is neither a node nor an entry id",
                        "fix the spelling, or add the node or entry",
                    )
            edges[node.id] = [t for _, t in targets if t in graph.nodes]

        # KB002: cycles (iterative DFS with colours).
        colour: dict[str, int] = {}
        for root in graph.nodes:
            if colour.get(root):
                continue
            stack: list[tuple[str, int]] = [(root, 0)]
            colour[root] = 1
            while stack:
                node_id, index = stack.pop()
                children = edges.get(node_id, [])
                if index < len(children):
                    stack.append((node_id, index + 1))
                    child = children[index]
                    if colour.get(child) == 1:
                        self.add(
                            "KB002",
                            src,
                            line(node_id),
                            f"nodes.{node_id}",
                            f"leads back to {child!r}, forming a cycle",
                            "every path must end at an entry; point one edge forward",
                        )
                    elif not colour.get(child):
                        colour[child] = 1
                        stack.append((child, 0))
                else:
                    colour[node_id] = 2

        # KB003: reachability of nodes and entries from start.
        seen_nodes: set[str] = set()
        seen_entries: set[str] = set()
        frontier = [graph.start] if graph.start in graph.nodes else []
        while frontier:
            node_id = frontier.pop()
            if node_id in seen_nodes:
                continue
            seen_nodes.add(node_id)
            node = graph.nodes[node_id]
            for target in _targets(node):
                if target in graph.nodes:
                    frontier.append(target)
                elif target in entries:
                    seen_entries.add(target)
        for node_id in graph.nodes:
            if node_id not in seen_nodes:
                self.add(
                    "KB003",
                    src,
                    line(node_id),
                    f"nodes.{node_id}",
                    "is not reachable from start",
                    "link it from a question or probe node, or remove it",
                )
        for entry in entries.values():
            if entry.id not in seen_entries:
                self.add(
                    "KB003",
                    src,
                    0,
                    entry.id,
                    f"entry {entry.id} is not reachable in the graph",
                    f"add an option or branch whose target is {entry.id}",
                )


def _targets(node: Node) -> list[str]:
    if isinstance(node, QuestionNode):
        return [o.target for o in node.options] + ([node.unknown] if node.unknown else [])
    return [*node.branches.values(), node.fallback] + ([node.default] if node.default else [])


def check(sources: Sources) -> tuple[KnowledgeBase | None, list[Diagnostic]]:
    """Validate every file and build the knowledge base; None when anything is wrong."""
    checker = _Checker()
    sections = checker.sections(sources.top["sections.yaml"])
    facts = checker.facts(sources.top["facts.yaml"])
    section_ids = {s.id for s in sections}
    entries: dict[str, Entry] = {}
    first_file: dict[str, SourceFile] = {}
    for src in sources.entries:
        entry = checker.entry(src, section_ids, facts)
        if entry is None or not entry.id:
            continue
        if entry.id in entries:
            checker.add(
                "KB010",
                src,
                line_of(src.data, "id"),
                "id",
                f"{entry.id} is also defined in {first_file[entry.id].rel}",
                "give each entry its own id",
            )
            continue
        entries[entry.id] = entry
        first_file[entry.id] = src
    for entry in entries.values():
        src = first_file[entry.id]
        for index, rel in enumerate(entry.related):
            if rel not in entries:
                checker.add(
                    "KB015",
                    src,
                    line_of(src.data.get("related"), index, line_of(src.data, "related")),
                    f"related[{index}]",
                    f"{rel!r} is not an entry id",
                    "use an existing id such as D19",
                )
            elif rel == entry.id:
                checker.add(
                    "KB015",
                    src,
                    line_of(src.data, "related"),
                    f"related[{index}]",
                    "an entry cannot be related to itself",
                    "remove it",
                )
    graph_src = sources.top["graph.yaml"]
    graph = checker.graph(graph_src, facts)
    if graph is not None:
        checker.graph_links(graph_src, graph, entries)
    vocabulary = checker.vocabulary(sources.top["vocabulary.yaml"])
    if checker.diagnostics or graph is None:
        return None, checker.diagnostics
    ordered = dict(sorted(entries.items(), key=lambda kv: _order_key(kv[1], sections)))
    kb = KnowledgeBase(entries=ordered, sections=sections, facts=facts, graph=graph, vocabulary=vocabulary)
    return kb, []


def _order_key(entry: Entry, sections: tuple[Section, ...]) -> tuple[int, str, int]:
    section_rank = next((i for i, s in enumerate(sections) if s.id == entry.section), len(sections))
    prefix = entry.id.rstrip("0123456789")
    return section_rank, prefix, int(entry.id[len(prefix) :] or 0)
