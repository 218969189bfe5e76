"""One GPU as the driver describes it, and every GPU read one way (NVML or nvidia-smi).

The thresholds that turn a reading into a finding live here too, beside the fields they read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from triage.core.facts import Evidence

GIB = 1 << 30
ZOMBIE_BYTES = GIB  # memory held with no process listed: more than a driver's own reservation
SPIN_SM_PERCENT = 90
SPIN_MEMORY_PERCENT = 5


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
    fabric_state: str | None = None  # nvml.FABRIC_STATES value; None when NVML cannot say
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


def describe(gpu: Gpu) -> str:
    """One line for a GPU: memory, utilisation, links, fabric, processes."""
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
