"""Reading the GPUs through NVML (pynvml, the nvidia-ml-py distribution).

pynvml is imported inside `import_pynvml`, which is also the one place tests stand a fake module in
for it (there is no GPU in CI). Every optional call may be missing from an old driver or binding,
or fail on a GPU that does not support it: those fields stay None rather than guessed.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from probes.gpu.snapshot import Gpu, GpuProcess, Snapshot, describe
from probes.subproc import evidence

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


def text(value: object) -> str:
    """NVML's answer as text (older bindings return bytes)."""
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


def nvml_error_of(nvml: ModuleType) -> type[BaseException]:
    """The binding's NVMLError class (Exception where a binding lacks one)."""
    error = getattr(nvml, "NVMLError", None)
    return error if isinstance(error, type) and issubclass(error, BaseException) else Exception


def collect_nvml(nvml: ModuleType) -> Snapshot:
    """Read every GPU through NVML. Raises nvml.NVMLError when NVML itself cannot start."""
    nvml_error = nvml_error_of(nvml)
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
        lines.append(describe(gpu))
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
    driver = text(nvml.nvmlSystemGetDriverVersion())
    try:
        cuda = int(nvml.nvmlSystemGetCudaDriverVersion())
    except nvml_error_of(nvml):
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
        name=text(nvml.nvmlDeviceGetName(handle)),
        uuid=text(optional("nvmlDeviceGetUUID") or ""),
        bus_id=text(getattr(pci, "busId", "") or "") if pci is not None else "",
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
