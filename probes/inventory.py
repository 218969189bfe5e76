"""The machine's inventory for `triage report`: driver, GPU models, topology, settings, MTUs.

Not a probe (nothing branches on it) but held to the same rules: read-only, no root, every command
bounded by the timeout and killed with its children on cancel, every value redacted. What cannot be
read is said in `unseen`, with why, so the report can say what it did not look at.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path

from probes.env import MPI_VARIABLES, RANK_VARIABLES, SLURM_VARIABLES
from probes.gpu.nvml import driver_versions, import_pynvml, text
from probes.subproc import run_command
from triage.core.inventory import Inventory
from triage.core.redact import redact_env, redact_text

# Variables that change how NCCL, gloo, torch.distributed and CUDA behave.
SETTING_PREFIXES = ("NCCL_", "TORCH_", "PYTORCH_", "CUDA_", "GLOO_", "FI_", "UCX_", "NVSHMEM_")
SETTING_NAMES = ("OMP_NUM_THREADS", "LOGLEVEL")
RANK_NAMES = (*RANK_VARIABLES, *SLURM_VARIABLES, *MPI_VARIABLES, "CROSS_RANK", "CROSS_SIZE", "LOCAL_SIZE")
SYS_NET = Path("/sys/class/net")
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def split_environment(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(settings, rank variables) of an environment, sorted by name and redacted."""
    settings = {k: v for k, v in env.items() if k.startswith(SETTING_PREFIXES) or k in SETTING_NAMES}
    ranks = {k: v for k, v in env.items() if k in RANK_NAMES or k.startswith("ACCELERATE_")}
    settings = {k: v for k, v in settings.items() if k not in ranks}
    return redact_env(dict(sorted(settings.items()))), redact_env(dict(sorted(ranks.items())))


def interfaces(root: Path = SYS_NET) -> dict[str, int]:
    """Name -> MTU of the interfaces that are up, loopback left out."""
    out: dict[str, int] = {}
    try:
        names = sorted(p.name for p in root.iterdir())
    except OSError:
        return out
    for name in names:
        try:
            state = (root / name / "operstate").read_text().strip()
            mtu = int((root / name / "mtu").read_text().strip())
        except (OSError, ValueError):
            continue
        if name != "lo" and state in ("up", "unknown"):
            out[name] = mtu
    return out


def nvml_inventory() -> tuple[str, str, tuple[str, ...], str]:
    """(driver, the CUDA version it supports, GPU names, why not) through NVML; cheap, no process
    list: for the dist mini-test's per-rank report and the report's inventory."""
    try:
        nvml = import_pynvml()
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError, OSError, ImportError: all mean "no NVML here"
        return "", "", (), f"GPUs and driver: NVML did not start ({type(exc).__name__}: {exc})"
    try:
        driver, cuda_driver = driver_versions(nvml)
        count = int(nvml.nvmlDeviceGetCount())
        names = tuple(text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count))
        return driver, cuda_driver, names, ""
    except Exception as exc:
        return "", "", (), f"GPUs and driver: NVML failed ({type(exc).__name__}: {exc})"
    finally:
        with contextlib.suppress(Exception):  # already shut down: nothing left to release
            nvml.nvmlShutdown()


def topology(timeout_s: float, cancel: threading.Event) -> tuple[str, str]:
    """(`nvidia-smi topo -m` output, why not)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "", "GPU topology: nvidia-smi is not on PATH"
    done = run_command([smi, "topo", "-m"], timeout_s=timeout_s, cancel=cancel)
    if not done.ok:
        return "", f"GPU topology: `nvidia-smi topo -m` {done.describe()}"
    # nvidia-smi underlines the matrix's header with terminal escapes even into a pipe (seen on an
    # H100 with driver 580): they would show as garbage in a pasted report.
    return redact_text(_ESCAPES.sub("", done.stdout).rstrip()), ""


def collect(timeout_s: float, cancel: threading.Event, env: Mapping[str, str] | None = None) -> Inventory:
    """Read the inventory of this machine (or of `env`, for the settings), bounded by `timeout_s`."""
    settings, ranks = split_environment(os.environ if env is None else env)
    unseen: list[str] = []
    driver, cuda_driver, gpus, why = nvml_inventory()
    if why:
        unseen.append(why)
    topo = ""
    if gpus:
        topo, why = topology(max(1.0, timeout_s / 2), cancel)
        if why:
            unseen.append(why)
    nics = interfaces()
    if not nics:
        unseen.append(f"network interfaces: nothing up under {SYS_NET}")
    uname = platform.uname()
    return Inventory(
        system=" ".join(part for part in (uname.system, uname.release, uname.machine) if part),
        driver=driver,
        cuda_driver=cuda_driver,
        gpus=gpus,
        topology=topo,
        settings=settings,
        rank_variables=ranks,
        interfaces=nics,
        unseen=tuple(unseen),
    )
