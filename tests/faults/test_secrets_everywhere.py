"""The secrets corpus (tests/secrets_corpus.py) through every output channel: `triage log` text and
JSON, `triage probe` text and JSON (environment, config file, the master port holder's command line,
a summary), `triage walk`, the app's exported report and `triage report`. No secret value may come
out, and every look-alike must come out unchanged."""

from __future__ import annotations

import contextlib
import io
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.probes.helpers import run_triage, triage_env
from tests.secrets_corpus import LOOKALIKES, SHAPES, Shape
from triage.main import main

pytestmark = pytest.mark.slow  # every channel for real: ~80 commands, a port holder, the probes

SECRETS = [secret for shape in SHAPES for secret in shape.secrets]
ONE_LINE = [shape._replace(text=" ".join(shape.text.split())) for shape in SHAPES]
# Look-alikes that leave a RuntimeError line a RuntimeError (an NCCL INFO line is read as one).
LOG_LOOKALIKES = tuple(look for look in LOOKALIKES if "NCCL INFO" not in look)


def assert_clean(output: str, *, lookalikes: tuple[str, ...] = ()) -> None:
    leaked = [secret for secret in SECRETS if secret in output]
    assert not leaked, f"{len(leaked)} secrets leaked, first {leaked[0]!r}"
    missing = [look for look in lookalikes if look not in output]
    assert not missing, f"look-alikes redacted: {missing}"


def run_in_process(*args: str) -> str:
    """`triage ARGS` in this process (main), its stdout and stderr together."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        main(list(args))
    return out.getvalue() + err.getvalue()


# -- triage log -----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ONE_LINE, ids=[s.name for s in SHAPES])
def test_log_text_and_json(shape: Shape, tmp_path: Path) -> None:
    """The secret is on the first failure's own line, after a look-alike: both outputs show it."""
    look = LOG_LOOKALIKES[[s.name for s in SHAPES].index(shape.name) % len(LOG_LOOKALIKES)]
    log = tmp_path / "rank1.log"
    log.write_text(
        "[rank0]: step 1 loss 2.0\n"
        f"[rank1]: RuntimeError: upload failed: {look} | {shape.text}\n"
        "[rank0]: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE)"
        " ran for 600010 milliseconds before timing out.\n",
        encoding="utf-8",
    )
    text = run_in_process("--no-color", "log", str(log))
    assert "RuntimeError: upload failed" in text
    data = run_in_process("log", "--json", str(log))
    first = json.loads(data)["first_failure"]["text"]
    for output in (text, data, first):
        assert_clean(output, lookalikes=(look,))


# -- triage probe, walk ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def port_holder() -> Iterator[int]:
    """A process holding a port whose command line carries secrets, like `python train.py --wandb_api_key X`."""
    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        port = probe_socket.getsockname()[1]
    flags = [part for shape in ONE_LINE[:40] for part in ("--note", shape.text)]
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, sys, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);"
            f"s.bind(('0.0.0.0', {port})); s.listen(); print('up', flush=True); time.sleep(120)",
            "--wandb_api_key",
            "0123456789abcdef0123456789abcdef01234567",
            *flags,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "up"
    yield port
    holder.kill()
    holder.wait()


def probe_environment(tmp_path: Path, port: int) -> tuple[dict[str, str], Path]:
    """Secrets where the probes look: NCCL_* variables (values and names), RANK (it reaches the
    summary), an Accelerate config; look-alikes beside them."""
    env = triage_env(MASTER_PORT=str(port), MASTER_ADDR="127.0.0.1")
    for number, shape in enumerate(ONE_LINE):
        env[f"NCCL_CORPUS_{number}"] = shape.text
        if shape.variable:
            env[f"NCCL_{shape.variable}"] = shape.text.split("=", 1)[1]
    for number, look in enumerate(LOOKALIKES):
        env[f"NCCL_A_LOOK_{number:02d}"] = look  # sorts first: the listing is cut at 4,000 characters
    env["RANK"] = " ".join(shape.text for shape in ONE_LINE[:20])
    config = tmp_path / "accelerate.yaml"
    lines = ["compute_environment: LOCAL_MACHINE", "num_processes: 2"]
    lines += [f"note_{n}: {json.dumps(shape.text)}" for n, shape in enumerate(ONE_LINE)]
    lines += [f"look_{n}: {json.dumps(look)}" for n, look in enumerate(LOOKALIKES)]
    lines += ["hub_token: plainTok3n", "wandb_api_key: 0123456789abcdef0123456789abcdef01234567"]
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return env, config


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_probe_output(as_json: bool, tmp_path: Path, port_holder: int) -> None:
    env, config = probe_environment(tmp_path, port_holder)
    args = ["probe", "env", "net", "configs", "--accelerate-config", str(config)]
    result = run_triage(*args, *(["--json"] if as_json else []), env=env, timeout=120)
    assert result.returncode in (0, 4, 5), result.stderr
    output = result.stdout + result.stderr
    assert "held by" in output or "master_port" in output
    assert_clean(output)
    if as_json:
        evidence = "\n".join(e["output"] for p in json.loads(result.stdout)["probes"] for e in p["evidence"])
        assert_clean(evidence, lookalikes=tuple(look for look in LOOKALIKES if "\n" not in look))


def test_walk_output(tmp_path: Path, port_holder: int) -> None:
    env, _ = probe_environment(tmp_path, port_holder)
    for as_json in (False, True):
        json_flag = ["--json"] if as_json else []
        # a hang at start-up, one machine: the env probe reads RANK
        result = run_triage(
            "walk", "--probe-timeout", "20", *json_flag, env=env, timeout=120, stdin="2\n1\n1\n"
        )
        assert result.returncode == 0, result.stderr
        assert "RANK=" in result.stdout + result.stderr
        assert_clean(result.stdout + result.stderr)


def test_report_output(tmp_path: Path, port_holder: int) -> None:
    env, config = probe_environment(tmp_path, port_holder)
    result = run_triage("report", "--accelerate-config", str(config), env=env, timeout=180)
    assert result.returncode in (0, 4, 5), result.stderr
    assert "# " in result.stdout
    assert_clean(result.stdout + result.stderr)
