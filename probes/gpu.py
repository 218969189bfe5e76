"""The gpu probe: GPUs, memory, utilisation, who sits on which GPU, NVLink/NVSwitch and fabric state.

NVML through pynvml (the nvidia-ml-py distribution) first, `nvidia-smi` when NVML cannot load, and
`unavailable` with the reason when neither answers. pynvml is imported inside the functions that use
it, which is also the one place tests stand a fake module in for it (there is no GPU in CI).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from probes import pcie
from probes.subproc import command_evidence, evidence, run_command
from probes.torch_files import arch_supports, cuda_arch_list, find_torch
from triage.core.facts import Evidence, ProbeOptions, ProbeResult, Status

NAME = "gpu"
KEY_FACTS = (
    "gpu.count",
    "gpu.all_ranks_on_gpu0",
    "gpu.zombie_memory",
    "gpu.nvswitch",
    "gpu.fabricmanager",
    "gpu.hardware_errors",
    "gpu.arch_supported",
)

GIB = 1 << 30
ZOMBIE_BYTES = GIB  # memory held with no process listed: more than a driver's own reservation
SPIN_SM_PERCENT = 90
SPIN_MEMORY_PERCENT = 5
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
P2P_READ = 0  # NVML_P2P_CAPS_INDEX_READ (pynvml spells it as a one-element tuple)
P2P_STATUS = {
    0: "OK",
    1: "chipset not supported",
    2: "GPU not supported",
    3: "IOH topology not supported",
    4: "disabled by regkey",
    5: "not supported",
    6: "unknown",
}
XID_WATCH_S = 0.3  # how long the probe listens for Xid events
HARDWARE_XIDS = {48, 63, 64, 74, 79, 92, 94, 95, 119, 120}


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU."""

    pid: int
    used_bytes: int | None
    name: str = ""


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML or nvidia-smi describes it."""

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
    compute_capability: tuple[int, int] | None = None
    ecc_uncorrected: int | None = None  # volatile (since the driver loaded); None: no ECC or not asked
    retired_pending: bool | None = None  # pages waiting to be retired at the next reset
    remap_pending: bool | None = None  # row remapping waiting for a reset (A100 and later)
    remap_failed: bool | None = None

    @property
    def arch(self) -> str:
        return (
            f"sm_{self.compute_capability[0]}{self.compute_capability[1]}" if self.compute_capability else ""
        )

    @property
    def hardware_errors(self) -> list[str]:
        found = []
        if self.ecc_uncorrected:
            found.append(f"{self.ecc_uncorrected} uncorrectable ECC errors since the driver loaded")
        if self.retired_pending:
            found.append("pages pending retirement")
        if self.remap_failed:
            found.append("a row remapping failed")
        elif self.remap_pending:
            found.append("row remapping pending a reset")
        return found


@dataclass
class Snapshot:
    """Every GPU the driver reports, read one way (NVML or nvidia-smi)."""

    source: str  # "nvml" or "nvidia-smi"
    gpus: list[Gpu]
    driver: str = ""
    cuda_driver: str = ""
    evidence: list[Evidence] = field(default_factory=list)
    p2p: dict[tuple[int, int], int] = field(default_factory=dict)  # (i, j) -> NVML P2P read status
    xids: list[tuple[int, int]] = field(default_factory=list)  # (gpu index, xid) seen while watching


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
        p2p = _p2p_matrix(nvml, nvml_error, len(gpus))
        xids = _watch_xids(nvml, nvml_error, len(gpus), XID_WATCH_S)
    finally:
        with contextlib.suppress(nvml_error):
            nvml.nvmlShutdown()
    lines = [f"driver {driver}" + (f", CUDA driver API {cuda_driver}" if cuda_driver else "")]
    for gpu in gpus:
        lines.append(_describe(gpu))
    proof = [evidence("pynvml (NVML)", "\n".join(lines))]
    health = [
        f"GPU {g.index}: compute capability {g.arch or '?'}; "
        + (
            f"ECC uncorrected (volatile) {g.ecc_uncorrected}"
            if g.ecc_uncorrected is not None
            else "ECC counters not available"
        )
        + (
            f"; retired pages pending: {'yes' if g.retired_pending else 'no'}"
            if g.retired_pending is not None
            else ""
        )
        + (
            f"; row remap pending: {'yes' if g.remap_pending else 'no'}, failed: {'yes' if g.remap_failed else 'no'}"
            if g.remap_pending is not None
            else ""
        )
        for g in gpus
    ]
    health += [f"P2P {i}<->{j}: {P2P_STATUS.get(v, str(v))}" for (i, j), v in sorted(p2p.items())]
    health.append(
        f"Xid events while listening {XID_WATCH_S:.1f} s: "
        + (", ".join(f"GPU {i} Xid {x}" for i, x in xids) if xids else "none")
    )
    proof.append(
        evidence(
            "pynvml: compute capability, ECC (volatile uncorrected), retired pages, row remapping, P2P, Xid events",
            "\n".join(health),
        )
    )
    return Snapshot("nvml", gpus, driver, cuda_driver, proof, p2p, xids)


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
    capability = optional("nvmlDeviceGetCudaComputeCapability")
    ecc = optional(
        "nvmlDeviceGetTotalEccErrors",
        getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
        getattr(nvml, "NVML_VOLATILE_ECC", 0),
    )
    pending = optional("nvmlDeviceGetRetiredPagesPendingStatus")
    remap = optional("nvmlDeviceGetRemappedRows")
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
        compute_capability=(int(capability[0]), int(capability[1])) if capability is not None else None,
        ecc_uncorrected=int(ecc) if ecc is not None else None,
        retired_pending=bool(pending) if pending is not None else None,
        remap_pending=bool(remap[2]) if remap is not None else None,
        remap_failed=bool(remap[3]) if remap is not None else None,
    )


def _p2p_matrix(nvml: ModuleType, nvml_error: type[BaseException], count: int) -> dict[tuple[int, int], int]:
    """NVML's peer-to-peer read status for every pair of GPUs (what CUDA will let NCCL use)."""
    call = getattr(nvml, "nvmlDeviceGetP2PStatus", None)
    if call is None or count < 2:
        return {}
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    found: dict[tuple[int, int], int] = {}
    for i in range(count):
        for j in range(i + 1, count):
            try:
                found[(i, j)] = int(call(handles[i], handles[j], P2P_READ))
            except (nvml_error, TypeError):
                continue
    return found


