"""PCIe facts about the GPUs, read from sysfs without root where the kernel allows it.

- The IOMMU: a GPU in an IOMMU group whose type is `DMA` or `DMA-FQ` has its DMA translated, which
  can silently drop GPU peer-to-peer writes; `identity` is passthrough (iommu=pt); no group means
  no IOMMU. `/sys/kernel/iommu_groups/N/type` is world-readable.
- ACS on the bridges above each GPU: the Access Control Services capability in PCIe extended
  config space. Its control register redirects peer-to-peer requests up to the root complex
  (`ACSCtl: SrcValid+ ReqRedir+ ...` in `lspci -vvv`). Unprivileged reads of `config` stop at the
  first 64 bytes, so without root the state is unknown and said so.

Every function takes the sysfs root so that tests can hand it a temporary tree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
EXTENDED_START = 0x100
ACS_CAP_ID = 0x000D
ACS_CONTROL_OFFSET = 6
# ACS control bits that send peer-to-peer traffic elsewhere: source validation, request and
# completion redirect, upstream forwarding, egress control, direct translated P2P.
ACS_CONTROL_NAMES = {
    0x01: "SrcValid",
    0x02: "TransBlk",
    0x04: "ReqRedir",
    0x08: "CmpltRedir",
    0x10: "UpstreamFwd",
    0x20: "EgressCtrl",
    0x40: "DirectTrans",
}
ACS_P2P_BITS = 0x01 | 0x04 | 0x08 | 0x10 | 0x20


@dataclass
class GpuPcie:
    """One GPU's PCIe facts read from sysfs: IOMMU and ACS on the path to it."""

    bdf: str
    iommu: str | None = None  # "on" (translated), "passthrough", "off"; None: cannot tell
    bridges: list[str] = field(default_factory=list)
    acs: dict[str, int | None] = field(default_factory=dict)  # bridge -> ACS control, None: unreadable


def nvml_bus_id_to_bdf(bus_id: str) -> str | None:
    """'00000000:18:00.0' (NVML) -> '0000:18:00.0' (sysfs); None when it is not a bus id."""
    found = re.match(r"^([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])$", bus_id.strip())
    if found is None:
        return None
    domain, bus, device, function = found.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}.{function}"


def acs_control(config: bytes) -> int | None:
    """The ACS control register from a device's config space, 0 when it has no ACS capability, None
    when the extended space was not readable (fewer than 260 bytes: an unprivileged read)."""
    if len(config) < EXTENDED_START + 4:
        return None
    offset = EXTENDED_START
    for _ in range(64):  # the list is short; a loop guards against a corrupt one
        header = int.from_bytes(config[offset : offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return 0
        if header & 0xFFFF == ACS_CAP_ID:
            where = offset + ACS_CONTROL_OFFSET
            return int.from_bytes(config[where : where + 2], "little") if len(config) >= where + 2 else None
        offset = (header >> 20) & 0xFFC
        if offset < EXTENDED_START or offset + 4 > len(config):
            return 0
    return 0


def describe_acs(control: int) -> str:
    """ACS control bits as lspci prints them (SrcValid+ TransBlk- ...)."""
    return " ".join(f"{name}{'+' if control & bit else '-'}" for bit, name in ACS_CONTROL_NAMES.items())


def _iommu_type(device: Path) -> str | None:
    group = device / "iommu_group"
    if not group.exists():
        return "off" if device.exists() else None
    try:
        kind = (group / "type").read_text(encoding="utf-8").strip()
    except OSError:
        return "on"  # a group without a readable type: translation is the default
    return "passthrough" if kind == "identity" else "on"


def gpu_pcie(bdf: str, sys_root: Path) -> GpuPcie:
    """The IOMMU state of one GPU and the ACS control of every bridge above it."""
    device = sys_root / "bus" / "pci" / "devices" / bdf
    info = GpuPcie(bdf, iommu=_iommu_type(device))
    try:
        real = device.resolve(strict=True)
    except OSError:
        return info
    parents = [part for part in real.parts[:-1] if BDF.match(part)]
    info.bridges = parents
    for bridge in parents:
        bridge_dir = sys_root / "bus" / "pci" / "devices" / bridge
        try:
            config = (bridge_dir / "config").read_bytes()
        except OSError:
            info.acs[bridge] = None
            continue
        info.acs[bridge] = acs_control(config)
    return info


def summarize(gpus: list[GpuPcie]) -> tuple[str | None, bool | None, list[str]]:
    """(the gpu.iommu value, whether ACS redirects P2P on a bridge above a GPU (None: unreadable),
    evidence lines)."""
    lines = []
    states = {g.iommu for g in gpus if g.iommu is not None}
    iommu = (
        "on" if "on" in states else "passthrough" if "passthrough" in states else "off" if states else None
    )
    redirect: bool | None = False
    for gpu in gpus:
        lines.append(
            f"GPU {gpu.bdf}: IOMMU {gpu.iommu or 'unknown'}; bridges above: {', '.join(gpu.bridges) or 'none'}"
        )
        for bridge, control in gpu.acs.items():
            if control is None:
                lines.append(f"  {bridge}: ACS unknown (extended config space not readable without root)")
                if redirect is False:
                    redirect = None
            elif control:
                lines.append(f"  {bridge}: ACSCtl {describe_acs(control)}")
                if control & ACS_P2P_BITS:
                    redirect = True
            else:
                lines.append(f"  {bridge}: no ACS redirection")
    return iommu, redirect, lines
