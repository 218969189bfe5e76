"""The gpu probe: GPUs, memory, utilisation, who sits on which GPU, NVLink/NVSwitch and fabric state.

NVML through pynvml (the nvidia-ml-py distribution) first, `nvidia-smi` when NVML cannot load, and
`unavailable` with the reason when neither answers. pynvml is imported inside the functions that use
it, which is also the one place tests stand a fake module in for it (there is no GPU in CI).
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from probes.subproc import command_evidence, evidence, run_command
from triage.core.facts import Evidence, ProbeOptions, ProbeResult, Status

NAME = "gpu"
KEY_FACTS = ("gpu.count", "gpu.all_ranks_on_gpu0", "gpu.zombie_memory", "gpu.nvswitch", "gpu.fabricmanager")

GIB = 1 << 30
ZOMBIE_BYTES = GIB  # memory held with no process listed: more than a driver's own reservation
SPIN_SM_PERCENT = 90
SPIN_MEMORY_PERCENT = 5
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_bytes: int | None
    name: str = ""


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str = ""
    bus_id: str = ""
    memory_total: int | None = None
    memory_used: int | None = None
    util_gpu: int | None = None
    util_memory: int | None = None
    processes: tuple[GpuProcess, ...] = ()
    nvlinks_active: int | None = None  # None: NVLink not queried or not supported
    nvswitch: bool | None = None
    fabric_state: str | None = None  # FABRIC_STATES value; None when NVML cannot say


@dataclass
class Snapshot:
    source: str  # "nvml" or "nvidia-smi"
    gpus: list[Gpu]
    driver: str = ""
    cuda_driver: str = ""
    evidence: list[Evidence] = field(default_factory=list)


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _process_name(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""  # another PID namespace (containers) or gone already
    return " ".join(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)[:200]


def import_pynvml() -> ModuleType:
    """The pynvml module; the import happens here so a missing package is a reason, not a crash."""
    import pynvml

    module: ModuleType = pynvml
    return module


def _nvml_error(nvml: ModuleType) -> type[BaseException]:
    error = getattr(nvml, "NVMLError", None)
    return error if isinstance(error, type) and issubclass(error, BaseException) else Exception


def collect_nvml(nvml: ModuleType) -> Snapshot:
    """Read every GPU through NVML. Raises nvml.NVMLError when NVML itself cannot start."""
    nvml_error = _nvml_error(nvml)
    nvml.nvmlInit()
    try:
        driver, cuda_driver = driver_versions(nvml)
        gpus = [_read_gpu(nvml, nvml_error, index) for index in range(int(nvml.nvmlDeviceGetCount()))]
    finally:
        with contextlib.suppress(nvml_error):
            nvml.nvmlShutdown()
    lines = [f"driver {driver}" + (f", CUDA driver API {cuda_driver}" if cuda_driver else "")]
    for gpu in gpus:
        lines.append(_describe(gpu))
    return Snapshot("nvml", gpus, driver, cuda_driver, [evidence("pynvml (NVML)", "\n".join(lines))])


def driver_versions(nvml: ModuleType) -> tuple[str, str]:
    """(driver version, the CUDA version the driver supports or "") from an initialised NVML."""
    driver = _text(nvml.nvmlSystemGetDriverVersion())
    try:
        cuda = int(nvml.nvmlSystemGetCudaDriverVersion())
    except _nvml_error(nvml):
        return driver, ""
    return driver, f"{cuda // 1000}.{cuda % 1000 // 10}"


def _read_gpu(nvml: ModuleType, nvml_error: type[BaseException], index: int) -> Gpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)

    def optional(call: str, *args: Any) -> Any:
        try:
            return getattr(nvml, call)(handle, *args)
        except (nvml_error, AttributeError):
            return None

    memory = optional("nvmlDeviceGetMemoryInfo", getattr(nvml, "nvmlMemory_v2", None))
    if memory is None:  # drivers older than the v2 call
        memory = optional("nvmlDeviceGetMemoryInfo")
    util = optional("nvmlDeviceGetUtilizationRates")
    procs: dict[int, GpuProcess] = {}
    for call in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for info in optional(call) or []:
            pid = int(info.pid)
            used = info.usedGpuMemory
            procs.setdefault(
                pid, GpuProcess(pid, int(used) if used is not None else None, _process_name(pid))
            )
    pci = optional("nvmlDeviceGetPciInfo")
    links_active, switch = _nvlinks(nvml, nvml_error, handle)
    return Gpu(
        index=index,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        uuid=_text(optional("nvmlDeviceGetUUID") or ""),
        bus_id=_text(getattr(pci, "busId", "") or "") if pci is not None else "",
        memory_total=int(memory.total) if memory is not None else None,
        memory_used=int(memory.used) if memory is not None else None,
        util_gpu=int(util.gpu) if util is not None else None,
        util_memory=int(util.memory) if util is not None else None,
        processes=tuple(procs.values()),
        nvlinks_active=links_active,
        nvswitch=switch,
        fabric_state=_fabric_state(nvml, nvml_error, handle),
    )


def _nvlinks(
    nvml: ModuleType, nvml_error: type[BaseException], handle: object
) -> tuple[int | None, bool | None]:
    """(active links, whether one leads to an NVSwitch); (0, False) on a GPU without NVLink."""
    active = 0
    switch = False
    switch_type = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            if not nvml.nvmlDeviceGetNvLinkState(handle, link):
                continue
        except nvml_error as exc:
            # NOT_SUPPORTED on link 0 means a PCIe-only GPU; on a later link, the last link.
            if link == 0 and getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3):
                return 0, False
            break
        active += 1
        try:
            if nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link) == switch_type:
                switch = True
        except (nvml_error, AttributeError):
            pass
    return active, switch


def _fabric_state(nvml: ModuleType, nvml_error: type[BaseException], handle: object) -> str | None:
    """The GPU's NVSwitch fabric registration (Hopper and later), or None where NVML cannot say."""
    struct = getattr(nvml, "c_nvmlGpuFabricInfoV_t", None)
    call = getattr(nvml, "nvmlDeviceGetGpuFabricInfoV", None)
    if struct is None or call is None:
        return None
    info = struct()
    try:
        call(handle, ctypes.byref(info))
    except (nvml_error, TypeError):
        return None
    return FABRIC_STATES.get(int(info.state))


