"""Rules about probe facts: the catalogue (facts.yaml) and every use of a fact in entries and the
graph."""

from __future__ import annotations

from collections.abc import Iterator

from triage.core.model import BRANCHABLE_FACT_TYPES, ProbeNode
from triage.kb.rules.context import Context, yaml_key
from triage.kb.rules.registry import Finding, rule


@rule(
    "KB007",
    "enum-fact-has-values",
    finds="an enum fact in facts.yaml without its `values:`",
    why="nothing could branch on or confirm it: no value would be known",
    fix="list the fact's values",
)
def enum_fact_has_values(ctx: Context) -> Iterator[Finding]:
    """Report an enum fact in facts.yaml without its `values:`."""
    src = ctx.sources.top["facts.yaml"]
    for name, fact in ctx.facts.items():
        if fact.type == "enum" and not fact.values:
            yield Finding(src, ctx.line(src, name), f"{name}.values", "an enum fact needs its values")


@rule(
    "KB004",
    "confirm-fact-known",
    finds="a `confirm:` fact that is not in facts.yaml",
    why="no probe reports it, so the evidence could never be shown",
    fix="use a fact from the catalogue, or add it there with the probe that reports it",
)
def confirm_fact_known(ctx: Context) -> Iterator[Finding]:
    """Report a `confirm:` fact that is not in facts.yaml."""
    for src, entry in ctx.all_entries:
        for index, item in enumerate(entry.confirm):
            if item.fact and item.fact not in ctx.facts and ctx.usable("facts.yaml"):
                line = ctx.line(src, "confirm", index, "fact")
                yield Finding(src, line, f"confirm[{index}].fact", f"{item.fact!r} is not in facts.yaml")


@rule(
    "KB004",
    "confirm-values-known",
    finds="a `confirm:` value that its enum or bool fact never takes",
    why="the probe can never report it, so the evidence would never be shown",
    fix="use the fact's values from facts.yaml (quote true/false)",
)
def confirm_values_known(ctx: Context) -> Iterator[Finding]:
    """Report a `confirm:` value that its enum or bool fact never takes."""
    for src, entry in ctx.all_entries:
        for index, item in enumerate(entry.confirm):
            fact = ctx.facts.get(item.fact)
            if fact is None or fact.type not in BRANCHABLE_FACT_TYPES:
                continue
            for value in item.values:
                if value not in fact.branch_values:
                    yield Finding(
                        src,
                        ctx.line(src, "confirm", index, "values"),
                        f"confirm[{index}].values",
                        f"{item.fact} has no value {value!r}",
                        f"use one of {', '.join(fact.branch_values)} (quote true/false)",
                    )


def probe_nodes(ctx: Context) -> Iterator[ProbeNode]:
    """Every probe node of the graph."""
    if ctx.graph is not None:
        yield from (n for n in ctx.graph.nodes.values() if isinstance(n, ProbeNode))


@rule(
    "KB004",
    "probe-fact-known",
    finds="a probe node whose `fact:` is not in facts.yaml",
    why="no probe reports it, so the walk would always fall back to the question",
    fix="branch on a fact from the catalogue",
)
def probe_fact_known(ctx: Context) -> Iterator[Finding]:
    """Report a probe node whose `fact:` is not in facts.yaml."""
    src = ctx.graph_file
    for node in probe_nodes(ctx):
        if node.fact and node.fact not in ctx.facts and ctx.usable("facts.yaml"):
            line = ctx.line(src, "nodes", node.id, "fact")
            yield Finding(src, line, f"nodes.{node.id}.fact", f"{node.fact!r} is not in facts.yaml")


@rule(
    "KB014",
    "probe-fact-branchable",
    finds="a probe node on a fact that is neither enum nor bool",
    why="branches need a short list of values; a number or free text has no branch to take",
    fix="add a categorical fact to facts.yaml, or ask a question instead",
)
def probe_fact_branchable(ctx: Context) -> Iterator[Finding]:
    """Report a probe node on a fact that is neither enum nor bool."""
    src = ctx.graph_file
    for node in probe_nodes(ctx):
        fact = ctx.facts.get(node.fact)
        if fact is not None and fact.type not in BRANCHABLE_FACT_TYPES:
            yield Finding(
                src,
                ctx.line(src, "nodes", node.id, "fact"),
                f"nodes.{node.id}.fact",
                f"{node.fact} is of type {fact.type}; probe nodes branch on enum or bool facts",
            )


@rule(
    "KB004",
    "branch-values-known",
    finds="a probe node branch on a value its fact never takes",
    why="the probe can never report it, so the branch is dead",
    fix="branch on the fact's values from facts.yaml",
)
def branch_values_known(ctx: Context) -> Iterator[Finding]:
    """Report a probe node branch on a value its fact never takes."""
    src = ctx.graph_file
    for node in probe_nodes(ctx):
        fact = ctx.facts.get(node.fact)
        if fact is None or fact.type not in BRANCHABLE_FACT_TYPES:
            continue
        for value in node.branches:
            if value not in fact.branch_values:
                yield Finding(
                    src,
                    ctx.line(src, "nodes", node.id, "branches", yaml_key(value)),
                    f"nodes.{node.id}.branches.{value}",
                    f"{node.fact} has no value {value!r}",
                    f"use {', '.join(fact.branch_values)}",
                )
