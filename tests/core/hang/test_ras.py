"""NCCL RAS reports, parsed from the real output NVIDIA published (tests/fixtures/hang/ras/README.md):
which ranks lag or are missing, and only when two reads agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from triage.core.hang.ras import parse, parse_json, parse_text, stuck

RAS = Path(__file__).resolve().parents[2] / "fixtures" / "hang" / "ras"


def _read(name: str) -> str:
    return (RAS / name).read_text(encoding="utf-8")


def test_json_report_names_the_unresponsive_rank() -> None:
    status = parse_json(_read("docs_status.json"))
    (comm,) = status.comms
    assert comm.name == "0xae94423cfbb2ef4a"
    assert comm.counts == {0: 0}
    assert comm.missing == (1,) and comm.dead == ()
    lines, suspects = stuck(status, status)
    assert suspects == (1,)
    assert any("rank 1 did not answer" in line for line in lines)


def test_text_mismatch_names_the_six_lagging_ranks() -> None:
    status = parse_text(_read("docs_mismatch.txt"))
    (comm,) = status.comms
    assert comm.name == "#0-0 (27a079b828ff1a75)" and comm.problems == ("MISMATCH",)
    assert comm.levels == ((26, 6650), (6, 6649))
    assert comm.counts == {r: 6649 for r in (0, 2, 3, 4, 5, 7)}
    lines, suspects = stuck(status, status)
    assert suspects == (0, 2, 3, 4, 5, 7)
    assert "ranks 0, 2, 3, 4, 5, 7 launched operations up to 6649" in lines[0]


def test_listed_ranks_that_are_ahead_are_not_suspects() -> None:
    # Issue #1911: RAS lists the two ranks at 641, the 30 it does not name are the stragglers.
    status = parse(_read("issue1911_allgather.txt"))
    (comm,) = status.comms
    assert comm.counts == {12: 641, 13: 641}
    lines, suspects = stuck(status, status)
    assert suspects == ()
    assert (
        lines and "30 ranks launched operations up to 640" in lines[0] and "ranks 12, 13 further" in lines[0]
    )


def test_dead_process_and_missing_rank() -> None:
    status = parse_text(_read("docs_dead.txt"))
    assert status.dead_processes == 1
    (comm,) = status.comms
    assert comm.missing == (21,) and comm.problems == ("INCOMPLETE",)
    assert stuck(status, status)[1] == (21,)


def test_a_mismatch_that_moves_between_reads_is_not_a_hang() -> None:
    first = parse_text(_read("docs_mismatch.txt"))
    later = parse_text(_read("docs_mismatch.txt").replace("6650", "6702").replace("6649", "6701"))
    assert stuck(first, later) == ((), ())
    assert stuck(later, later)[1] == (0, 2, 3, 4, 5, 7)


def test_a_healthy_report_says_nothing() -> None:
    healthy = _read("docs_mismatch.txt").split("Warnings")[0].replace("MISMATCH", "OK")
    status = parse_text(healthy)
    assert status.comms == ()
    assert stuck(status, status) == ((), ())


@pytest.mark.parametrize("text", ["[]", '{"nccl_version": "2.29.1"}', "{not json"])
def test_json_that_is_not_a_ras_report_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_json(text)