def _describe(gpu: Gpu) -> str:
    mem = (
        f"{(gpu.memory_used or 0) / GIB:.1f}/{(gpu.memory_total or 0) / GIB:.1f} GiB"
        if gpu.memory_total
        else "memory ?"
    )
    util = f"sm {gpu.util_gpu}% mem {gpu.util_memory}%" if gpu.util_gpu is not None else "util ?"
    procs = ", ".join(
        f"{p.pid}" + (f" {p.name.split()[0].rsplit('/', 1)[-1]}" if p.name else "") for p in gpu.processes
    )
    links = ""
    if gpu.nvlinks_active:
        links = f", {gpu.nvlinks_active} NVLinks" + (" to NVSwitch" if gpu.nvswitch else "")
    fabric = f", fabric {gpu.fabric_state}" if gpu.fabric_state not in (None, "not_supported") else ""
    return (
        f"GPU {gpu.index} {gpu.name} {gpu.bus_id}: {mem}, {util}{links}{fabric}; processes: {procs or 'none'}"
    )


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


def facts_from_gpus(gpus: Sequence[Gpu]) -> dict[str, object]:
    """The gpu.* facts a snapshot establishes (fabricmanager is added by the caller)."""
    facts: dict[str, object] = {"gpu.available": bool(gpus), "gpu.count": len(gpus)}
    if not gpus:
        return facts
    by_index = sorted(gpus, key=lambda g: g.index)
    first, others = by_index[0], by_index[1:]
    facts["gpu.all_ranks_on_gpu0"] = bool(
        others and len(first.processes) >= 2 and any(not g.processes for g in others)
    )
    if all(g.util_gpu is not None and g.util_memory is not None for g in gpus):
        facts["gpu.spin_wait"] = any(
            (g.util_gpu or 0) >= SPIN_SM_PERCENT and (g.util_memory or 0) <= SPIN_MEMORY_PERCENT for g in gpus
        )
    if all(g.memory_used is not None for g in gpus):
        facts["gpu.zombie_memory"] = any(
            not g.processes and (g.memory_used or 0) >= ZOMBIE_BYTES for g in gpus
        )
    if all(g.nvswitch is not None for g in gpus):
        facts["gpu.nvswitch"] = any(g.nvswitch for g in gpus)
    return facts


