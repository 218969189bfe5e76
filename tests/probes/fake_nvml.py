"""A stand-in for the pynvml module, for a machine without a GPU.

Only the calls into the NVML library are replaced: the structures, constants and error classes are
pynvml's own (nvmlMemory_v2, nvmlUtilization_t, nvmlPciInfo_t, the fabric-info struct filled through
ctypes.byref, NVMLError subclasses chosen by error code), so the probe runs its real code path on the
shapes a real driver returns.
"""

from __future__ import annotations

import ctypes
import types
from dataclasses import dataclass, field

import pynvml as real

GIB = 1 << 30


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    total: int = 80 * GIB
    used: int = 0  # excluding the driver's reservation, as nvmlMemory_v2 reports it
    util_gpu: int = 0
    util_memory: int = 0
    compute: list[tuple[int, int]] = field(default_factory=list)  # (pid, bytes)
    nvlinks: int | None = 18  # None: a PCIe GPU, NVML answers NOT_SUPPORTED
    switch: bool = True
    fabric_state: int | None = real.NVML_GPU_FABRIC_STATE_COMPLETED  # None: pre-Hopper, not supported
    capability: tuple[int, int] = (9, 0)
    ecc_uncorrected: int | None = 0  # None: ECC not supported (GeForce), NVML answers NOT_SUPPORTED
    retired_pending: bool | None = False
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)  # corrected, uncorrected, pending, failed


