"""`triage report` and `triage report merge` as a user runs them: the real probes, real logs, real
environments with secrets planted in every place a report reads."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO, CliResult
from triage.render.report import REPORT_SECTIONS

Run = Callable[..., CliResult]
D20_LOG = REPO / "tests" / "core" / "logscan" / "data" / "repro-D20.log"
HF = "hf_" + "Zq8" * 10
GITHUB = "ghp_" + "a1B2" * 9
PASSWORD = "s3cr3t-Pa55w0rd"
PLANTED = {
    "HF_TOKEN": HF,
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
    "NCCL_IB_HCA": f"mlx5_0 {GITHUB}",  # a setting the report lists, with a token inside
    "TORCH_DIST_STORE_URL": f"redis://admin:{PASSWORD}@10.0.0.1:6379",
    "NCCL_DEBUG": "INFO",
    "MASTER_ADDR": "10.0.0.1",
}
SECRETS = (HF, GITHUB, PASSWORD, "0123456789abcdef0123456789abcdef01234567")


def sections(text: str) -> list[str]:
    return re.findall(r"^## (.+)$", text, re.MULTILINE)


def one_error_line(result: CliResult) -> str:
    assert result.returncode == 2, result
    err = result.stderr.decode()
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


@pytest.fixture(scope="module")
def leaky_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log = tmp_path_factory.mktemp("logs") / "train.log"
    log.write_text(
        f"[rank0]: launching with --hub-token {HF} and https://user:{PASSWORD}@example.com/x.git\n"
        + D20_LOG.read_text()
    )
    return log


def test_a_planted_secret_never_appears(run_cli: Run, leaky_log: Path, tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(
        json.dumps({"train_batch_size": 8, "wandb": {"api_key": "0123456789abcdef0123456789abcdef01234567"}})
    )
    common = ("--log", str(leaky_log), "--deepspeed-config", str(ds))
    markdown = run_cli("report", *common, env=PLANTED)
    as_json = run_cli("report", "--json", *common, env=PLANTED)
    for result in (markdown, as_json):
        assert result.returncode == 0, result.stderr
        for secret in SECRETS:
            assert secret.encode() not in result.stdout + result.stderr, secret
    text = markdown.stdout.decode()
    assert "<redacted>" in text
    assert "| `NCCL_DEBUG` | `INFO` |" in text and "`NCCL_IB_HCA`" in text
    assert json.loads(as_json.stdout)["node"]["compare"]["settings"]["NCCL_DEBUG"] == "INFO"


def test_the_report_leads_with_the_diagnosis_and_has_every_section(run_cli: Run, tmp_path: Path) -> None:
    out = tmp_path / "issue.md"
    script = REPO / "triage" / "repro" / "scripts" / "train_uneven.py"
    result = run_cli("report", "--log", str(D20_LOG), "--script", str(script), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""
    assert f"report written to {out}" in result.stderr.decode()
    text = out.read_text()
    assert text.startswith("# triage report: D20 ")
    head = text.split("## Diagnosis", 1)[0]
    assert "RE-CHECK YOUR EXPERIMENT" in head and "**Try first:**" in head
    assert sections(text) == [*REPORT_SECTIONS[:-1], "Training script", REPORT_SECTIONS[-1]]
    assert "TRG" in text.split("## Training script", 1)[1]  # the lint probe's findings on the script
    for part in ("| python |", "| torch |", "The env probe:", "The gpu probe:", "The net probe:"):
        assert part in text, part
    assert "✗ FIRST FAIL" in text.split("## Logs", 1)[1]
    unseen = text.split("## What triage could not look at", 1)[1]
    assert "the dist probe" in unseen and "`triage report --dist`" in unseen
    assert "a hung job: not looked at (`triage report --hang`" in unseen
    assert "the lint probe" not in unseen


def test_no_probes_looks_at_nothing_and_says_so(run_cli: Run) -> None:
    result = run_cli("report", "--no-probes", env=PLANTED)
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    assert "10.0.0.1" not in text  # not even the environment was read
    assert "the env probe: not run (--no-probes)" in text
    assert "logs: none given" in text


def _node_json(run_cli: Run, path: Path, env: dict[str, str]) -> Path:
    result = run_cli("report", "--json", "--out", str(path), env=env)
    assert result.returncode == 0, result.stderr
    return path


@pytest.mark.slow  # runs every probe
def test_merge_names_what_differs_between_two_nodes(run_cli: Run, tmp_path: Path) -> None:
    first = _node_json(
        run_cli,
        tmp_path / "node1.json",
        {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0", "MASTER_PORT": "29500"},
    )
    second = _node_json(
        run_cli,
        tmp_path / "node2.json",
        {"NCCL_DEBUG": "WARN", "NCCL_IB_DISABLE": "1", "MASTER_PORT": "29501"},
    )
    merged = run_cli("report", "merge", str(first), str(second))
    assert merged.returncode == 1, merged.stderr  # like diff: 1 when something differs
    text = merged.stdout.decode()
    assert "| `NCCL_DEBUG` | `INFO` | `WARN` |" in text
    assert "| `NCCL_IB_DISABLE` | `(unset)` | `1` |" in text
    assert "| `NCCL_SOCKET_IFNAME` | `eth0` | `(unset)` |" in text
    assert "| `MASTER_PORT` | `29500` | `29501` |" in text
    assert "## NCCL and torch settings" in text and "## Launcher and rank contract" in text
    assert "## Versions" not in text  # the same python and torch on both: nothing to flag
    as_json = json.loads(run_cli("report", "merge", "--json", str(first), str(second)).stdout)
    names = {d["name"] for d in as_json["differences"]}
    assert {"NCCL_DEBUG", "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME", "MASTER_PORT"} <= names
    same = run_cli("report", "merge", str(first), str(first))
    assert same.returncode == 0 and "the same on every node" in same.stdout.decode()


@pytest.mark.slow  # runs every probe
def test_merge_refuses_what_is_not_a_node_report(run_cli: Run, tmp_path: Path) -> None:
    good = _node_json(run_cli, tmp_path / "good.json", {})
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({"found": True}))
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00")
    assert "needs two or more" in one_error_line(run_cli("report", "merge", str(good)))
    bare = run_cli("report", "merge")
    assert bare.returncode == 2 and b"the following arguments are required" in bare.stderr
    assert "not JSON" in one_error_line(run_cli("report", "merge", str(good), str(tmp_path / "bad.json")))
    assert "not a `triage report --json` file" in one_error_line(
        run_cli("report", "merge", str(good), str(tmp_path / "other.json"))
    )
    assert "not UTF-8" in one_error_line(run_cli("report", "merge", str(good), str(tmp_path / "binary.json")))
    assert "no such file" in one_error_line(
        run_cli("report", "merge", str(good), str(tmp_path / "nope.json"))
    )
    assert "a directory" in one_error_line(run_cli("report", "merge", str(good), str(tmp_path)))
    typo = run_cli("report", "mrege", "a.json")
    assert typo.returncode == 2 and b"invalid choice: 'mrege'" in typo.stderr


def test_bad_input_before_any_probe_runs(run_cli: Run, tmp_path: Path) -> None:
    assert "no such file" in one_error_line(run_cli("report", "--log", str(tmp_path / "missing.log")))
    assert "--timeout" in one_error_line(run_cli("report", "--timeout", "0"))
    assert "cannot be written" in one_error_line(
        run_cli("report", "--no-probes", "--out", str(tmp_path / "no" / "x.md"))
    )


def test_hang_adds_triage_hangs_picture_or_says_why_not(run_cli: Run) -> None:
    """Other jobs may run on the machine the tests run on: either outcome is a real one."""
    result = run_cli("report", "--hang", "--timeout", "3")
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    unseen = text.split("## What triage could not look at", 1)[1]
    if "\n## Hung job\n" in text:
        assert "**Verdict:**" in text.split("\n## Hung job\n", 1)[1]
    else:
        assert "a hung job: no distributed training job found" in unseen
    assert "`triage report --hang`" not in unseen
