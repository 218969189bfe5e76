"""Copying the fix's first command and exporting the session report: written where asked, never
through a planted link, every secret redacted; each driven through the app like a user."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from tests.conftest import CliResult
from triage.core.inventory import Inventory
from triage.core.model import KnowledgeBase
from triage.render.report import REPORT_SECTIONS, first_command
from triage.tui.app import NoProbes, make_app
from triage.tui.result_screen import ResultScreen

from .conftest import ScriptedRunner, result, settle
from .test_app_walks import NET_BUSY

pytestmark = pytest.mark.slow  # drives the Textual app

SECRET = "hf_abcdefghijklmnopqrstuvwx"
NET_BUSY_WITH_ENV = result(
    "net",
    "fail",
    {"net.master_port_free": False},
    "port 29500 is held by pid 4242",
    [("socket.bind(('0.0.0.0', 29500))", f"OSError: [Errno 98] Address already in use\nHF_TOKEN={SECRET}")],
)


async def export(pilot: Pilot[None]) -> tuple[ResultScreen, Path]:
    """Press `e` on the result screen; the screen and the report it wrote."""
    screen = pilot.app.screen
    assert isinstance(screen, ResultScreen)
    await pilot.press("e")
    await settle(pilot)
    assert screen.report_path is not None
    return screen, screen.report_path


async def test_copy_puts_the_fixs_first_command_on_the_clipboard(kb: KnowledgeBase) -> None:
    app = make_app(kb, ScriptedRunner({"net": NET_BUSY}))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("1", "1")
        await settle(pilot)
        assert isinstance(app.screen, ResultScreen)
        await pilot.press("c")
        command = first_command(kb, kb.entries["D4"])
        assert command and app.clipboard == command
        assert any(command in line for line in kb.entries["D4"].fix.splitlines())


FIXED_INVENTORY = Inventory(
    system="Linux test", driver="550.54.15", gpus=("NVIDIA H100",), settings={"NCCL_DEBUG": "WARN"}
)


async def test_export_writes_the_session_report_with_secrets_redacted(
    kb: KnowledgeBase, tmp_path: Path, run_cli: Callable[..., CliResult]
) -> None:
    runner = ScriptedRunner({"net": NET_BUSY_WITH_ENV})
    app = make_app(kb, runner, report_dir=tmp_path, read_inventory=lambda timeout, cancel: FIXED_INVENTORY)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("1", "1")
        await settle(pilot)
        screen, path = await export(pilot)
        assert screen.entry.id == "D4" and path.parent == tmp_path.resolve()
        assert str(path) in str(screen.query_one("#saved").render())
        text = path.read_text(encoding="utf-8")
        await pilot.press("e")  # a second export in the same second never overwrites the first
        await settle(pilot)
        assert screen.report_path is not None and screen.report_path != path
        assert path.read_text(encoding="utf-8") == text
    assert text.startswith("# triage report: D4 ")
    assert "No experiment re-check needed" in text
    assert "1. **What do you see?** It will not start" in text
    assert not [node for node in kb.graph.nodes if "_" in node and node in text]  # questions in words
    assert "Checking whether the master port" in text and "found `net.master_port_free = false` → D4" in text
    assert "Address already in use" in text
    assert SECRET not in text
    assert "HF_TOKEN=<redacted>" in text
    assert kb.entries["D4"].fix.strip().splitlines()[0] in text
    assert kb.entries["D4"].verify.why.strip()[:40] in text
    # the probes the walk did not need ran for the report, without entering the walk's records
    assert {"env", "gpu", "versions", "configs"} <= set(runner.calls)
    assert [r.probe for r in app.session.records] == ["net"]
    assert "| `NCCL_DEBUG` | `WARN` |" in text and "1 x NVIDIA H100, driver `550.54.15`" in text
    # the same document, section for section, as `triage report`
    cli = run_cli("report", "--no-probes")
    assert cli.returncode == 0, cli.stderr
    assert sections(text) == sections(cli.stdout.decode()) == list(REPORT_SECTIONS)


async def test_export_with_probes_off_looks_at_nothing(kb: KnowledgeBase, tmp_path: Path) -> None:
    app = make_app(kb, NoProbes("probes switched off (--no-probes)"), report_dir=tmp_path / "reports")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("1", "1")
        await settle(pilot)
        await pilot.press("1")  # the probe node asks instead: the port is taken
        await settle(pilot)
        _, path = await export(pilot)
        text = path.read_text(encoding="utf-8")
    assert path.parent == (tmp_path / "reports").resolve()  # the folder --report-dir named, created
    unseen = text.split("## What triage could not look at", 1)[1]
    assert "probes switched off (--no-probes)" in unseen
    assert "the machine's inventory (driver, topology, settings): probes are switched off" in unseen
    assert sections(text) == list(REPORT_SECTIONS)


def sections(text: str) -> list[str]:
    return re.findall(r"^## (.+)$", text, re.MULTILINE)


def test_export_never_follows_a_planted_link_nor_reuses_a_name(tmp_path: Path) -> None:
    from triage.tui.result_screen import write_new

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n", encoding="utf-8")
    name = "triage-report-D4-20260101-120000.md"
    (tmp_path / name).symlink_to(victim)  # planted where the next report will be written
    (tmp_path / name.replace(".md", "-2.md")).symlink_to(tmp_path / "nowhere.md")  # a dangling one too
    first = write_new(tmp_path, name, "report one\n")
    second = write_new(tmp_path, name, "report two\n")
    assert victim.read_text(encoding="utf-8") == "precious\n"
    assert not (tmp_path / "nowhere.md").exists()
    assert first.name == name.replace(".md", "-3.md") and not first.is_symlink()
    assert second.name == name.replace(".md", "-4.md")
    assert (
        first.read_text(encoding="utf-8") == "report one\n"
        and second.read_text(encoding="utf-8") == "report two\n"
    )


async def test_export_redacts_the_whole_secrets_corpus(kb: KnowledgeBase, tmp_path: Path) -> None:
    """Every shape of tests/secrets_corpus.py in a probe's summary, facts and evidence, and the
    user's own words: none in the exported report, every look-alike kept."""
    from tests.secrets_corpus import LOOKALIKES, SHAPES

    corpus = "\n".join(shape.text for shape in SHAPES)
    looks = "\n".join(LOOKALIKES)
    net = result(
        "net",
        "fail",
        {"net.master_port_free": False, "net.master_port_holder": " ".join(s.text for s in SHAPES[:10])},
        f"port 29500 is held by {SHAPES[30].text}",
        [("ss -ltnp", f"{looks}\n{corpus}"), (f"cmdline {SHAPES[31].text}", corpus)],
    )
    app = make_app(kb, ScriptedRunner({"net": net}), report_dir=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("1", "1")
        await settle(pilot)
        _, path = await export(pilot)
        text = path.read_text(encoding="utf-8")
    leaked = [secret for shape in SHAPES for secret in shape.secrets if secret in text]
    assert not leaked
    assert all(look in text for look in LOOKALIKES if "`" not in look)
