"""`triage kb new ID --section S`: a complete skeleton that `kb check` rejects, naming each
placeholder, until it is filled in and placed in the graph; then it is accepted as it stands."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from tests.conftest import CliResult, overlay_kb

FILLED = {
    "title": "A third failure for the fixture graph",
    "summary": "The job fails in a third way that users recognise.",
    "root_cause": "It happens because of a third cause, explained here in enough words for a reader.",
    "fix": "Run the fixed command.",
    "why": "The fix changes nothing about the run.",
    "note": "the line the failing job prints",
    "pattern": "third failure line",
    "example": "RuntimeError: third failure line",
}


def fill(text: str) -> str:
    """Replace every placeholder the way an author would, with plausible content."""
    text = re.sub(r'title: ".*"', f'title: "{FILLED["title"]}"', text)
    text = re.sub(r'summary: ".*"', f'summary: "{FILLED["summary"]}"', text)
    for n in range(1, 9):
        text = text.replace(
            f"TODO(kb new): phrasing {n} in the words users type, from a real thread (pasted errors welcome)",
            f"third failure phrasing number {n}",
        )
    text = text.replace(r"'TODO\(kb new\): the literal text of the line'", f"'{FILLED['pattern']}'")
    text = text.replace('"TODO(kb new): what this line is and who prints it"', f'"{FILLED["note"]}"')
    text = text.replace(
        '"TODO(kb new): a real line, copied verbatim from a thread, torch/NCCL source or a reproduction"',
        f'"{FILLED["example"]}"',
    )
    text = text.replace("TODO(kb new): why it happens (Markdown), in your own words.", FILLED["root_cause"])
    text = text.replace("TODO(kb new): the exact commands and code, best option first.", FILLED["fix"])
    text = text.replace("  TODO(kb new)\n  ```", "  torchrun --standalone train.py\n  ```")
    text = re.sub(r'why: ".*"', f'why: "{FILLED["why"]}"', text)
    text = text.replace('"TODO(kb new): the public doc or thread this comes from"', '"PyTorch docs"')
    text = text.replace(
        "https://example.org/TODO-kb-new", "https://docs.pytorch.org/docs/stable/distributed.html"
    )
    text = text.replace(
        '"TODO(kb new): a phrasing NOT in symptoms that must rank this entry first"', '"a third way"'
    )
    text = text.replace(
        '"TODO(kb new): a phrasing of another problem that must not rank this entry first"', '"x"'
    )
    return text.replace('"TODO(kb new): another one"', '"third again"')


def test_new_entry_skeleton_is_checked_until_filled_and_placed(
    tmp_path: Path, run_cli: Callable[..., CliResult]
) -> None:
    root = overlay_kb(tmp_path / "knowledge")
    made = run_cli("--kb", str(root), "kb", "new", "d3", "--section", "hangs", "--json")
    assert made.returncode == 0, made.stderr.decode()
    info = json.loads(made.stdout)
    path = Path(info["path"])
    assert info["id"] == "D3" and path.name == "D03-d3.yaml" and path.parent == root / "entries"
    assert any("graph.yaml" in step for step in info["next"])

    check = run_cli("--kb", str(root), "kb", "check")
    assert check.returncode == 2
    errors = check.stderr.decode()
    assert "KB007 summary: still holds the `triage kb new` placeholder" in errors
    assert "symptoms[7]" in errors and "references[0].url" in errors
    assert "KB003" in errors  # not reachable in the graph yet

    path.write_text(fill(path.read_text()))
    graph = root / "graph.yaml"
    graph.write_text(
        graph.read_text().replace(
            "      - label: Hang\n        target: D2\n",
            "      - label: Hang\n        target: D2\n      - label: A third way\n        target: D3\n",
        )
    )
    assert run_cli("--kb", str(root), "kb", "build").returncode == 0
    final = run_cli("--kb", str(root), "kb", "check")
    assert final.returncode == 0, final.stderr.decode()
    assert b"3 entries" in final.stdout


def test_kb_new_refuses_bad_input(tmp_path: Path, run_cli: Callable[..., CliResult]) -> None:
    root = overlay_kb(tmp_path / "knowledge")
    for args, message in [
        (["kb", "new"], "kb new needs an entry id"),
        (["kb", "new", "Z9", "--section", "hangs"], "is not an entry id"),
        (["kb", "new", "D7"], "kb new needs --section: one of launch, hangs"),
        (["kb", "new", "D7", "--section", "nope"], "is not in sections.yaml"),
        (["kb", "new", "D1", "--section", "hangs"], "D1 already exists: knowledge/entries/D01-port.yaml"),
        (["kb", "check", "D1"], "takes no id"),
    ]:
        result = run_cli("--kb", str(root), *args)
        assert result.returncode == 2, (args, result.stdout)
        assert message in result.stderr.decode(), (args, result.stderr)
        assert b"Traceback" not in result.stderr
    assert sorted(p.name for p in (root / "entries").iterdir()) == ["D01-port.yaml", "D02-hang.yaml"]


def test_the_shipped_knowledge_holds_no_placeholder() -> None:
    from tests.conftest import REPO

    for path in (REPO / "knowledge" / "entries").glob("*.yaml"):
        assert "TODO(kb new)" not in path.read_text(), path.name
