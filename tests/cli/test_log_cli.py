"""`triage log` as a user runs it: files, stdin, both engines, JSON, exit codes and bad input."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

from tests.conftest import REPO, CliResult

DATA = REPO / "tests" / "core" / "logscan" / "data"
Run = Callable[..., CliResult]


def one_error_line(result: CliResult) -> str:
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in lines[0]
    return lines[0]


@pytest.mark.parametrize("engine", ["python", "grep"])
def test_diagnosis_and_json(run_cli: Run, engine: str) -> None:
    if engine == "grep" and shutil.which("grep") is None:
        pytest.skip("grep is not installed")
    result = run_cli("log", "--engine", engine, "--json", str(DATA / "repro-D20.log"))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["found"] is True
    assert data["first_rank"] == 1
    assert data["waiting_ranks"] == [0]
    assert data["diagnoses"][0]["id"] == "D20"
    assert data["diagnoses"][0]["evidence"][0]["text"] == "FloatingPointError: loss is nan at step 3"
    assert data["diagnoses"][0]["verify"]["why"]


def test_text_output_names_first_rank_fix_and_verify(run_cli: Run) -> None:
    result = run_cli("log", str(DATA / "repro-MN3.log"))
    assert result.returncode == 0
    out = result.stdout.decode()
    assert "MN3" in out.splitlines()[4] or "Diagnosis: MN3" in out
    assert "likely stragglers): 1" in out
    assert "Fix" in out
    assert "repro-MN3.log:" in out


def test_stdin_and_no_known_failure(run_cli: Run) -> None:
    text = b"epoch 1 step 10 loss 2.31\nTraceback (most recent call last):\nKeyError: 'label'\n"
    result = run_cli("log", "-", stdin=text)
    assert result.returncode == 1
    assert "No known failure found" in result.stdout.decode()


def test_engines_agree_on_a_multi_rank_log(run_cli: Run, tmp_path: Path) -> None:
    if shutil.which("grep") is None:
        pytest.skip("grep is not installed")
    noise = "".join(f"[default{i % 4}]:step {i} loss 0.{i % 97:02d} lr 3e-4\n" for i in range(20_000))
    failure = (DATA / "repro-D8.log").read_text()
    log = tmp_path / "job.log"
    log.write_text(noise + failure + noise)
    outputs = [
        json.loads(run_cli("log", "--json", "--engine", e, str(log)).stdout) for e in ("python", "grep")
    ]
    assert outputs[0] == outputs[1]
    assert outputs[0]["lines"] == 40_000 + len(failure.splitlines())
    assert outputs[0]["diagnoses"][0]["id"] == "D8"
    first_line = outputs[0]["first_failure"]["line"]
    assert first_line > 20_000
    assert "Expected to have finished reduction" in log.read_text().splitlines()[first_line - 1]


def test_per_rank_files_ordered_by_timestamps(run_cli: Run, tmp_path: Path) -> None:
    """torchrun --log-dir style: one file per rank; the rank is in the path, not on the line."""
    for rank in (0, 1):
        (tmp_path / "attempt_0" / str(rank)).mkdir(parents=True)
    (tmp_path / "attempt_0" / "0" / "stderr.log").write_text(
        "2026-11-22 04:12:09,100 ERROR RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] "
        "Connection closed by peer [127.0.0.1]:25503\n"
    )
    (tmp_path / "attempt_0" / "1" / "stderr.log").write_text(
        "2026-11-22 04:12:07,000 step 3\nFloatingPointError: loss is nan at step 3\n"
    )
    files = [str(tmp_path / "attempt_0" / r / "stderr.log") for r in ("0", "1")]
    data = json.loads(run_cli("log", "--json", *files).stdout)
    assert data["first_rank"] == 1
    assert data["waiting_ranks"] == [0]
    assert data["diagnoses"][0]["id"] == "D20"


def test_missing_file(run_cli: Run, tmp_path: Path) -> None:
    result = run_cli("log", str(tmp_path / "nope.log"))
    assert result.returncode == 2
    assert "no such file" in one_error_line(result)


def test_directory(run_cli: Run, tmp_path: Path) -> None:
    result = run_cli("log", str(tmp_path))
    assert result.returncode == 2
    assert "is a directory" in one_error_line(result)


def test_binary_file(run_cli: Run, tmp_path: Path) -> None:
    binary = tmp_path / "model.pt"
    binary.write_bytes(b"\x80\x02}q\x00(X\x05\x00\x00\x00" + bytes(range(256)) * 50)
    result = run_cli("log", str(binary))
    assert result.returncode == 2
    assert "binary file" in one_error_line(result)


def test_gzip_file(run_cli: Run, tmp_path: Path) -> None:
    import gzip

    packed = tmp_path / "job.log.gz"
    packed.write_bytes(gzip.compress(b"hello\n"))
    result = run_cli("log", str(packed))
    assert result.returncode == 2
    assert "zcat" in one_error_line(result)


def test_empty_file(run_cli: Run, tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    result = run_cli("log", str(empty))
    assert result.returncode == 2
    assert "empty" in one_error_line(result)


def test_unreadable_file(run_cli: Run, tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root reads anything behind permission bits; a socket file cannot be opened by anyone
        path = tmp_path / "job.sock"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        try:
            result = run_cli("log", str(path))
        finally:
            server.close()
    else:
        path = tmp_path / "secret.log"
        path.write_text("x\n")
        path.chmod(0)
        result = run_cli("log", str(path))
    assert result.returncode == 2
    line = one_error_line(result)
    assert ("is a socket, not a log file" if os.geteuid() == 0 else "cannot be read") in line


@pytest.mark.parametrize("engine", ["python", "grep"])
def test_overlong_line_with_a_small_cap(run_cli: Run, tmp_path: Path, engine: str) -> None:
    if engine == "grep" and shutil.which("grep") is None:
        pytest.skip("grep is not installed")
    path = tmp_path / "one-line.log"
    path.write_bytes(b"ok\n" + b"x" * 100_000 + b"\n")
    result = run_cli("log", "--engine", engine, "--max-line-bytes", "4096", str(path))
    assert result.returncode == 2
    assert "longer than 4,096 bytes" in one_error_line(result)


def test_two_gigabyte_line_on_stdin_under_the_default_cap(tmp_path: Path) -> None:
    """A 2 GB line streamed in: refused after the 64 MiB cap, long before the writer finishes."""
    writer = (
        "import sys\n"
        "chunk = b'y' * (1 << 20)\n"
        "try:\n"
        "    for _ in range(2048):\n"
        "        sys.stdout.buffer.write(chunk)\n"
        "except BrokenPipeError:\n"
        "    pass\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    producer = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE)
    assert producer.stdout is not None
    result = subprocess.run(
        [sys.executable, "-m", "triage", "log", "-"],
        stdin=producer.stdout,
        capture_output=True,
        env=env,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    producer.stdout.close()
    producer.kill()
    producer.wait()
    assert result.returncode == 2
    assert "longer than 67,108,864 bytes" in one_error_line(result)


def _log_json(*args: str, stdin: IO[bytes] | None = None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "triage", "log", "--json", *args],
        stdin=stdin,
        capture_output=True,
        env=env,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _without_names(data: dict[str, Any]) -> str:
    """The result as text, with the source's name (a path or <stdin>) replaced by LOG."""
    return json.dumps(data).replace(json.dumps(data["sources"][0]), '"LOG"')