def make_nvml(
    gpus: list[FakeGpu],
    *,
    init_error: int | None = None,
    driver: str = "550.54.15",
    p2p: dict[tuple[int, int], int] | None = None,
    xids: list[tuple[int, int]] | None = None,
) -> types.ModuleType:
    module = types.ModuleType("pynvml")
    for name in dir(real):  # constants, structs, error classes
        if name.startswith(
            ("NVML_", "c_nvml", "nvmlMemory_v", "NVMLError", "nvmlEventType")
        ) or name.endswith("_t"):
            setattr(module, name, getattr(real, name))
    module.nvmlFriendlyObject = real.nvmlFriendlyObject
    state = {"initialised": 0}

    def check() -> None:
        if not state["initialised"]:
            raise real.NVMLError(real.NVML_ERROR_UNINITIALIZED)

    def nvmlInit() -> None:
        if init_error is not None:
            raise real.NVMLError(init_error)
        state["initialised"] += 1

    def nvmlShutdown() -> None:
        check()
        state["initialised"] -= 1

    def handle(h: object) -> FakeGpu:
        check()
        assert isinstance(h, FakeGpu), "NVML calls take the handle nvmlDeviceGetHandleByIndex returned"
        return h

    def nvmlDeviceGetHandleByIndex(index: int) -> FakeGpu:
        check()
        if not 0 <= index < len(gpus):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return gpus[index]

    def nvmlDeviceGetMemoryInfo(h: object, version: int | None = None) -> object:
        gpu = handle(h)
        reserved = 512 << 20
        if version:
            mem = real.c_nvmlMemory_v2_t()
            mem.version, mem.total, mem.reserved, mem.used = version, gpu.total, reserved, gpu.used
            mem.free = gpu.total - reserved - gpu.used
            return mem
        mem = real.c_nvmlMemory_t()
        mem.total, mem.used, mem.free = gpu.total, gpu.used + reserved, gpu.total - gpu.used - reserved
        return mem

    def nvmlDeviceGetUtilizationRates(h: object) -> object:
        gpu = handle(h)
        util = real.c_nvmlUtilization_t()
        util.gpu, util.memory = gpu.util_gpu, gpu.util_memory
        return util

    def nvmlDeviceGetComputeRunningProcesses(h: object) -> list[object]:
        return [
            real.nvmlFriendlyObject(
                {
                    "pid": pid,
                    "usedGpuMemory": used,
                    "gpuInstanceId": 0xFFFFFFFF,
                    "computeInstanceId": 0xFFFFFFFF,
                }
            )
            for pid, used in handle(h).compute
        ]

    def nvmlDeviceGetPciInfo(h: object) -> object:
        pci = real.nvmlPciInfo_t()
        pci.busId = f"00000000:{0x18 + gpus.index(handle(h)) * 0x10:02X}:00.0".encode()
        return pci

    def nvmlDeviceGetNvLinkState(h: object, link: int) -> int:
        gpu = handle(h)
        if gpu.nvlinks is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        if link >= gpu.nvlinks:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return real.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(h: object, link: int) -> int:
        return real.NVML_NVLINK_DEVICE_TYPE_SWITCH if handle(h).switch else real.NVML_NVLINK_DEVICE_TYPE_GPU

    def nvmlDeviceGetGpuFabricInfoV(h: object, ref: object) -> int:
        gpu = handle(h)
        if gpu.fabric_state is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        info = ref._obj  # type: ignore[attr-defined]  # what ctypes.byref wraps
        assert isinstance(info, ctypes.Structure)
        info.state, info.status = gpu.fabric_state, real.NVML_SUCCESS
        return real.NVML_SUCCESS

    def supported(value: object) -> object:
        if value is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetP2PStatus(h1: object, h2: object, index: object) -> int:
        first, second = (next(i for i, g in enumerate(gpus) if g is handle(h)) for h in (h1, h2))
        assert index == 0, "the read capability index, passed as the int NVML expects"
        return (p2p or {}).get((min(first, second), max(first, second)), real.NVML_P2P_STATUS_OK)

    events: dict[str, object] = {"registered": [], "pending": list(xids or [])}

    def nvmlEventSetCreate() -> object:
        check()
        return events

    def nvmlDeviceRegisterEvents(h: object, types_: int, event_set: object) -> None:
        assert types_ == real.nvmlEventTypeXidCriticalError and event_set is events
        events["registered"].append(handle(h))  # type: ignore[attr-defined]

    def nvmlEventSetWait_v2(event_set: object, timeout_ms: int) -> object:
        pending = events["pending"]
        assert isinstance(pending, list)
        if not pending:
            raise real.NVMLError(real.NVML_ERROR_TIMEOUT)
        index, xid = pending.pop(0)
        data = real.c_nvmlEventData_t()
        data.eventType, data.eventData = real.nvmlEventTypeXidCriticalError, xid
        return types.SimpleNamespace(device=gpus[index], eventData=data.eventData)

    functions = {
        "nvmlInit": nvmlInit,
        "nvmlShutdown": nvmlShutdown,
        "nvmlSystemGetDriverVersion": lambda: (check(), driver)[1],
        "nvmlSystemGetCudaDriverVersion": lambda: (check(), 12040)[1],
        "nvmlDeviceGetCount": lambda: (check(), len(gpus))[1],
        "nvmlDeviceGetHandleByIndex": nvmlDeviceGetHandleByIndex,
        "nvmlDeviceGetName": lambda h: handle(h).name,
        "nvmlDeviceGetUUID": lambda h: f"GPU-{gpus.index(handle(h)):08x}-0000-0000-0000-000000000000",
        "nvmlDeviceGetMemoryInfo": nvmlDeviceGetMemoryInfo,
        "nvmlDeviceGetUtilizationRates": nvmlDeviceGetUtilizationRates,
        "nvmlDeviceGetComputeRunningProcesses": nvmlDeviceGetComputeRunningProcesses,
        "nvmlDeviceGetGraphicsRunningProcesses": lambda h: (handle(h), [])[1],
        "nvmlDeviceGetPciInfo": nvmlDeviceGetPciInfo,
        "nvmlDeviceGetNvLinkState": nvmlDeviceGetNvLinkState,
        "nvmlDeviceGetNvLinkRemoteDeviceType": nvmlDeviceGetNvLinkRemoteDeviceType,
        "nvmlDeviceGetGpuFabricInfoV": nvmlDeviceGetGpuFabricInfoV,
        "nvmlDeviceGetCudaComputeCapability": lambda h: handle(h).capability,
        "nvmlDeviceGetTotalEccErrors": lambda h, kind, counter: supported(handle(h).ecc_uncorrected),
        "nvmlDeviceGetRetiredPagesPendingStatus": lambda h: int(bool(supported(handle(h).retired_pending))),
        "nvmlDeviceGetRemappedRows": lambda h: supported(handle(h).remapped_rows),
        "nvmlDeviceGetP2PStatus": nvmlDeviceGetP2PStatus,
        "nvmlEventSetCreate": nvmlEventSetCreate,
        "nvmlDeviceRegisterEvents": nvmlDeviceRegisterEvents,
        "nvmlEventSetWait_v2": nvmlEventSetWait_v2,
        "nvmlEventSetFree": lambda event_set: None,
        "nvmlDeviceGetIndex": lambda h: next(i for i, g in enumerate(gpus) if g is handle(h)),
    }
    for name, function in functions.items():
        setattr(module, name, function)
    module.initialised = lambda: state["initialised"]
    return module
