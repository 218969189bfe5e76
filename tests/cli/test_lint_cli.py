"""`triage lint`: the real command on real files: output, JSON, exit statuses, --explain, pyproject
selection, ignore comments, shell launch scripts, bad input, and the walk branching on a finding."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult

Run = Callable[..., CliResult]
FIXTURES = Path(__file__).resolve().parent.parent / "core" / "lint" / "fixtures"
LINE = re.compile(
    r"^(?P<path>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<code>TRG\d{3}) \[(?P<entry>\w+)\] (?P<message>.+)$"
)

BUGGY = """\
import datetime
import os

import torch
import torch.distributed as dist

dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=30))
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
rank = dist.get_rank()
if rank == 0:
    torch.save({}, "model.pt")
    dist.barrier()
"""


def one_error_line(result: CliResult) -> str:
    err = result.stderr.decode()
    assert result.returncode == 2, (result.returncode, err, result.stdout)
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err.strip()


def finding_lines(result: CliResult) -> list[re.Match[str]]:
    return [m for line in result.stdout.decode().splitlines() if (m := LINE.match(line))]


def test_findings_print_like_a_linter_and_exit_1(run_cli: Run, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(BUGGY)
    result = run_cli("lint", str(script))
    assert result.returncode == 1, result.stderr
    [match] = finding_lines(result)
    assert match["path"] == str(script) and (match["line"], match["col"]) == ("12", "5")
    assert match["code"] == "TRG021" and match["entry"] == "D21"
    assert match["message"] == (
        "barrier() is only reached on rank 0 (inside `if rank == 0:` at line 10); every rank must call it"
    )
    out = result.stdout.decode()
    assert "triage lint --explain TRG021" in out and "Found 1 finding (1 error) in 1 file." in out


def test_a_clean_script_exits_0(run_cli: Run) -> None:
    result = run_cli("lint", str(FIXTURES / "TRG021_pass.py"))
    assert result.returncode == 0 and "All clear: 1 file checked, no findings." in result.stdout.decode()


def test_json_lists_every_finding(run_cli: Run) -> None:
    result = run_cli("lint", "--json", str(FIXTURES / "TRG023_fail.py"), str(FIXTURES / "TRG023_pass.py"))
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["files"] == 2 and data["counts"] == {"error": 0, "warning": 3, "info": 0}
    assert [f["line"] for f in data["findings"]] == [14, 15, 16]
    first = data["findings"][0]
    assert set(first) == {"code", "entry", "severity", "path", "line", "col", "message", "fix"}
    assert (first["code"], first["entry"], first["severity"]) == ("TRG023", "D23", "warning")


def test_a_directory_is_walked_and_a_broken_file_in_it_is_skipped(run_cli: Run, tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "TRG022_fail.py", tmp_path / "a.py")
    (tmp_path / "pkg").mkdir()
    shutil.copy(FIXTURES / "TRG003_fail.py", tmp_path / "pkg" / "b.py")
    (tmp_path / "pkg" / "broken.py").write_text("def f(:\n")
    (tmp_path / ".venv").mkdir()
    shutil.copy(FIXTURES / "TRG021_fail.py", tmp_path / ".venv" / "ignored.py")
    result = run_cli("lint", "--json", str(tmp_path))
    data = json.loads(result.stdout)
    assert result.returncode == 1 and data["files"] == 2
    assert {f["code"] for f in data["findings"]} == {"TRG022", "TRG003"}
    assert data["skipped"] == [f"{tmp_path / 'pkg' / 'broken.py'}:1: syntax error: invalid syntax"]


def test_a_dangling_link_in_a_directory_is_skipped_not_fatal(run_cli: Run, tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "TRG022_fail.py", tmp_path / "a.py")
    (tmp_path / "gone.py").symlink_to(tmp_path / "deleted_since.py")
    result = run_cli("lint", "--json", str(tmp_path))
    data = json.loads(result.stdout)
    assert result.returncode == 1 and data["files"] == 1
    assert len(data["skipped"]) == 1 and "gone.py: cannot read" in data["skipped"][0]


def test_explain_prints_the_rule_page(run_cli: Run) -> None:
    result = run_cli("lint", "--explain", "trg21", env={"NO_COLOR": "1"})
    assert result.returncode == 0
    out = result.stdout.decode()
    for part in (
        "TRG021: rank-conditional-collective",
        "What it finds",
        "Why it is a problem",
        "Example",
        "Fix",
        "Entry",
    ):
        assert part in out
    assert "dist.barrier()  # every rank" in out and "triage show D21" in out


def test_rules_lists_every_code(run_cli: Run) -> None:
    from triage.core.lint import RULES

    result = run_cli("lint", "--rules", "--json")
    assert [r["code"] for r in json.loads(result.stdout)["rules"]] == list(RULES)


def test_ignore_comments_and_pyproject_selection(run_cli: Run, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(BUGGY.replace("    dist.barrier()\n", "    dist.barrier()  # triage: ignore[TRG021]\n"))
    assert run_cli("lint", str(script), cwd=tmp_path).returncode == 0
    # TRG021, and TRG040: the final barrier waits for rank 0's save under the default timeout
    script.write_text(BUGGY.replace(", timeout=datetime.timedelta(minutes=30)", "") + "dist.barrier()\n")

    def codes() -> set[str]:
        shown = run_cli("lint", "--min-severity", "info", str(script), cwd=tmp_path)
        return {m["code"] for m in finding_lines(shown)}

    assert codes() == {"TRG021", "TRG040"}
    (tmp_path / "pyproject.toml").write_text('[tool.triage.lint]\nignore = ["TRG021"]\n')
    assert codes() == {"TRG040"}
    (tmp_path / "pyproject.toml").write_text('[tool.triage.lint]\nselect = ["TRG02"]\n')
    assert codes() == {"TRG021"}
    assert run_cli("lint", "--ignore", "TRG021", str(script), cwd=tmp_path).returncode == 0


@pytest.mark.parametrize(
    ("pyproject", "problem"),
    [
        ("[tool.triage.lint\n", "invalid TOML"),
        ('[tool.triage.lint]\nselct = ["TRG021"]\n', "unknown key 'selct' in [tool.triage.lint]"),
        ('[tool.triage.lint]\nignore = ["TRG999"]\n', "unknown code 'TRG999'"),
        ('[tool.triage.lint]\nignore = "TRG021"\n', "ignore must be a list of codes"),
    ],
)
def test_a_bad_pyproject_is_one_line(run_cli: Run, tmp_path: Path, pyproject: str, problem: str) -> None:
    (tmp_path / "pyproject.toml").write_text(pyproject)
    err = one_error_line(run_cli("lint", str(FIXTURES / "TRG021_pass.py"), cwd=tmp_path))
    assert "pyproject.toml" in err and problem in err


def test_a_launch_script_with_restarts_checks_the_script_it_starts(run_cli: Run, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import torch.distributed as dist\nfor step in range(10):\n    step_fn(step)\n"
    )
    (tmp_path / "run.sh").write_text(
        "#!/bin/sh\ntorchrun --nproc-per-node=8 \\\n  --max-restarts=3 train.py\n"
    )
    result = run_cli("lint", "--json", "--select", "TRG041", str(tmp_path / "run.sh"))
    [finding] = json.loads(result.stdout)["findings"]
    assert finding["path"] == str(tmp_path / "train.py") and finding["code"] == "TRG041"
    assert f"--max-restarts=3 in {tmp_path / 'run.sh'}:2" in finding["message"]


def test_a_launch_script_checks_the_script_it_starts(run_cli: Run, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import torch.distributed as dist\ndist.init_process_group('gloo')\n"
        "if dist.get_rank() == 0:\n    dist.barrier()\n"
    )
    (tmp_path / "run.sh").write_text("#!/bin/sh\ntorchrun --nproc-per-node=2 train.py\n")
    result = run_cli("lint", "--json", "--select", "TRG021", str(tmp_path / "run.sh"))
    assert result.returncode == 1, result.stderr
    assert [(f["path"], f["code"]) for f in json.loads(result.stdout)["findings"]] == [
        (str(tmp_path / "train.py"), "TRG021")
    ]


@pytest.mark.parametrize(
    ("name", "data", "problem"),
    [
        ("broken.py", b"def f(:\n    pass\n", "broken.py:1: syntax error: invalid syntax"),
        (
            "notes.txt",
            b"just some notes\n",
            "notes.txt: not Python source (syntax error: invalid syntax at line 1)",
        ),
        ("model.bin", b"\x00\x01\x02PK\x03\x04", "model.bin: a binary file, not Python source"),
        ("latin.py", b"x = '\xe9'\n", "latin.py: not UTF-8 text (byte 0xe9 at offset 5)"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    run_cli: Run, tmp_path: Path, name: str, data: bytes, problem: str
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    assert one_error_line(run_cli("lint", str(path))) == f"triage: error: {tmp_path}/{problem}"


def test_missing_paths_fifos_and_no_paths_are_one_line(run_cli: Run, tmp_path: Path) -> None:
    assert one_error_line(run_cli("lint", str(tmp_path / "nope.py"))).endswith(
        "nope.py: no such file or directory"
    )
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    assert one_error_line(run_cli("lint", str(fifo), timeout=10)).endswith("pipe.py: not a regular file")
    assert "give a file or directory" in one_error_line(run_cli("lint"))
    assert "unknown lint code 'D21'" in one_error_line(run_cli("lint", "--explain", "D21"))


def test_a_huge_file_is_one_line_and_exit_2(run_cli: Run, tmp_path: Path) -> None:
    huge = tmp_path / "generated.py"
    huge.write_bytes(b"x = 1\n" * 1_000_000)  # 6 MB: a generated blob, not a training script
    assert one_error_line(run_cli("lint", str(huge))).endswith("too large to be a training script")


def test_a_directory_of_thousands_of_files_finishes_and_names_each_file_it_skips(
    run_cli: Run, tmp_path: Path
) -> None:
    body = 'import torch.distributed as dist\ndist.init_process_group("nccl")\nif dist.get_rank() == 0:\n    dist.barrier()\n'
    for i in range(2000):
        (tmp_path / f"job_{i}.py").write_text(body)
    (tmp_path / "weights.py").write_bytes(b"\x00\x01PK\x03")
    (tmp_path / "broken.py").write_text("def f(:\n")
    os.mkfifo(tmp_path / "pipe.py")
    result = run_cli("lint", "--json", str(tmp_path), timeout=300)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert len(report["findings"]) == 2000 and report["files"] == 2000
    assert sorted(line.split(":")[0].rsplit("/", 1)[-1] for line in report["skipped"]) == [
        "broken.py",
        "pipe.py",
        "weights.py",
    ]
    text = run_cli("lint", str(tmp_path), timeout=300)
    skipped = text.stderr.decode().splitlines()
    assert len(skipped) == 3 and all(line.startswith("triage: skipped ") for line in skipped), skipped


def test_a_user_s_invalid_escape_is_not_our_warning_to_print(run_cli: Run, tmp_path: Path) -> None:
    # Real code is full of `"\:"` in regexes; Python 3.12 makes it a SyntaxWarning on stderr.
    script = tmp_path / "train.py"
    script.write_text('import torch.distributed as dist\npattern = "rank\\:(\\d+)"\n')
    result = run_cli("lint", str(script), env={"PYTHONWARNINGS": "always"})
    assert result.returncode == 0 and result.stderr == b"", result.stderr


def test_the_walk_branches_on_a_finding(run_cli: Run) -> None:
    """`triage --script train.py walk`: the lint probe decides the node instead of a question."""
    args = ["walk", "--json", "--answer", "what_do_you_see=4"]
    result = run_cli("--script", str(FIXTURES / "TRG021_fail.py"), *args)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["leaf"]["id"] == "D21"
    assert [(s["node"], s["via"], s["answer"]) for s in data["trail"]][1] == ("hang_end_lint", "fact", "true")
    clean = json.loads(
        run_cli(
            "walk", "--script", str(FIXTURES / "TRG021_pass.py"), *args[1:], "--answer", "hang_end=5"
        ).stdout
    )
    assert [(s["node"], s["via"]) for s in clean["trail"]][1] == ("hang_end_lint", "fact")
    assert clean["leaf"]["id"] == "D23"


def test_advice_is_shown_only_when_asked(run_cli: Run, tmp_path: Path) -> None:
    from triage.cli.lint import SEVERITIES as SHOWN
    from triage.core.lint.model import SEVERITIES

    assert SHOWN == SEVERITIES
    script = tmp_path / "train.py"
    script.write_text(
        "import torch.distributed as dist\ndist.init_process_group('nccl')\n"
        "if dist.get_rank() == 0:\n    prepare_data()\ndist.barrier()\n"
    )
    everything = json.loads(run_cli("lint", "--json", "--min-severity", "info", str(script)).stdout)
    infos = [f["code"] for f in everything["findings"] if f["severity"] == "info"]
    assert "TRG040" in infos  # the default collective timeout: advice, not a bug
    default = run_cli("lint", str(script))
    out = default.stdout.decode()
    assert default.returncode == 0 and "TRG040" not in out
    assert "below --min-severity not shown" in out
    assert json.loads(run_cli("lint", "--json", str(script)).stdout)["hidden"]["info"] == len(infos)
    named = run_cli("lint", "--select", "TRG040", str(script))
    assert named.returncode == 1 and "TRG040" in named.stdout.decode()
