"""Run every reproduction in every setting it supports and keep what each run printed.

    python -m triage.repro.harvest OUT.tar.gz [SCENARIO ...]

Naming scenarios re-runs only those (in every setting they run in now); the other runs already
in OUT.tar.gz are kept.

The archive holds `<scenario>--<setting>/console.log` (the launcher's console) and, for `--log-dir`
runs, the per-rank files torchrun wrote (`attempt_0/1/stderr.log`). The tests diagnose every run
in it (tests/repro/test_repro_outputs.py), so a change to the log engine is checked against real
output in every configuration without rerunning torch; signatures' `examples:` are copied from it.
A full harvest takes a few minutes of CPU (each run is bounded and cleaned up, see runner.py).
"""

from __future__ import annotations

import io
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

from triage.repro import SCENARIOS, Scenario
from triage.repro.settings import Setting

SEPARATOR = "--"


def runs(wanted: set[str] | None = None) -> Iterator[tuple[Scenario, Setting]]:
    """Every (scenario, setting) pair to run, scenarios in their listed order."""
    for scenario in SCENARIOS:
        if wanted and scenario.id not in wanted:
            continue
        for setting in scenario.settings():
            yield scenario, setting


def folder(scenario: Scenario, setting: Setting) -> str:
    """The archive folder of one run: `D20--tee`."""
    return f"{scenario.id}{SEPARATOR}{setting.name}"


def read_archive(path: Path) -> dict[str, list[tuple[str, str]]]:
    """folder -> [(file name, text)], the console first, as harvested."""
    found: dict[str, list[tuple[str, str]]] = {}
    with tarfile.open(path, "r:gz") as archive:
        for member in archive.getmembers():
            if not member.isfile():
                continue
            top, _, name = member.name.partition("/")
            handle = archive.extractfile(member)
            assert handle is not None
            found.setdefault(top, []).append((name, handle.read().decode("utf-8", "replace")))
    for files in found.values():
        files.sort(key=lambda item: (item[0] != "console.log", item[0]))
    return found


def main(argv: list[str]) -> int:
    """Harvest the runs named (all when none) into the archive given first; returns the exit status."""
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    if argv[0].startswith("-"):
        print(
            f"harvest: unknown option {argv[0]} (the first argument is the archive to write)", file=sys.stderr
        )
        return 2
    from triage.repro.runner import run

    out = Path(argv[0])
    wanted = set(argv[1:]) or None
    unknown = (wanted or set()) - {scenario.id for scenario in SCENARIOS}
    if unknown:
        print(f"harvest: no such scenario: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    kept = read_archive(out) if wanted and out.exists() else {}
    redone = {folder(scenario, setting) for scenario, setting in runs(wanted)}
    partial = out.with_name(out.name + ".partial")
    with tarfile.open(partial, "w:gz") as archive:
        for top, files in sorted(kept.items()):
            if top in redone or top.partition(SEPARATOR)[0] in (wanted or ()):
                continue  # a scenario named is harvested afresh, without settings it no longer runs in
            for name, text in files:
                _add(archive, f"{top}/{name}", text)
        for scenario, setting in runs(wanted):
            started = time.monotonic()
            result = run(scenario, setting=setting)
            for name, text in result.sources():
                _add(archive, f"{folder(scenario, setting)}/{name}", text)
            took = time.monotonic() - started
            print(f"{scenario.id:<5} {setting.name:<15} exit {result.returncode}  {took:5.1f} s", flush=True)
    partial.replace(out)
    return 0


def _add(archive: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
