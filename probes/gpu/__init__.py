"""The gpu probe: GPUs, memory, utilisation, who sits on which GPU, NVLink/NVSwitch and fabric state.

NVML through pynvml (the nvidia-ml-py distribution) first (`nvml`), `nvidia-smi` when NVML cannot
load (`smi`), and `unavailable` with the reason when neither answers. What the reading means is in
`health`; the GPU and snapshot types in `snapshot`.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from probes import pcie
from probes.gpu.health import facts_from_gpus, findings, health_facts
from probes.gpu.nvml import collect_nvml, import_pynvml, nvml_error_of
from probes.gpu.smi import collect_smi, fabricmanager_state
from probes.gpu.snapshot import Snapshot
from probes.subproc import evidence
from probes.torch_files import cuda_arch_list, find_torch
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
SYS_ROOT = Path("/sys")


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
        except nvml_error_of(nvml) as exc:
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
    notes = findings(snapshot.gpus, facts) + extra_notes
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