def _findings(gpus: Sequence[Gpu], facts: dict[str, object]) -> list[str]:
    """What looks wrong, in the words of the GPUs."""
    notes = []
    if facts.get("gpu.all_ranks_on_gpu0"):
        idle = [str(g.index) for g in gpus if not g.processes]
        notes.append(
            f"{len(gpus[0].processes)} processes on GPU 0 while GPU {', '.join(idle)} "
            f"{'has' if len(idle) == 1 else 'have'} none"
        )
    for gpu in gpus:
        if not gpu.processes and (gpu.memory_used or 0) >= ZOMBIE_BYTES:
            notes.append(
                f"GPU {gpu.index} holds {(gpu.memory_used or 0) / GIB:.1f} GiB with no process listed"
            )
        if (
            (gpu.util_gpu or 0) >= SPIN_SM_PERCENT
            and gpu.util_memory is not None
            and gpu.util_memory <= SPIN_MEMORY_PERCENT
        ):
            notes.append(f"GPU {gpu.index} at {gpu.util_gpu}% SM but {gpu.util_memory}% memory (spinning?)")
    unfinished = [str(g.index) for g in gpus if g.fabric_state in ("not_started", "in_progress")]
    if unfinished:
        notes.append(f"NVSwitch fabric registration not completed on GPU {', '.join(unfinished)}")
    if facts.get("gpu.nvswitch") and facts.get("gpu.fabricmanager") in ("inactive", "not_installed"):
        notes.append(f"NVSwitch system but nvidia-fabricmanager is {facts['gpu.fabricmanager']}")
    return notes


def probe(options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
    """The gpu probe: NVML, else nvidia-smi, else unavailable with the reason."""
    step_timeout = max(1.0, min(5.0, options.timeout_s / 2))
    snapshot: Snapshot | None = None
    proof: list[Evidence] = []
    try:
        nvml = import_pynvml()
    except ImportError as exc:
        nvml_reason = f"pynvml cannot be imported ({exc}); install nvidia-ml-py"
    else:
        try:
            snapshot = collect_nvml(nvml)
            nvml_reason = ""
        except _nvml_error(nvml) as exc:
            nvml_reason = f"NVML did not start: {exc}"
        except OSError as exc:
            nvml_reason = f"NVML did not load: {exc}"
    if nvml_reason:
        proof.append(evidence("pynvml.nvmlInit()", nvml_reason))
        snapshot, smi_proof, smi_reason = collect_smi(step_timeout, cancel)
        proof.extend(smi_proof)
        if snapshot is None:
            reason = f"no GPU visible: {nvml_reason}; {smi_reason}"
            if Path("/proc/driver/nvidia").exists():
                reason += " (the NVIDIA kernel driver is loaded, so the user-space library is missing)"
            return ProbeResult(
                NAME,
                "unavailable",
                {"gpu.available": False, "gpu.count": 0},
                (
                    *proof,
                    evidence(
                        "/proc/driver/nvidia", "present" if Path("/proc/driver/nvidia").exists() else "absent"
                    ),
                ),
                summary=reason,
            )
    else:
        assert snapshot is not None
        proof.extend(snapshot.evidence)
    facts = facts_from_gpus(snapshot.gpus)
    if snapshot.gpus:
        state, fm_proof = fabricmanager_state(step_timeout, cancel)
        facts["gpu.fabricmanager"] = state
        proof.extend(fm_proof)
    notes = _findings(snapshot.gpus, facts)
    status: Status = "warn" if notes else "ok" if snapshot.gpus else "unavailable"
    if notes:
        summary = "; ".join(notes)
    elif snapshot.gpus:
        names = sorted({g.name for g in snapshot.gpus})
        summary = f"{len(snapshot.gpus)} x {', '.join(names)} via {snapshot.source}"
        if snapshot.driver:
            summary += f" (driver {snapshot.driver})"
    else:
        summary = f"{snapshot.source} answered but lists no GPU"
    flagged = [
        f for f in ("gpu.all_ranks_on_gpu0", "gpu.zombie_memory", "gpu.spin_wait") if facts.get(f) is True
    ]
    if facts.get("gpu.nvswitch") and facts.get("gpu.fabricmanager") in ("inactive", "not_installed"):
        flagged.append("gpu.fabricmanager")
    return ProbeResult(NAME, status, facts, tuple(proof), summary=summary, flagged=tuple(flagged))


def gpu_count() -> int:
    """How many GPUs this machine has (NVML, else the kernel driver's list); 0 when none is seen."""
    try:
        nvml = import_pynvml()
        nvml.nvmlInit()
        try:
            return int(nvml.nvmlDeviceGetCount())
        finally:
            nvml.nvmlShutdown()
    except Exception:
        gpus = Path("/proc/driver/nvidia/gpus")
        return len(list(gpus.iterdir())) if gpus.is_dir() else 0


def inventory() -> dict[str, object]:
    """GPU names and driver for the dist mini-test's per-rank report (empty without NVML)."""
    from probes.inventory import nvml_inventory  # that module builds on this one

    driver, _, names, _ = nvml_inventory()
    return {"gpus": list(names), "driver": driver}