def _watch_xids(
    nvml: ModuleType, nvml_error: type[BaseException], count: int, seconds: float
) -> list[tuple[int, int]]:
    """Xid errors NVML reports while the probe listens for `seconds` (NVML keeps no history)."""
    create = getattr(nvml, "nvmlEventSetCreate", None)
    if create is None or count == 0:
        return []
    try:
        event_set = create()
    except nvml_error:
        return []
    seen: list[tuple[int, int]] = []
    try:
        registered = 0
        for index in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            try:
                nvml.nvmlDeviceRegisterEvents(
                    handle, getattr(nvml, "nvmlEventTypeXidCriticalError", 8), event_set
                )
                registered += 1
            except nvml_error:
                continue
        if not registered:
            return []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                data = nvml.nvmlEventSetWait_v2(event_set, max(1, int(left * 1000)))
            except nvml_error:
                break  # NVML_ERROR_TIMEOUT: nothing more happened
            try:
                index = int(nvml.nvmlDeviceGetIndex(data.device))
            except (nvml_error, AttributeError):
                index = -1
            seen.append((index, int(getattr(data, "eventData", 0))))
    finally:
        with contextlib.suppress(nvml_error):
            nvml.nvmlEventSetFree(event_set)
    return seen


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


def visible_gpus(count: int, cuda_visible_devices: str | None) -> int:
    """How many of `count` GPUs a process sees under CUDA_VISIBLE_DEVICES (CUDA stops at the first
    entry that names no GPU)."""
    if cuda_visible_devices is None:
        return count
    seen = 0
    for raw in cuda_visible_devices.split(","):
        item = raw.strip()
        if not item:
            break
        if item.isdigit() and int(item) >= count:
            break
        seen += 1
    return min(seen, count)


def requested_local_processes(env: Mapping[str, str]) -> tuple[int, str] | None:
    """How many processes the launcher runs on this machine, and the variable that says so."""
    for name in ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"):
        raw = env.get(name, "").split("(", 1)[0].strip()
        if raw.isdigit():
            return int(raw), name
    single_node = env.get("GROUP_WORLD_SIZE", "1").strip() in ("", "1") and env.get(
        "SLURM_NNODES", "1"
    ).strip() in ("", "1")
    raw = env.get("WORLD_SIZE", "").strip()
    if raw.isdigit() and single_node:
        return int(raw), "WORLD_SIZE (single node)"
    return None


