"""The one description of the knowledge base's files: every field, its type, whether it is
required, the values it may hold and what it means.

Validation (`triage.kb.rules`), the typed model's construction (`triage.kb.build`), the schema
section of knowledge/README.md, knowledge/schema.json and `triage kb codes` all come from here;
change a field here and `triage kb build` regenerates the documentation.
"""

from __future__ import annotations

from dataclasses import dataclass

from triage.core.model import (
    ENTRY_KINDS,
    FACT_TYPES,
    VERIFY_CHANGES,
    Cases,
    Confirm,
    Entry,
    Fact,
    Graph,
    Option,
    ProbeNode,
    QuestionNode,
    Reference,
    Section,
    Signature,
    Verify,
)
from triage.kb.shapes import Field, Flag, Fraction, Key, ListOf, MapOf, OneOf, Shape, Text, Texts

ENTRY_ID_PATTERN = r"(D|MN|P|CK|X|E)[1-9][0-9]?"
ENTRY_ID_FORM = "D<n>, MN<n>, P<n>, CK<n>, X<n> or E<n> (n from 1 to 99, no zero padding)"
NODE_ID_PATTERN = r"[a-z][a-z0-9_]*"
TERM_PATTERN = r"[a-z][a-z0-9_]*"
MIN_SYMPTOMS = 6

SIGNATURE = Shape(
    "signature",
    "A line a failing job prints: a Python regex searched case-insensitively, one log line at a time.",
    (
        Field(
            "pattern",
            Text(),
            "Python regex, in single quotes",
            required=True,
            example="Expected to have finished reduction",
        ),
        Field(
            "weight",
            Fraction(),
            "how specific the line is to this entry: 1.0 only this failure prints it, less for shared lines",
            default=1.0,
            example=1.0,
        ),
        Field("note", Text(), "what this line is and who prints it", example="..."),
        Field(
            "echo",
            Flag(),
            "true when the line usually echoes another rank's failure (a watchdog timeout on a "
            "survivor); log scans rank it lower",
            default=False,
            example=False,
        ),
        Field(
            "several",
            Flag(),
            "true when the line names this entry only if several processes did the same thing "
            "(raced on one file); in a log that shows one process it is only a hint",
            default=False,
            example=False,
        ),
        Field(
            "examples",
            Texts(),
            "real log lines, copied verbatim, that the pattern must match",
            example=["[rank1]: RuntimeError: Expected to have finished reduction in the prior iteration"],
        ),
    ),
    model=Signature,
    shorthand="pattern",
)

VERIFY = Shape(
    "verify",
    "Does the fix change the science of the run, and what to re-check.",
    (
        Field(
            "needed",
            Flag(),
            "does the fix change the science of the run? true exactly when `changes` is not empty",
            required=True,
            default=False,
            example=True,
        ),
        Field(
            "changes",
            Texts(),
            "what the fix changes",
            allowed=VERIFY_CHANGES,
            example=["data_order"],
        ),
        Field("why", Text(), "one or two sentences: what to re-check and why", required=True, example="..."),
    ),
    model=Verify,
)

REFERENCE = Shape(
    "reference",
    "A link carried over from the source material.",
    (
        Field("title", Text(), "the page's title", required=True, example="..."),
        Field("url", Text(), "the full http(s) URL", required=True, example="https://..."),
    ),
    model=Reference,
)

CONFIRM = Shape(
    "confirm",
    "A probe fact that supports this diagnosis.",
    (
        Field("fact", Text(), "a fact from facts.yaml", required=True, example="dist.minitest"),
        Field("values", Texts(), "the values that support the diagnosis", example=["ok"]),
        Field("note", Text(), "what the fact shows", example="..."),
    ),
    model=Confirm,
)

CASES = Shape(
    "cases",
    "Tests for `triage ask`: phrasings that are not in `symptoms`.",
    (
        Field("match", Texts(), "must rank this entry first", example=["..."]),
        Field("no_match", Texts(), "must not rank this entry first", example=["..."]),
    ),
    model=Cases,
)

ENTRY = Shape(
    "entry",
    "One failure, technique, checklist or out-of-scope leaf: entries/<ID>-<slug>.yaml.",
    (
        Field(
            "id",
            Text(),
            "must match the file prefix",
            required=True,
            pattern=ENTRY_ID_PATTERN,
            form=ENTRY_ID_FORM,
            example="D9",
        ),
        Field("title", Text(), "one line, says what goes wrong", required=True, example="..."),
        Field("section", Text(), "an id from sections.yaml", required=True, example="ddp"),
        Field("kind", Text(), "what the entry is", required=True, allowed=ENTRY_KINDS, example="diagnosis"),
        Field(
            "summary",
            Text(),
            "one sentence a user would recognise as their symptom",
            required=True,
            example="...",
        ),
        Field(
            "symptoms",
            Texts(),
            "the words users type, terse to long, with pasted error text",
            required=True,
            min_items=MIN_SYMPTOMS,
            hint="add phrasings in the words users type, terse to long, with pasted error text",
            example=["..."],
        ),
        Field(
            "signatures",
            ListOf(SIGNATURE),
            "the lines a failing job prints; may be empty for problems that print nothing",
        ),
        Field("root_cause", Text(), "Markdown: why it happens", required=True, example="...\n"),
        Field(
            "fix",
            Text(),
            "Markdown: the exact commands and code, best option first",
            required=True,
            example="...\n",
        ),
        Field("verify", VERIFY, "does the fix change the science of the run?", required=True),
        Field("related", Texts(), "ids of entries worth reading next", example=["D22", "D19"]),
        Field("references", ListOf(REFERENCE), "links carried over from the source material"),
        Field(
            "confirm",
            ListOf(CONFIRM),
            "probe facts (facts.yaml) that support this diagnosis; may be empty when no probe can see the cause",
        ),
        Field("cases", CASES, "tests: phrasings that are not in symptoms"),
    ),
    model=Entry,
)

