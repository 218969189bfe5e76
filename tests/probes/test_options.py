"""The probe options are declared once: `probe`, `walk` and `tui` accept and check them alike."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from probes.options import add_probe_arguments, probe_options
from triage.cli import probe, walk
from triage.core.errors import UserError
from triage.tui import command as tui_command


def _parse(add: object, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add(parser)  # type: ignore[operator]
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("add", [walk.add_arguments, tui_command.add_arguments])
def test_walk_and_the_app_take_the_same_options(add: object, tmp_path: Path) -> None:
    config = tmp_path / "ds.json"
    config.write_text("{}")
    args = _parse(add, "--probe-timeout", "5", "--deepspeed-config", str(config), "--peer-host", "node2")
    options = probe_options(args)
    assert (options.timeout_s, options.deepspeed_config, options.peer_host) == (5.0, str(config), "node2")


def test_probe_names_its_timeout_flag_in_errors() -> None:
    args = _parse(probe.add_arguments, "--timeout", "0")
    with pytest.raises(UserError, match="--timeout must be above 0"):
        probe_options(args)


def test_a_missing_config_is_one_clear_error(tmp_path: Path) -> None:
    args = _parse(add_probe_arguments, "--accelerate-config", str(tmp_path / "missing.yaml"))
    with pytest.raises(UserError, match="--accelerate-config: no such file"):
        probe_options(args)