def health_facts(
    snapshot: Snapshot,
    env: Mapping[str, str],
    archs: list[str] | None,
    pcie_gpus: list[pcie.GpuPcie],
) -> tuple[dict[str, object], list[str], list[str]]:
    """(facts, findings, evidence lines) about fit and health: ranks vs GPUs, architecture vs the
    torch build, peer-to-peer and PCIe, ECC/row-remap/Xid."""
    gpus = snapshot.gpus
    facts: dict[str, object] = {}
    notes: list[str] = []
    lines: list[str] = []
    if not gpus:
        return facts, notes, lines
    visible = visible_gpus(len(gpus), env.get("CUDA_VISIBLE_DEVICES"))
    wanted = requested_local_processes(env)
    if wanted is not None:
        facts["gpu.ranks_exceed_gpus"] = wanted[0] > visible
        lines.append(f"{wanted[1]}={wanted[0]} processes on this machine, {visible} GPU(s) visible")
        if wanted[0] > visible:
            notes.append(
                f"{wanted[0]} local processes but only {visible} visible GPU(s) (invalid device ordinal)"
            )
    else:
        lines.append(f"{visible} GPU(s) visible; no LOCAL_WORLD_SIZE/WORLD_SIZE to compare with")
    capabilities = sorted({g.arch for g in gpus if g.arch})
    if capabilities:
        facts["gpu.compute_capability"] = ",".join(capabilities)
        if archs:
            unsupported = [
                g
                for g in gpus
                if g.compute_capability is not None and not arch_supports(archs, g.compute_capability)
            ]
            facts["gpu.arch_supported"] = not unsupported
            lines.append(f"GPU architectures {', '.join(capabilities)}; torch built for {' '.join(archs)}")
            if unsupported:
                notes.append(
                    f"GPU {unsupported[0].index} ({unsupported[0].name}, {unsupported[0].arch}) is not in the "
                    f"installed torch's architectures ({' '.join(archs)})"
                )
        else:
            lines.append(
                f"GPU architectures {', '.join(capabilities)}; the torch build's architectures are unknown"
            )
    if snapshot.p2p:
        blocked = {pair: v for pair, v in snapshot.p2p.items() if v != 0}
        facts["gpu.p2p_status"] = "blocked" if blocked else "ok"
    iommu, redirect, pcie_lines = pcie.summarize(pcie_gpus)
    lines += pcie_lines
    if iommu is not None:
        facts["gpu.iommu"] = iommu
    pcie_pairs = (
        len(gpus) > 1 and not all(g.nvswitch for g in gpus) and any(not g.nvlinks_active for g in gpus)
    )
    p2p_used = any(v == 0 for v in snapshot.p2p.values())
    if pcie_pairs and p2p_used and (iommu == "on" or redirect):
        facts["gpu.pcie_p2p_risk"] = True
        why = (
            "the IOMMU translates the GPUs' DMA"
            if iommu == "on"
            else "ACS redirects P2P on a bridge above the GPUs"
        )
        notes.append(
            f"peer-to-peer over PCIe is reported available but {why} (hangs at the first collective)"
        )
    elif len(gpus) > 1 and (redirect is not None or not pcie_pairs or not p2p_used):
        facts["gpu.pcie_p2p_risk"] = False
    errors = {g.index: g.hardware_errors for g in gpus if g.hardware_errors}
    hardware_xids = [(i, x) for i, x in snapshot.xids if x in HARDWARE_XIDS]
    if any(g.ecc_uncorrected is not None or g.remap_pending is not None for g in gpus) or snapshot.xids:
        facts["gpu.hardware_errors"] = bool(errors or hardware_xids)
    for index, found in errors.items():
        notes.append(f"GPU {index}: {', '.join(found)}")
    for index, xid in hardware_xids:
        notes.append(f"GPU {index}: Xid {xid} while the probe watched")
    return facts, notes, lines


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
    archs, arch_source = _torch_archs()
    bdfs = [b for b in (pcie.nvml_bus_id_to_bdf(g.bus_id) for g in snapshot.gpus) if b]
    pcie_gpus = [pcie.gpu_pcie(b, SYS_ROOT) for b in bdfs]
    extra, extra_notes, extra_lines = health_facts(snapshot, os.environ, archs, pcie_gpus)
    facts.update(extra)
    if snapshot.gpus:
        proof.append(
            evidence(
                f"fit and health (environment, {arch_source}, {SYS_ROOT}/bus/pci and iommu_groups)",
                "\n".join(extra_lines),
            )
        )
    notes = _findings(snapshot.gpus, facts) + extra_notes
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
    for name, bad in (
        ("gpu.ranks_exceed_gpus", True),
        ("gpu.arch_supported", False),
        ("gpu.pcie_p2p_risk", True),
        ("gpu.hardware_errors", True),
    ):
        if facts.get(name) is bad:
            flagged.append(name)
    return ProbeResult(NAME, status, facts, tuple(proof), summary=summary, flagged=tuple(flagged))


SYS_ROOT = Path("/sys")


def _torch_archs() -> tuple[list[str] | None, str]:
    """The CUDA architectures of the installed torch, from its files; (None, why) when unknown."""
    location = find_torch()
    if location is None:
        return None, "torch not installed"
    return cuda_arch_list(location)


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
