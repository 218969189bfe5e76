"""The env probe: which launcher set this process up, whether its rank contract holds together, and
the host around it (container or not, how much /dev/shm).

`inspect_env` is pure (an environment in, a result out) so it can be checked against any
environment; `inspect_host` reads a few files under a root directory (the real `/` in `probe`, a
temporary tree in tests). `probe` applies both to this process.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from probes.subproc import evidence
from triage.core import launchers
from triage.core.facts import Evidence, ProbeOptions, ProbeResult, Status
from triage.core.redact import redact_env

NAME = "env"
KEY_FACTS = (
    "env.launcher",
    "env.rank_contract",
    "env.world_size",
    "env.cuda_visible_devices",
    "env.container",
    "env.shm_mb",
)

CONTRACT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
RANK_VARIABLES = (
    *CONTRACT,
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "NODE_RANK",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
)
SLURM_VARIABLES = (
    "SLURM_JOB_ID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NTASKS",
    "SLURM_NNODES",
    "SLURM_NODEID",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_STEP_GPUS",
    "SLURM_JOB_NODELIST",
)
MPI_VARIABLES = (
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "PMIX_RANK",
    "MPI_LOCALRANKID",
)
DEBUG_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "TORCH_CPP_LOG", "TORCHELASTIC_")
DEBUG_VARIABLES = ("CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING", "OMP_NUM_THREADS")


def _int(env: Mapping[str, str], *names: str) -> tuple[str, int] | None:
    """The first of `names` that holds an integer, with its value."""
    for name in names:
        raw = env.get(name, "").strip()
        if raw.lstrip("-").isdigit():
            return name, int(raw)
    return None


def detect_launcher(env: Mapping[str, str]) -> str:
    """The innermost launcher: accelerate and deepspeed run on top of torchrun-style variables,
    and torchrun often runs inside a SLURM allocation, so the more specific signs win."""
    if any(name.startswith("ACCELERATE_") for name in env):
        return "accelerate"
    if "CROSS_RANK" in env or "LOCAL_SIZE" in env or "DEEPSPEED_ENV" in env:
        return "deepspeed"
    if "TORCHELASTIC_RUN_ID" in env or "TORCHELASTIC_RESTART_COUNT" in env:
        return "torchrun"
    if "OMPI_COMM_WORLD_RANK" in env or "PMI_RANK" in env or "PMIX_RANK" in env:
        return "mpi"
    if "SLURM_PROCID" in env:
        return "slurm"
    return "none"


def _nccl_debug(value: str | None) -> str:
    if value is None:
        return "unset"
    value = value.strip().lower()
    return value if value in ("warn", "info", "trace") else "other"


def _consistency(env: Mapping[str, str]) -> list[str]:
    """What is wrong with the rank variables that are set, in the words of the variables."""
    problems: list[str] = []
    for name in (*RANK_VARIABLES[:3], "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_PORT"):
        raw = env.get(name)
        if raw is not None and not raw.strip().isdigit():
            problems.append(f"{name}={raw!r} is not a non-negative integer")
    world = _int(env, "WORLD_SIZE")
    rank = _int(env, "RANK")
    local_rank = _int(env, "LOCAL_RANK")
    local_world = _int(env, "LOCAL_WORLD_SIZE")
    if world and world[1] < 1:
        problems.append(f"WORLD_SIZE={world[1]} must be at least 1")
    if world and rank and rank[1] >= world[1] >= 1:
        problems.append(f"RANK={rank[1]} is not below WORLD_SIZE={world[1]}")
    if local_rank and local_world and local_rank[1] >= local_world[1] >= 1:
        problems.append(f"LOCAL_RANK={local_rank[1]} is not below LOCAL_WORLD_SIZE={local_world[1]}")
    if world and local_world and local_world[1] >= 1 and world[1] % local_world[1]:
        problems.append(f"WORLD_SIZE={world[1]} is not a multiple of LOCAL_WORLD_SIZE={local_world[1]}")
    if local_world and world and local_world[1] > world[1] >= 1:
        problems.append(f"LOCAL_WORLD_SIZE={local_world[1]} exceeds WORLD_SIZE={world[1]}")
    port = _int(env, "MASTER_PORT")
    if port and not 0 < port[1] < 65536:
        problems.append(f"MASTER_PORT={port[1]} is not a TCP port")
    tasks = _int(env, "SLURM_NTASKS")
    if (
        world
        and tasks
        and "SLURM_PROCID" in env
        and "TORCHELASTIC_RUN_ID" not in env
        and tasks[1] != world[1]
    ):
        problems.append(f"WORLD_SIZE={world[1]} but SLURM_NTASKS={tasks[1]}")
    if (world and world[1] > 1) or rank:
        missing = [name for name in CONTRACT if name not in env]
        if missing:
            shown = f"WORLD_SIZE={world[1]}" if world else f"RANK={rank[1]}" if rank else "RANK"
            problems.append(f"{', '.join(missing)} unset while {shown}")
    return problems


def inspect_env(env: Mapping[str, str]) -> ProbeResult:
    """Facts, evidence and status for one environment."""
    launcher = detect_launcher(env)
    present = [name for name in CONTRACT if name in env]
    contract = "complete" if len(present) == len(CONTRACT) else "partial" if present else "absent"
    facts: dict[str, object] = {"env.launcher": launcher, "env.rank_contract": contract}

    world = _int(env, *launchers.WORLD_SIZE)
    if world is not None:
        facts["env.world_size"] = world[1]
    facts["env.multi_process"] = bool(world and world[1] > 1)

    nodes = _int(env, "GROUP_WORLD_SIZE", "SLURM_NNODES")
    node_rank = _int(env, *launchers.NODE_RANK)
    local_world = _int(env, *launchers.LOCAL_WORLD_SIZE)
    facts["env.multi_node"] = bool(
        (nodes and nodes[1] > 1)
        or (node_rank and node_rank[1] > 0)
        or (world and local_world and local_world[1] >= 1 and world[1] > local_world[1])
    )
    facts["env.local_rank_set"] = any(name in env for name in launchers.LOCAL_RANK)
    facts["env.nccl_debug"] = _nccl_debug(env.get("NCCL_DEBUG"))
    async_raw = env.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", env.get("NCCL_ASYNC_ERROR_HANDLING"))
    facts["env.async_error_handling"] = (
        "unset" if async_raw is None else "off" if async_raw.strip() == "0" else "on"
    )
    debug = env.get("TORCH_DISTRIBUTED_DEBUG", "").strip().lower()
    problems = _consistency(env)
    if debug in ("", "off"):
        facts["env.distributed_debug"] = "off"
    elif debug in ("info", "detail"):
        facts["env.distributed_debug"] = debug
    else:
        problems.append(
            f"TORCH_DISTRIBUTED_DEBUG={debug!r} is not OFF, INFO or DETAIL (torch will refuse it)"
        )
    facts["env.nccl_socket_ifname"] = "set" if "NCCL_SOCKET_IFNAME" in env else "unset"
    facts["env.nccl_ib_disable"] = env.get("NCCL_IB_DISABLE", "").strip() == "1"
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    facts["env.cuda_visible_devices"] = "unset" if cvd is None else "empty" if not cvd.strip() else "set"
    if cvd is not None and not cvd.strip():
        problems.append("CUDA_VISIBLE_DEVICES is set but empty: every GPU is hidden from this process")

    shown = {
        name: value
        for name, value in sorted(env.items())
        if name in RANK_VARIABLES
        or name in SLURM_VARIABLES
        or name in MPI_VARIABLES
        or name in DEBUG_VARIABLES
        or name.startswith(DEBUG_PREFIXES)
        or name.startswith("ACCELERATE_")
        or name in ("CROSS_RANK", "CROSS_SIZE", "LOCAL_SIZE")
    }
    listing = "\n".join(f"{k}={v}" for k, v in redact_env(shown).items()) or "(none of the variables is set)"
    evidences = [evidence("launcher and rank variables (os.environ)", listing)]
    if problems:
        evidences.append(evidence("consistency of the rank variables", "\n".join(problems)))

    flagged = []
    if contract == "partial" or any("unset while" in p for p in problems):
        flagged.append("env.rank_contract")
    if facts["env.cuda_visible_devices"] == "empty":
        flagged.append("env.cuda_visible_devices")
    status: Status = "warn" if problems else "ok"
    if problems:
        summary = problems[0] + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
    elif launcher == "none" and contract == "absent":
        summary = "bare python: no launcher and no rank variables"
    else:
        world_text = f", world size {world[1]}" if world else ""
        summary = f"launched by {launcher}, rank contract {contract}{world_text}"
    return ProbeResult(NAME, status, facts, tuple(evidences), summary=summary, flagged=tuple(flagged))


SHM_SMALL_BYTES = 1 << 30  # below this NCCL's shared-memory transport runs out with a few GPUs
MIB = 1 << 20
# /proc/1/cgroup (cgroup v1 paths, or v2 paths of the container runtime) -> container kind
CGROUP_MARKERS = (
    ("kubepods", "kubernetes"),
    ("libpod", "podman"),
    ("docker", "docker"),
    ("lxc", "lxc"),
    ("containerd", "other"),
    ("crio", "other"),
)


@dataclass
class Host:
    """What the host around this process looks like: facts, evidence and problems."""

    facts: dict[str, object] = field(default_factory=dict)
    evidence: list[Evidence] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    flagged: list[str] = field(default_factory=list)


def _read(path: Path, limit: int = 1 << 16) -> str:
    try:
        with path.open("rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def detect_container(root: Path, env: Mapping[str, str]) -> tuple[str, str]:
    """(container kind, why): docker, kubernetes, podman, lxc, other or none."""
    if env.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes", "KUBERNETES_SERVICE_HOST is set"
    if (root / "run/.containerenv").exists():
        return "podman", "/run/.containerenv exists"
    if (root / ".dockerenv").exists():
        return "docker", "/.dockerenv exists"
    cgroup = _read(root / "proc/1/cgroup")
    for marker, kind in CGROUP_MARKERS:
        if marker in cgroup:
            return kind, f"/proc/1/cgroup mentions {marker}"
    runtime = env.get("container", "").strip()
    if runtime:
        return ("podman" if runtime == "podman" else "lxc" if runtime == "lxc" else "other"), (
            f"container={runtime} in the environment"
        )
    return (
        "none",
        "no container marker (/.dockerenv, /run/.containerenv, /proc/1/cgroup, KUBERNETES_SERVICE_HOST)",
    )


def shm_bytes(root: Path) -> int | None:
    """Size of the filesystem mounted at /dev/shm, None when it cannot be read."""
    try:
        stat = os.statvfs(root / "dev/shm")
    except OSError:
        return None
    return stat.f_frsize * stat.f_blocks


def inspect_host(root: Path, env: Mapping[str, str], shm: int | None) -> Host:
    """Container and /dev/shm facts for the host under `root` (shm: the size of its /dev/shm)."""
    host = Host()
    kind, why = detect_container(root, env)
    host.facts["env.container"] = kind
    lines = [f"container: {kind} ({why})"]
    if shm is not None:
        host.facts["env.shm_mb"] = shm // MIB
        host.facts["env.shm_small"] = shm < SHM_SMALL_BYTES
        lines.append(f"/dev/shm: {shm / MIB:.0f} MiB (os.statvfs)")
        stale = (
            sorted(p.name for p in (root / "dev/shm").glob("nccl-*"))[:5]
            if (root / "dev/shm").is_dir()
            else []
        )
        if stale:
            lines.append(f"nccl-* segments present: {', '.join(stale)}")
        if shm < SHM_SMALL_BYTES:
            where = f"inside {kind}" if kind != "none" else "on this host"
            host.problems.append(
                f"/dev/shm is only {shm / MIB:.0f} MiB {where}: too small for NCCL's shared memory with several GPUs"
            )
            host.flagged.append("env.shm_small")
    else:
        lines.append("/dev/shm: cannot be read (os.statvfs failed)")
    host.evidence.append(
        evidence(
            "container and shared memory (/.dockerenv, /proc/1/cgroup, statvfs /dev/shm)", "\n".join(lines)
        )
    )
    return host


def probe(options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
    """The env probe on this process's environment and host."""
    env = dict(os.environ)
    result = inspect_env(env)
    root = Path("/")
    host = inspect_host(root, env, shm_bytes(root))
    facts = {**result.facts, **host.facts}
    problems = host.problems
    status: Status = "warn" if problems or result.status == "warn" else result.status
    summary = result.summary
    if problems:
        summary = "; ".join([*problems, summary]) if result.status == "warn" else "; ".join(problems)
    return ProbeResult(
        NAME,
        status,
        facts,
        (*result.evidence, *host.evidence),
        summary=summary,
        flagged=(*result.flagged, *host.flagged),
    )
