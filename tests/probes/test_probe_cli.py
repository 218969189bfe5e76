"""`triage probe` as a user runs it: table, JSON, findings, exit statuses, bad input, redaction."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.probes.helpers import run_triage, triage_env

FAST = ("env", "gpu", "net", "versions", "configs")


def test_table_and_findings_for_a_partial_rank_contract() -> None:
    env = triage_env(WORLD_SIZE="8", RANK="0", MASTER_ADDR="127.0.0.1")
    result = run_triage("probe", *FAST, env=env)
    assert result.returncode == 4, result.stderr  # WARN
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["PROBE", "STATUS", "TIME", "KEY", "FACTS"]
    assert [line.split()[0] for line in lines[1:11:2]] == list(FAST)
    env_row = lines[1].split()
    assert env_row[:2] == ["env", "warn"] and "rank_contract=partial" in env_row
    assert lines[2].strip() == "LOCAL_RANK, MASTER_PORT unset while WORLD_SIZE=8"
    findings = result.stdout.split("Findings", 1)[1]
    assert "\n  D1 " in findings
    assert "env.rank_contract=partial" in findings
    assert "MN2" not in findings  # NCCL_SOCKET_IFNAME unset fits MN2's story but was not flagged
    assert result.stderr == ""  # progress goes to stderr only on a terminal


def test_json_document() -> None:
    secret = "ghp_" + "x1Y2z3" * 6
    env = triage_env(GITHUB_TOKEN=secret, NCCL_DEBUG=f"INFO {secret}", MASTER_PORT="29500")
    result = run_triage("probe", "env", "net", "--json", "--timeout", "5", env=env)
    assert secret not in result.stdout
    data = json.loads(result.stdout)
    assert set(data) == {
        "schema",
        "triage_version",
        "host",
        "options",
        "worst_status",
        "exit_code",
        "probes",
        "facts",
        "findings",
        "findings_error",
    }
    assert data["schema"] == 1 and data["host"] == socket.gethostname() and data["options"]["timeout_s"] == 5
    assert [p["name"] for p in data["probes"]] == ["env", "net"]
    for probe in data["probes"]:
        assert set(probe) == {"name", "status", "summary", "duration_s", "facts", "flagged", "evidence"}
        assert all(set(e) == {"source", "output"} for e in probe["evidence"])
    assert data["facts"]["env.launcher"] == "none" and "net.master_port_free" in data["facts"]
    assert data["exit_code"] == result.returncode == {"ok": 0, "warn": 4}[data["worst_status"]]
    assert data["findings_error"] is None


def test_failing_probe_exits_5_and_points_at_the_entry(tmp_path: Path) -> None:
    accelerate = tmp_path / "acc.yaml"
    accelerate.write_text(
        "distributed_type: DEEPSPEED\nmixed_precision: bf16\ndeepspeed_config:\n  zero_stage: 2\n"
    )
    ds = tmp_path / "ds.json"
    ds.write_text('{"fp16": {"enabled": true}}')
    result = run_triage(
        "probe",
        "configs",
        "--json",
        "--accelerate-config",
        str(accelerate),
        "--deepspeed-config",
        str(ds),
    )
    data = json.loads(result.stdout)
    assert result.returncode == 4 and data["worst_status"] == "warn"
    assert {f["entry"] for f in data["findings"]} >= {"D17"}
    ds.write_text("{not json")
    broken = run_triage(
        "probe",
        "configs",
        "--accelerate-config",
        str(accelerate),
        "--deepspeed-config",
        str(ds),
    )
    assert broken.returncode == 5
    assert "is not valid JSON: line 1" in broken.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["probe", "nope"],
            "triage: error: unknown probe 'nope'; the probes are: env, gpu, net, versions, configs, dist, lint, hang",
        ),
        (
            ["probe", "env", "--timeout", "0"],
            "triage: error: --timeout must be above 0 and at most 3600 seconds, not 0",
        ),
        (
            ["probe", "--accelerate-config", "/"],
            "triage: error: --accelerate-config: '/': not a regular file (a FIFO, device, socket or directory)",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = run_triage(*args)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == message + "\n"


def test_a_broken_knowledge_base_does_not_hide_the_probes(tmp_path: Path) -> None:
    result = run_triage("--kb", str(tmp_path / "missing"), "probe", "env")
    assert result.returncode == 0
    assert result.stdout.splitlines()[1].startswith("env ")
    assert "Findings unavailable: knowledge directory not found" in result.stdout


def test_progress_line_rewrites_itself() -> None:
    import io

    from triage.cli.probe import Progress
    from triage.core.facts import ProbeResult

    stream = io.StringIO()
    progress = Progress(stream, ["env", "dist"])
    progress("env", None)
    progress("dist", None)
    progress("env", ProbeResult("env", "ok"))
    progress.clear()
    frames = stream.getvalue().split("\r\033[K")
    assert frames[1:] == [
        "probing: 0/2 done, running env",
        "probing: 0/2 done, running env, dist",
        "probing: 1/2 done, running dist",
        "",
    ]