SECTION = Shape(
    "section",
    "A section of the knowledge base, in display order.",
    (
        Field("id", Text(), "what entries name in `section:`", required=True, example="ddp"),
        Field("title", Text(), "the heading", required=True, example="DistributedDataParallel"),
        Field("blurb", Text(), "one line on what the section covers", example="..."),
    ),
    model=Section,
)

FACT = Shape(
    "fact",
    "A fact a probe may report.",
    (
        Field("probe", Text(), "the probe that reports it", required=True, example="env"),
        Field("type", Text(), "the fact's type", required=True, allowed=FACT_TYPES, example="enum"),
        Field("values", Texts(), "an enum fact's values", example=["none", "torchrun"]),
        Field("description", Text(), "what the fact says", required=True, example="..."),
    ),
    model=Fact,
    key_field="name",
)

OPTION = Shape(
    "option",
    "One answer to a question.",
    (
        Field("label", Text(), "the answer as the user reads it", required=True, example="..."),
        Field("target", Text(), "a node id or an entry id", required=True, example="launch_error"),
        Field("keywords", Texts(), "words a typed answer may use for this option", example=["..."]),
    ),
    model=Option,
)

_NODE_TYPE = Field("type", Text(), "which kind of node this is", required=True, allowed=("question", "probe"))

QUESTION_NODE = Shape(
    "question",
    "A question the user answers by picking an option (or typing).",
    (
        _NODE_TYPE,
        Field("prompt", Text(), "the question", required=True, example="What do you see?"),
        Field("help", Text(), "optional longer text", example="..."),
        Field("unknown", Text(), 'where "I don\'t know" leads', default=None, example="some_node"),
        Field(
            "options",
            ListOf(OPTION),
            "the answers, each with a label and a target",
            required=True,
            min_items=2,
            hint="list at least two options, each with label and target",
        ),
    ),
    model=QuestionNode,
    key_field="id",
    example_key="what_do_you_see",
)

PROBE_NODE = Shape(
    "probe",
    "A node that runs a probe and branches on the fact it reports.",
    (
        _NODE_TYPE,
        Field("fact", Text(), "an enum or bool fact from facts.yaml", required=True, example="env.launcher"),
        Field(
            "prompt",
            Text(),
            "shown while the probe runs",
            required=True,
            example="Which launcher started the job?",
        ),
        Field(
            "branches",
            MapOf(
                Key("a value of the fact", bool_as_text=True, example="none"),
                Text(),
                "the target it leads to",
            ),
            "one target per value; values left out go to `default`",
            required=True,
            min_items=1,
            hint="map the fact's values to targets",
        ),
        Field("default", Text(), "where values without a branch go", default=None, example="other_node"),
        Field(
            "fallback",
            Text(),
            "question node used when the probe is unavailable",
            required=True,
            example="how_launched",
        ),
    ),
    model=ProbeNode,
    key_field="id",
    example_key="launcher_check",
)

NODE = OneOf(_NODE_TYPE, {"question": QUESTION_NODE, "probe": PROBE_NODE}, "A node of the decision graph.")

GRAPH = Shape(
    "graph",
    'The decision graph from "what do you see?" to every entry.',
    (
        Field("start", Text(), "the first question", required=True, example="what_do_you_see"),
        Field(
            "nodes",
            MapOf(
                Key(
                    "a node id",
                    pattern=NODE_ID_PATTERN,
                    form="lower_snake_case",
                    example="what_do_you_see",
                    hint="rename it; upper-case ids are reserved for entries",
                ),
                NODE,
            ),
            "the nodes by id; a target is a node id (lower case) or an entry id (a leaf)",
            required=True,
        ),
    ),
    model=Graph,
)


@dataclass(frozen=True)
class FileSpec:
    """One kind of file in the knowledge directory and the shape of its top level."""

    name: str  # the file name, or entries/<ID>-<slug>.yaml for entries
    key: str  # how Sources names it: the file name, or "entries"
    top: Shape | ListOf | MapOf
    doc: str


FILES: tuple[FileSpec, ...] = (
    FileSpec("entries/<ID>-<slug>.yaml", "entries", ENTRY, "one entry per file"),
    FileSpec("sections.yaml", "sections.yaml", ListOf(SECTION), "the sections, in display order"),
    FileSpec(
        "facts.yaml",
        "facts.yaml",
        MapOf(Key("the fact's name", example="env.launcher"), FACT),
        "the fact catalogue: every fact a probe may report, its type and values",
    ),
    FileSpec("graph.yaml", "graph.yaml", GRAPH, 'the decision graph from "what do you see?" to every entry'),
    FileSpec(
        "vocabulary.yaml",
        "vocabulary.yaml",
        MapOf(
            Key(
                "a canonical term",
                pattern=TERM_PATTERN,
                form="a single lower-case word",
                example="hang",
                hint="use letters, digits and _ only",
            ),
            Texts(),
            "the words and phrases users type for it",
        ),
        "matching vocabulary: canonical term -> the variants users type",
    ),
)


def file_spec(key: str) -> FileSpec:
    """The spec of the file Sources names `key`."""
    return next(spec for spec in FILES if spec.key == key)
