"""The GPUs through nvidia-smi when NVML cannot load, and the fabric manager's state through systemctl.

Both are commands run with a timeout (probes.subproc); what they printed is the evidence.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from probes.gpu.snapshot import Gpu, GpuProcess, Snapshot
from probes.subproc import command_evidence, evidence, run_command
from triage.core.facts import Evidence

SMI_GPU_FIELDS = "index,name,uuid,pci.bus_id,memory.total,memory.used,utilization.gpu,utilization.memory"
SMI_APP_FIELDS = "gpu_uuid,pid,process_name,used_memory"


def _smi_int(raw: str) -> int | None:
    raw = raw.strip()
    return int(float(raw)) if raw.replace(".", "", 1).isdigit() else None


def parse_smi(gpu_csv: str, apps_csv: str) -> list[Gpu]:
    """GPUs from `nvidia-smi --query-gpu` and `--query-compute-apps` CSV (noheader, nounits)."""
    apps: dict[str, list[GpuProcess]] = {}
    for line in apps_csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4 and parts[1].isdigit():
            used = _smi_int(parts[3])
            apps.setdefault(parts[0], []).append(
                GpuProcess(int(parts[1]), used * (1 << 20) if used is not None else None, parts[2])
            )
    gpus = []
    for line in gpu_csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 8 or not parts[0].isdigit():
            continue
        total, used = _smi_int(parts[4]), _smi_int(parts[5])
        gpus.append(
            Gpu(
                index=int(parts[0]),
                name=parts[1],
                uuid=parts[2],
                bus_id=parts[3],
                memory_total=total * (1 << 20) if total is not None else None,
                memory_used=used * (1 << 20) if used is not None else None,
                util_gpu=_smi_int(parts[6]),
                util_memory=_smi_int(parts[7]),
                processes=tuple(apps.get(parts[2], ())),
            )
        )
    return gpus


def collect_smi(timeout_s: float, cancel: threading.Event) -> tuple[Snapshot | None, list[Evidence], str]:
    """The nvidia-smi fallback: (snapshot or None, evidence, why not)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, [], "nvidia-smi is not on PATH"
    gpus_run = run_command(
        [smi, f"--query-gpu={SMI_GPU_FIELDS}", "--format=csv,noheader,nounits"],
        timeout_s=timeout_s,
        cancel=cancel,
    )
    proof = [command_evidence(gpus_run)]
    if not gpus_run.ok:
        return None, proof, f"nvidia-smi failed ({gpus_run.describe()})"
    apps_run = run_command(
        [smi, f"--query-compute-apps={SMI_APP_FIELDS}", "--format=csv,noheader,nounits"],
        timeout_s=timeout_s,
        cancel=cancel,
    )
    proof.append(command_evidence(apps_run))
    gpus = parse_smi(gpus_run.stdout, apps_run.stdout if apps_run.ok else "")
    return Snapshot("nvidia-smi", gpus, evidence=proof), proof, ""


def fabricmanager_state(timeout_s: float, cancel: threading.Event) -> tuple[str, list[Evidence]]:
    """State of the nvidia-fabricmanager unit: active, inactive, not_installed or unknown."""
    if not Path("/run/systemd/system").is_dir():
        return "unknown", [evidence("systemd", "not running here (no /run/systemd/system): cannot ask")]
    active = run_command(
        ["systemctl", "is-active", "nvidia-fabricmanager"], timeout_s=timeout_s, cancel=cancel
    )
    proof = [command_evidence(active)]
    state = active.stdout.strip()
    if active.returncode is None:
        return "unknown", proof
    if state == "active":
        return "active", proof
    loaded = run_command(
        ["systemctl", "show", "--property=LoadState", "nvidia-fabricmanager"],
        timeout_s=timeout_s,
        cancel=cancel,
    )
    proof.append(command_evidence(loaded))
    if "LoadState=not-found" in loaded.stdout:
        return "not_installed", proof
    if state in ("inactive", "failed", "activating", "deactivating", "reloading"):
        return "inactive", proof
    return "unknown", proof
