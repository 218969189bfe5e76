"""The env probe: pure cases for every launcher, and real processes (bare python, torchrun)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from probes.env import detect_container, detect_launcher, inspect_env, inspect_host
from tests.probes.helpers import REPO, run_triage, triage_env

TORCHRUN_ENV = {
    "RANK": "3",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "1",
    "GROUP_WORLD_SIZE": "2",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
    "TORCHELASTIC_RUN_ID": "job",
    "TORCHELASTIC_RESTART_COUNT": "0",
}


@pytest.mark.parametrize(
    ("env", "launcher"),
    [
        ({}, "none"),
        (TORCHRUN_ENV, "torchrun"),
        ({**TORCHRUN_ENV, "ACCELERATE_MIXED_PRECISION": "bf16"}, "accelerate"),
        ({**TORCHRUN_ENV, "CROSS_RANK": "0", "LOCAL_SIZE": "8"}, "deepspeed"),
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "16", "SLURM_JOB_ID": "7"}, "slurm"),
        ({**TORCHRUN_ENV, "SLURM_PROCID": "0"}, "torchrun"),  # torchrun inside an allocation
        ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "SLURM_PROCID": "0"}, "mpi"),
    ],
)
def test_launcher(env: dict[str, str], launcher: str) -> None:
    assert detect_launcher(env) == launcher
    assert inspect_env(env).facts["env.launcher"] == launcher


def test_complete_multi_node_contract() -> None:
    result = inspect_env(
        {
            **TORCHRUN_ENV,
            "NCCL_DEBUG": "INFO",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
            "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
            "NCCL_IB_DISABLE": "1",
            "CUDA_VISIBLE_DEVICES": "0,1",
        }
    )
    assert result.status == "ok" and result.flagged == ()
    assert result.facts == {
        "env.launcher": "torchrun",
        "env.rank_contract": "complete",
        "env.world_size": 4,
        "env.multi_process": True,
        "env.multi_node": True,
        "env.local_rank_set": True,
        "env.nccl_debug": "info",
        "env.async_error_handling": "on",
        "env.distributed_debug": "detail",
        "env.nccl_socket_ifname": "unset",
        "env.nccl_ib_disable": True,
        "env.cuda_visible_devices": "set",
    }


def test_partial_contract_names_what_is_missing() -> None:
    result = inspect_env({"WORLD_SIZE": "8", "RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "29500"})
    assert result.status == "warn"
    assert result.facts["env.rank_contract"] == "partial" and result.facts["env.local_rank_set"] is False
    assert result.summary == "LOCAL_RANK unset while WORLD_SIZE=8"
    assert result.flagged == ("env.rank_contract",)


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({**TORCHRUN_ENV, "RANK": "4"}, "RANK=4 is not below WORLD_SIZE=4"),
        ({**TORCHRUN_ENV, "LOCAL_RANK": "2"}, "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"),
        ({**TORCHRUN_ENV, "WORLD_SIZE": "5"}, "WORLD_SIZE=5 is not a multiple of LOCAL_WORLD_SIZE=2"),
        ({**TORCHRUN_ENV, "MASTER_PORT": "70000"}, "MASTER_PORT=70000 is not a TCP port"),
        ({**TORCHRUN_ENV, "RANK": "x"}, "RANK='x' is not a non-negative integer"),
        ({"CUDA_VISIBLE_DEVICES": ""}, "CUDA_VISIBLE_DEVICES is set but empty"),
        (
            {"TORCH_DISTRIBUTED_DEBUG": "verbose"},
            "TORCH_DISTRIBUTED_DEBUG='verbose' is not OFF, INFO or DETAIL",
        ),
    ],
)
def test_inconsistencies_warn(env: dict[str, str], problem: str) -> None:
    result = inspect_env(env)
    assert result.status == "warn"
    assert problem in result.summary


def test_slurm_and_mpi_equivalents() -> None:
    slurm = inspect_env(
        {"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_NNODES": "2", "SLURM_LOCALID": "5"}
    )
    assert slurm.facts["env.world_size"] == 16 and slurm.facts["env.multi_node"] is True
    assert slurm.facts["env.local_rank_set"] is True and slurm.facts["env.rank_contract"] == "absent"
    mpi = inspect_env(
        {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}
    )
    assert mpi.facts["env.multi_node"] is True and mpi.facts["env.world_size"] == 8


def test_async_error_handling_old_and_new_names() -> None:
    assert inspect_env({"NCCL_ASYNC_ERROR_HANDLING": "0"}).facts["env.async_error_handling"] == "off"
    assert inspect_env({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}).facts["env.async_error_handling"] == "on"
    assert inspect_env({"NCCL_DEBUG": "VERSION"}).facts["env.nccl_debug"] == "other"


def test_bare_python_subprocess_with_secrets_redacted() -> None:
    secret = "hf_" + "Q" * 30
    env = triage_env(
        HF_TOKEN=secret,
        NCCL_DEBUG="WARN",
        NCCL_NET_PLUGIN_TOKEN=secret,
        NCCL_DEBUG_FILE=f"/tmp/{secret}.log",
    )
    result = run_triage("probe", "env", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert secret not in result.stdout
    probe = json.loads(result.stdout)["probes"][0]
    assert probe["facts"]["env.launcher"] == "none" and probe["facts"]["env.rank_contract"] == "absent"
    listing = probe["evidence"][0]["output"]
    assert "NCCL_DEBUG=WARN" in listing and "NCCL_NET_PLUGIN_TOKEN=<redacted>" in listing


SCRIPT = """
import json, os, sys, threading
from probes.env import probe
from triage.core.facts import ProbeOptions
result = probe(ProbeOptions(), threading.Event())
with open(os.path.join(sys.argv[1], f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump({"facts": result.facts, "status": result.status}, f)
"""


@pytest.mark.slow  # starts torch processes
def test_under_real_torchrun(tmp_path: Path) -> None:
    script = tmp_path / "probe_env.py"
    script.write_text(SCRIPT)
    torchrun = Path(sys.executable).with_name("torchrun")
    subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node=2", str(script), str(tmp_path)],
        env=triage_env(),
        cwd=REPO,
        capture_output=True,
        timeout=90,
        check=True,
    )
    for rank in (0, 1):
        data = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert data["status"] == "ok"
        facts = data["facts"]
        assert facts["env.launcher"] == "torchrun" and facts["env.rank_contract"] == "complete"
        assert facts["env.world_size"] == 2 and facts["env.multi_process"] is True
        assert facts["env.multi_node"] is False and facts["env.local_rank_set"] is True
        # torchrun turns async error handling on for its workers
        assert facts["env.async_error_handling"] == "on"


# --- the host: container and /dev/shm -----------------------------------------------------------------

MIB = 1 << 20


@pytest.mark.parametrize(
    ("files", "env", "kind"),
    [
        ({}, {}, "none"),
        ({".dockerenv": ""}, {}, "docker"),
        ({"run/.containerenv": ""}, {}, "podman"),
        ({".dockerenv": ""}, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, "kubernetes"),
        ({"proc/1/cgroup": "0::/kubepods/burstable/pod1/abc\n"}, {}, "kubernetes"),
        ({"proc/1/cgroup": "12:pids:/docker/3f2a\n"}, {}, "docker"),
        ({}, {"container": "lxc"}, "lxc"),
    ],
)
def test_container_detection(tmp_path: Path, files: dict[str, str], env: dict[str, str], kind: str) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert detect_container(tmp_path, env)[0] == kind


def test_small_dev_shm_in_a_container_is_flagged(tmp_path: Path) -> None:
    (tmp_path / ".dockerenv").write_text("")
    (tmp_path / "dev" / "shm").mkdir(parents=True)
    (tmp_path / "dev" / "shm" / "nccl-1YsMbG").write_text("")
    host = inspect_host(tmp_path, {}, 64 * MIB)
    assert host.facts == {"env.container": "docker", "env.shm_mb": 64, "env.shm_small": True}
    assert host.flagged == ["env.shm_small"]
    assert host.problems == [
        "/dev/shm is only 64 MiB inside docker: too small for NCCL's shared memory with several GPUs"
    ]
    assert "nccl-* segments present: nccl-1YsMbG" in host.evidence[0].output


def test_large_dev_shm_on_a_bare_host(tmp_path: Path) -> None:
    host = inspect_host(tmp_path, {}, 32 << 30)
    assert host.facts == {"env.container": "none", "env.shm_mb": 32768, "env.shm_small": False}
    assert host.problems == [] and host.flagged == []


def test_this_machine_reports_container_and_shm() -> None:
    import threading

    from probes import env
    from triage.core.facts import ProbeOptions

    result = env.probe(ProbeOptions(), threading.Event())
    assert result.facts["env.container"] in ("docker", "kubernetes", "podman", "lxc", "other", "none")
    assert isinstance(result.facts["env.shm_mb"], int) and isinstance(result.facts["env.shm_small"], bool)
