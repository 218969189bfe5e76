"""triage.core.findings: entries the probe facts point at, from each entry's confirm list."""

from __future__ import annotations

from triage.core.findings import findings, value_matches
from triage.core.model import Cases, Confirm, Entry, Graph, KnowledgeBase, Verify


def entry(entry_id: str, *confirm: Confirm) -> Entry:
    return Entry(
        id=entry_id,
        title=f"title of {entry_id}",
        section="s",
        kind="diagnosis",
        summary="",
        symptoms=(),
        signatures=(),
        root_cause="",
        fix="",
        verify=Verify(False, "why"),
        confirm=confirm,
        cases=Cases(),
    )


KB = KnowledgeBase(
    entries={
        "D1": entry(
            "D1",
            Confirm("env.rank_contract", ("partial", "absent"), "rank variables missing"),
            Confirm("env.launcher", ("none",), "bare python"),
        ),
        "D4": entry("D4", Confirm("net.master_port_free", ("false",), "port taken")),
        "D9": entry("D9", Confirm("dist.minitest", ("ok",)), Confirm("gpu.spin_wait", ("true",))),
        "X1": entry("X1", Confirm("dist.missing_ranks", ("1",), "rank 1 missing")),
    },
    sections=(),
    facts={},
    graph=Graph("start", {}),
)


def test_bool_enum_and_list_values_match_as_text() -> None:
    assert value_matches(False, ("false",)) == "false"
    assert value_matches(True, ("false",)) is None
    assert value_matches("Partial", ("partial",)) == "partial"
    assert value_matches([0, 1], ("1",)) == "1"
    assert value_matches([], ("1",)) is None


def test_findings_rank_by_matches_and_carry_notes() -> None:
    facts = {
        "env.rank_contract": "partial",
        "env.launcher": "none",
        "net.master_port_free": False,
        "dist.minitest": "hang",
        "dist.missing_ranks": [1],
    }
    found = findings(facts, KB)
    assert [f.entry_id for f in found] == ["D1", "D4", "X1"]
    assert found[0].confirm_total == 2 and len(found[0].matches) == 2
    assert found[1].text == "port taken: see D4"
    assert "D9" not in {f.entry_id for f in found}  # minitest=hang is not what D9 confirms


def test_unknown_facts_never_match() -> None:
    assert findings({}, KB) == []
    assert findings({"env.launcher": "torchrun"}, KB) == []


def test_only_flagged_facts_raise_a_finding() -> None:
    facts = {
        "env.launcher": "none",
        "env.rank_contract": "absent",
        "dist.minitest": "ok",
        "net.master_port_free": False,
    }
    assert {f.entry_id for f in findings(facts, KB)} == {"D1", "D4", "D9"}
    flagged = findings(facts, KB, flagged={"net.master_port_free"})
    assert [f.entry_id for f in flagged] == ["D4"]
    with_context = findings({**facts, "env.rank_contract": "partial"}, KB, flagged={"env.rank_contract"})
    assert [m.fact for m in with_context[0].matches] == ["env.rank_contract", "env.launcher"]


def test_every_confirm_of_the_real_knowledge_base_can_fire(kb: KnowledgeBase) -> None:
    for item in kb.entries.values():
        for confirm in item.confirm:
            fact = kb.facts[confirm.fact]
            value: object = confirm.values[0]
            if fact.type == "bool":
                value = confirm.values[0] == "true"
            found = findings({confirm.fact: value}, kb, flagged={confirm.fact})
            assert item.id in {f.entry_id for f in found}, (item.id, confirm)