def test_grep_engine_reads_stdin_from_a_file_and_from_a_pipe(tmp_path: Path) -> None:
    """Stdin redirected from a file goes to grep directly; from a pipe it flows through triage.

    Both must read from stdin's current position, as the python engine does."""
    if shutil.which("grep") is None:
        pytest.skip("grep is not installed")
    noise = "".join(f"[default{i % 4}]:step {i} loss 0.{i % 97:02d} lr 3e-4\n" for i in range(30_000))
    log = tmp_path / "job.log"
    log.write_text("skipped line\n" + noise + (DATA / "repro-D20.log").read_text() + noise)
    expected = _without_names(_log_json("--engine", "python", str(log)))
    assert _without_names(_log_json("--engine", "grep", str(log))) == expected
    with log.open("rb", buffering=0) as handle:  # unbuffered: seek moves the shared position
        handle.seek(len("skipped line\n"))
        python_from_there = _without_names(_log_json("--engine", "python", "-", stdin=handle))
        handle.seek(len("skipped line\n"))
        grep_from_there = _without_names(_log_json("--engine", "grep", "-", stdin=handle))
    assert grep_from_there == python_from_there != expected  # one line fewer, numbers shifted
    feeder = subprocess.Popen(["cat", str(log)], stdout=subprocess.PIPE)
    try:
        piped = _without_names(_log_json("--engine", "grep", "-", stdin=feeder.stdout))
    finally:
        assert feeder.stdout is not None
        feeder.stdout.close()
        feeder.wait()
    assert piped == expected


def test_overlong_line_in_a_file_under_the_default_cap(run_cli: Run, tmp_path: Path) -> None:
    """grep reads the file itself; the check beside it stops grep and refuses the line."""
    path = tmp_path / "one-line.log"
    with path.open("wb") as out:
        out.write(b"ok\n")
        for _ in range(65):
            out.write(b"z" * (1 << 20))
    result = run_cli("log", str(path))
    assert result.returncode == 2
    assert "longer than 67,108,864 bytes" in one_error_line(result)


def test_without_grep_the_python_engine_takes_over(run_cli: Run, tmp_path: Path) -> None:
    empty_path = {"PATH": str(tmp_path)}  # no grep on it
    log = str(DATA / "repro-D8.log")
    fallback = run_cli("log", "--json", log, env=empty_path)
    assert fallback.returncode == 0, fallback.stderr
    assert json.loads(fallback.stdout) == json.loads(
        run_cli("log", "--json", "--engine", "python", log).stdout
    )
    refused = run_cli("log", "--engine", "grep", log, env=empty_path)
    assert refused.returncode == 2
    assert "grep is not on PATH" in one_error_line(refused)
