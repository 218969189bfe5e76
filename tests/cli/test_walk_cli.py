"""`triage walk`: the plain-prompt walk, driven by --answer, by answers piped on stdin, and broken input."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from tests.conftest import CliResult
from triage.core.model import KnowledgeBase

Run = Callable[..., CliResult]


def walk_json(result: CliResult) -> dict[str, object]:
    assert result.returncode == 0, result.stderr.decode()
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def test_answers_on_the_command_line_reach_the_leaf_as_json(run_cli: Run) -> None:
    data = walk_json(run_cli("walk", "--json", "--answer", "what_do_you_see=5", "--answer", "placement=1"))
    leaf = data["leaf"]
    assert isinstance(leaf, dict) and leaf["id"] == "D3" and leaf["verify"]["needed"] is False
    trail = data["trail"]
    assert isinstance(trail, list)
    assert [(s["node"], s["via"]) for s in trail] == [("what_do_you_see", "answer"), ("placement", "answer")]
    assert trail[1]["answer"].startswith("All processes pile onto GPU 0")
    assert data["jumped"] is False and data["probes"] == []


def test_an_answer_for_a_probe_node_overrides_the_probe(run_cli: Run) -> None:
    data = walk_json(
        run_cli(
            "walk",
            "--json",
            "--answer",
            "what_do_you_see=1",
            "--answer",
            "launch_error=1",
            "--answer",
            "port_probe=false",
        )
    )
    assert data["leaf"]["id"] == "D4"  # type: ignore[index]
    assert data["trail"][-1] == {  # type: ignore[index]
        "node": "port_probe",
        "prompt": data["trail"][-1]["prompt"],  # type: ignore[index]
        "answer": "false",
        "target": "D4",
        "via": "override",
    }
    assert data["probes"] == []


def test_answers_piped_on_stdin(run_cli: Run) -> None:
    done = run_cli("walk", "--no-probes", stdin=b"4\n1\n?\n")
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode()
    assert "What do you see?" in out and "Where exactly does it stop?" in out
    assert "> ?" in out  # answers read from a pipe are echoed so the transcript reads like a session
    assert "-> D9:" in out
    assert "Ranks run different numbers of batches" in out


def test_an_unavailable_probe_asks_its_question_instead(run_cli: Run) -> None:
    done = run_cli(
        "walk",
        "--json",
        "--no-probes",
        "--answer",
        "what_do_you_see=1",
        "--answer",
        "launch_error=1",
        stdin=b"2\n",
    )
    data = walk_json(done)
    assert data["leaf"]["id"] == "D2"  # type: ignore[index]
    assert [s["via"] for s in data["trail"]] == ["answer", "answer", "fallback", "answer"]  # type: ignore[union-attr]
    assert data["probes"] == [
        {
            "name": "net",
            "node": "port_probe",
            "status": "unavailable",
            "summary": "probes switched off (--no-probes)",
            "facts": {},
        }
    ]
    err = done.stderr.decode()
    assert "Which process hit the port clash?" in err  # with --json the questions go to stderr


def test_own_words_and_back_and_jumping_to_an_entry(run_cli: Run) -> None:
    done = run_cli("walk", "--no-probes", stdin=b"4\nb\n5\nthey all use the first gpu\n")
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode()
    assert "Taking that as: All processes pile onto GPU 0" in out
    assert "-> D3:" in out

    data = walk_json(run_cli("walk", "--json", stdin=b"d9\n"))
    assert data["leaf"]["id"] == "D9" and data["jumped"] is True  # type: ignore[index]


def test_stdin_that_ends_too_early_names_the_question(run_cli: Run) -> None:
    done = run_cli("walk", "--no-probes", stdin=b"4\n")
    assert done.returncode == 2
    err = done.stderr.decode().strip().splitlines()
    assert err == [
        "triage: error: no answer to “Where exactly does it stop?”: stdin ended (scripts: --answer hang_end=N)"
    ]


def test_bad_answers_are_one_line_errors(run_cli: Run) -> None:
    cases = {
        ("--answer", "nowhere=1"): "'nowhere' is not a node of the decision graph",
        ("--answer", "what_do_you_see"): "expected NODE=OPTION",
        ("--answer", "what_do_you_see=99"): "“What do you see?” has options 1-14, not 99",
        ("--answer", "port_probe=maybe"): "has no branch for 'maybe'",
    }
    for args, message in cases.items():
        done = run_cli("walk", "--json", *args, stdin=b"")
        assert done.returncode == 2, args
        lines = done.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, lines)
        assert done.stdout == b""


def test_unreadable_stdin_is_refused_cleanly(run_cli: Run) -> None:
    done = run_cli("walk", "--no-probes", stdin=b"\xff\xfe\n")
    assert done.returncode == 2
    assert "not UTF-8" in done.stderr.decode()
    done = run_cli("walk", "--no-probes", stdin=b"x" * 200_000 + b"\n")
    assert done.returncode == 2
    assert "longer than 100000 bytes" in done.stderr.decode()
    done = run_cli("walk", "--no-probes", stdin=b"not an answer at all\n")
    assert done.returncode == 2
    assert "is not an option of “What do you see?”" in done.stderr.decode()
    assert "what_do_you_see" not in done.stderr.decode()  # the question's words, not its internal id


def test_the_walk_shows_questions_in_words_never_their_ids(run_cli: Run, kb: KnowledgeBase) -> None:
    done = run_cli("walk", stdin=b"1\n1\n")  # a real net probe decides the next step
    out = done.stdout.decode()
    assert "(probe net;" in out
    ids = [n for n in kb.graph.nodes if "_" in n]  # plain words ("memory") can be ids and prose alike
    assert len(ids) > 10
    for node_id in ids:
        assert not re.search(rf"\b{re.escape(node_id)}\b", out), node_id
