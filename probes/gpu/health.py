"""What a snapshot of the GPUs says: the gpu.* facts, and the findings in the GPUs' own words.

Pure functions of the snapshot, the environment, the torch build's architectures and the PCIe
reading: whether ranks pile on GPU 0, memory is held with no process, a GPU spins in a collective,
there are more local ranks than visible GPUs, the torch build lacks a GPU's architecture, P2P over
PCIe crosses a translating IOMMU, or the GPUs report hardware errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from probes import pcie
from probes.gpu.snapshot import GIB, SPIN_MEMORY_PERCENT, SPIN_SM_PERCENT, ZOMBIE_BYTES, Gpu, Snapshot
from probes.torch_files import arch_supports
from triage.core import launchers

HARDWARE_XIDS = {48, 63, 64, 74, 79, 92, 94, 95, 119, 120}


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
    for name in launchers.LOCAL_WORLD_SIZE:
        count = launchers.first_int(env, (name,))
        if count is not None:
            return count, name
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


def findings(gpus: Sequence[Gpu], facts: dict[str, object]) -> list[str]:
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
