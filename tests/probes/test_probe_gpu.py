"""The gpu probe on realistic NVML answers (a fake pynvml, since CI has no GPU) and on this machine."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pynvml
import pytest

from probes import gpu
from probes.gpu import health, smi
from tests.probes.fake_nvml import GIB, FakeGpu, make_nvml
from triage.core.facts import ProbeOptions, ProbeResult


def run_with(monkeypatch: pytest.MonkeyPatch, module: object) -> ProbeResult:
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return gpu.probe(ProbeOptions(timeout_s=5), threading.Event())


def test_all_ranks_piled_on_gpu0_of_an_nvswitch_box(monkeypatch: pytest.MonkeyPatch) -> None:
    me = os.getpid()
    boxes = [
        FakeGpu(
            used=60 * GIB,
            util_gpu=97,
            util_memory=41,
            compute=[(me, 20 * GIB), (me + 1, 20 * GIB), (me + 2, 20 * GIB)],
        )
    ]
    boxes += [FakeGpu() for _ in range(7)]
    fake = make_nvml(boxes)
    result = run_with(monkeypatch, fake)
    assert fake.initialised() == 0  # nvmlShutdown was called
    assert result.status == "warn"
    assert result.facts["gpu.count"] == 8 and result.facts["gpu.available"] is True
    assert result.facts["gpu.all_ranks_on_gpu0"] is True
    assert result.facts["gpu.nvswitch"] is True
    assert result.facts["gpu.zombie_memory"] is False and result.facts["gpu.spin_wait"] is False
    assert result.facts["gpu.fabricmanager"] in ("active", "inactive", "not_installed", "unknown")
    assert "gpu.all_ranks_on_gpu0" in result.flagged
    assert result.summary.startswith("3 processes on GPU 0 while GPU 1, 2, 3, 4, 5, 6, 7 have none")
    listing = result.evidence[0].output
    assert "driver 550.54.15, CUDA driver API 12.4" in listing
    assert "GPU 0 NVIDIA H100 80GB HBM3 00000000:18:00.0: 60.0/80.0 GiB" in listing
    assert "18 NVLinks to NVSwitch, fabric completed" in listing
    assert f"{me} python" in listing  # the process name comes from /proc


def test_memory_held_with_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_with(
        monkeypatch,
        make_nvml([FakeGpu(used=2 * GIB, compute=[(os.getpid(), 2 * GIB)]), FakeGpu(used=20 * GIB)]),
    )
    assert result.facts["gpu.zombie_memory"] is True
    assert result.facts["gpu.all_ranks_on_gpu0"] is False
    assert "GPU 1 holds 20.0 GiB with no process listed" in result.summary
    assert result.flagged == ("gpu.zombie_memory",)


def test_spinning_in_a_collective(monkeypatch: pytest.MonkeyPatch) -> None:
    busy = [
        FakeGpu(used=30 * GIB, util_gpu=100, util_memory=0, compute=[(10 + i, 30 * GIB)]) for i in range(2)
    ]
    result = run_with(monkeypatch, make_nvml(busy))
    assert result.facts["gpu.spin_wait"] is True
    assert "GPU 0 at 100% SM but 0% memory" in result.summary


def test_healthy_pcie_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    pair = [
        FakeGpu(
            name="NVIDIA L40S",
            total=48 * GIB,
            used=10 * GIB,
            util_gpu=80,
            util_memory=50,
            compute=[(20 + i, 10 * GIB)],
            nvlinks=None,
            switch=False,
            fabric_state=None,
        )
        for i in range(2)
    ]
    result = run_with(monkeypatch, make_nvml(pair))
    assert result.status == "ok" and result.flagged == ()
    assert result.facts["gpu.nvswitch"] is False
    assert result.summary.startswith("2 x NVIDIA L40S via nvml (driver 550.54.15)")


def test_fabric_registration_unfinished(monkeypatch: pytest.MonkeyPatch) -> None:
    boxes = [FakeGpu(fabric_state=pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS) for _ in range(2)]
    result = run_with(monkeypatch, make_nvml(boxes))
    assert result.status == "warn"
    assert "NVSwitch fabric registration not completed on GPU 0, 1" in result.summary


def test_no_nvml_and_no_nvidia_smi_is_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run_with(monkeypatch, make_nvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert result.status == "unavailable"
    assert result.facts == {"gpu.available": False, "gpu.count": 0}
    assert "NVML Shared Library Not Found" in result.summary and "nvidia-smi is not on PATH" in result.summary


def test_gpu_count_through_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", make_nvml([FakeGpu(), FakeGpu(), FakeGpu()]))
    assert gpu.gpu_count() == 3
    assert gpu.inventory() == {"gpus": ["NVIDIA H100 80GB HBM3"] * 3, "driver": "550.54.15"}


def test_this_machine() -> None:
    result = gpu.probe(ProbeOptions(timeout_s=5), threading.Event())
    if result.facts.get("gpu.available"):  # a GPU runner: the real thing must answer
        assert result.status in ("ok", "warn") and result.facts["gpu.count"] >= 1
    else:
        assert result.status == "unavailable"
        assert result.summary.startswith("no GPU visible: ")
        assert result.facts == {"gpu.available": False, "gpu.count": 0}


def test_fabricmanager_without_systemd_is_unknown() -> None:
    state, proof = smi.fabricmanager_state(2.0, threading.Event())
    if Path("/run/systemd/system").is_dir():
        assert state in ("active", "inactive", "not_installed", "unknown")
        assert proof[0].source == "systemctl is-active nvidia-fabricmanager"
    else:
        assert state == "unknown" and "cannot ask" in proof[0].output


SMI_GPUS = """\
0, NVIDIA A100-SXM4-80GB, GPU-5d8e2c6a-1b2c-4d5e-8f90-123456789abc, 00000000:07:00.0, 81920, 45012, 99, 2
1, NVIDIA A100-SXM4-80GB, GPU-7a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d, 00000000:0F:00.0, 81920, 4, 0, 0
2, NVIDIA A100-SXM4-80GB, GPU-00000000-1111-2222-3333-444444444444, 00000000:47:00.0, 81920, [N/A], [N/A], [N/A]
"""
SMI_APPS = """\
GPU-5d8e2c6a-1b2c-4d5e-8f90-123456789abc, 4242, /usr/bin/python3, 22500
GPU-5d8e2c6a-1b2c-4d5e-8f90-123456789abc, 4243, /usr/bin/python3, 22500
"""


def test_nvidia_smi_csv() -> None:
    gpus = smi.parse_smi(SMI_GPUS, SMI_APPS)
    assert [g.index for g in gpus] == [0, 1, 2]
    assert gpus[0].memory_used == 45012 << 20 and gpus[0].util_gpu == 99
    assert [p.pid for p in gpus[0].processes] == [4242, 4243] and not gpus[1].processes
    assert gpus[2].memory_used is None and gpus[2].util_gpu is None
    facts = health.facts_from_gpus(gpus)
    assert facts["gpu.all_ranks_on_gpu0"] is True
    assert "gpu.zombie_memory" not in facts  # GPU 2 cannot say: the probe does not guess
    assert "gpu.nvswitch" not in facts


# --- fit and health: architectures, ranks vs GPUs, P2P over PCIe, ECC and Xid -----------------------


def test_new_architecture_missing_from_the_torch_build(monkeypatch: pytest.MonkeyPatch) -> None:
    blackwell = [FakeGpu(name="NVIDIA GeForce RTX 5090", capability=(12, 0), nvlinks=None, fabric_state=None)]
    monkeypatch.setattr(
        gpu, "_torch_archs", lambda: (["sm_50", "sm_60", "sm_70", "sm_80", "sm_86", "sm_90"], "test")
    )
    result = run_with(monkeypatch, make_nvml(blackwell))
    assert result.facts["gpu.compute_capability"] == "sm_120"
    assert result.facts["gpu.arch_supported"] is False
    assert "gpu.arch_supported" in result.flagged and result.status == "warn"
    assert "sm_120" in result.summary and "sm_90" in result.summary


def test_a_build_with_the_architecture_or_its_ptx_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "_torch_archs", lambda: (["sm_80", "sm_90", "compute_90"], "test"))
    result = run_with(monkeypatch, make_nvml([FakeGpu(capability=(12, 0)), FakeGpu(capability=(8, 6))]))
    assert result.facts["gpu.arch_supported"] is True  # compute_90 PTX JITs for sm_120; sm_80 runs on sm_86
    assert result.facts["gpu.compute_capability"] == "sm_120,sm_86"


def test_more_local_processes_than_visible_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    result = run_with(monkeypatch, make_nvml([FakeGpu() for _ in range(4)]))
    assert result.facts["gpu.ranks_exceed_gpus"] is True
    assert "gpu.ranks_exceed_gpus" in result.flagged
    assert "8 local processes but only 2 visible GPU(s)" in result.summary


@pytest.mark.parametrize(
    ("cvd", "count", "visible"),
    [(None, 4, 4), ("", 4, 0), ("0,1", 4, 2), ("3,7,1", 4, 1), ("GPU-ab12,GPU-cd34", 8, 2)],
)
def test_visible_gpus_follow_cuda_semantics(cvd: str | None, count: int, visible: int) -> None:
    assert health.visible_gpus(count, cvd) == visible


def test_ecc_errors_and_xid_are_hardware_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    boxes = [FakeGpu(), FakeGpu(ecc_uncorrected=3, remapped_rows=(0, 1, 1, 0)), FakeGpu()]
    result = run_with(monkeypatch, make_nvml(boxes, xids=[(2, 79)]))
    assert result.facts["gpu.hardware_errors"] is True
    assert "gpu.hardware_errors" in result.flagged
    assert "GPU 1: 3 uncorrectable ECC errors since the driver loaded, row remapping pending a reset" in (
        result.summary
    )
    assert "GPU 2: Xid 79 while the probe watched" in result.summary
    health = next(e.output for e in result.evidence if e.source.startswith("pynvml: compute capability"))
    assert "GPU 2 Xid 79" in health


def test_healthy_gpus_without_ecc_support(monkeypatch: pytest.MonkeyPatch) -> None:
    geforce = [FakeGpu(ecc_uncorrected=None, retired_pending=None, remapped_rows=None) for _ in range(2)]
    result = run_with(monkeypatch, make_nvml(geforce))
    assert "gpu.hardware_errors" not in result.facts  # NVML cannot say on these GPUs: no guess


def _sysfs(root: Path, gpus: dict[str, str], iommu: str | None, acs: int | None) -> Path:
    """A sysfs tree: each GPU below bridge 0000:00:01.0, an IOMMU group of type `iommu`, and the
    bridge's config space with an ACS capability whose control register is `acs` (None: only the
    64 bytes an unprivileged read returns)."""
    sysfs = root / "sys"
    bridge = sysfs / "devices" / "pci0000:00" / "0000:00:01.0"
    config = bytearray(64 if acs is None else 4096)
    if acs is not None:
        config[0x100:0x104] = (0x000D | (1 << 16)).to_bytes(4, "little")  # ACS, version 1, last capability
        config[0x106:0x108] = acs.to_bytes(2, "little")
    bridge.mkdir(parents=True)
    (bridge / "config").write_bytes(bytes(config))
    links = sysfs / "bus" / "pci" / "devices"
    links.mkdir(parents=True)
    (links / "0000:00:01.0").symlink_to(bridge)
    for group, bdf in enumerate(gpus):
        device = bridge / bdf
        device.mkdir()
        (links / bdf).symlink_to(device)
        if iommu is not None:
            group_dir = sysfs / "kernel" / "iommu_groups" / str(group)
            group_dir.mkdir(parents=True)
            (group_dir / "type").write_text(iommu + "\n")
            (device / "iommu_group").symlink_to(group_dir)
    return sysfs


def test_pcie_peer_to_peer_behind_a_translating_iommu_is_a_risk(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bdfs = {"0000:18:00.0": "", "0000:28:00.0": ""}  # the fake's bus ids for GPU 0 and 1
    monkeypatch.setattr(gpu, "SYS_ROOT", _sysfs(tmp_path, bdfs, "DMA-FQ", acs=None))
    result = run_with(monkeypatch, make_nvml([FakeGpu(nvlinks=None, switch=False) for _ in range(2)]))
    assert result.facts["gpu.p2p_status"] == "ok"
    assert result.facts["gpu.iommu"] == "on"
    assert result.facts["gpu.pcie_p2p_risk"] is True and "gpu.pcie_p2p_risk" in result.flagged
    assert "the IOMMU translates the GPUs' DMA" in result.summary
    listing = next(e.output for e in result.evidence if e.source.startswith("fit and health"))
    assert "0000:00:01.0: ACS unknown (extended config space not readable without root)" in listing


def test_acs_redirect_on_the_bridge_is_a_risk_with_the_iommu_in_passthrough(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bdfs = {"0000:18:00.0": "", "0000:28:00.0": ""}
    monkeypatch.setattr(gpu, "SYS_ROOT", _sysfs(tmp_path, bdfs, "identity", acs=0x001D))
    result = run_with(monkeypatch, make_nvml([FakeGpu(nvlinks=None, switch=False) for _ in range(2)]))
    assert result.facts["gpu.iommu"] == "passthrough"
    assert result.facts["gpu.pcie_p2p_risk"] is True
    listing = next(e.output for e in result.evidence if e.source.startswith("fit and health"))
    assert "ACSCtl SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+" in listing


def test_no_risk_on_nvswitch_or_when_p2p_is_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bdfs = {"0000:18:00.0": "", "0000:28:00.0": ""}
    monkeypatch.setattr(gpu, "SYS_ROOT", _sysfs(tmp_path, bdfs, "DMA", acs=0))
    nvswitch = run_with(monkeypatch, make_nvml([FakeGpu(), FakeGpu()]))
    assert nvswitch.facts["gpu.pcie_p2p_risk"] is False
    geforce = run_with(
        monkeypatch,
        make_nvml(
            [FakeGpu(nvlinks=None, switch=False) for _ in range(2)],
            p2p={(0, 1): pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED},
        ),
    )
    assert geforce.facts["gpu.p2p_status"] == "blocked"
    assert geforce.facts["gpu.pcie_p2p_risk"] is False  # NCCL will not use P2P there: no hang from it


def test_acs_capability_parsing() -> None:
    from probes import pcie

    assert pcie.acs_control(b"\0" * 64) is None  # unprivileged read: the extended space is cut off
    config = bytearray(4096)
    config[0x100:0x104] = (0x0001 | (1 << 16) | (0x140 << 20)).to_bytes(4, "little")  # AER, next 0x140
    config[0x140:0x144] = (0x000D | (1 << 16)).to_bytes(4, "little")  # ACS, last
    config[0x146:0x148] = (0x0004).to_bytes(2, "little")
    assert pcie.acs_control(bytes(config)) == 0x0004
    assert pcie.acs_control(bytes(4096)) == 0  # no extended capabilities at all
    assert pcie.nvml_bus_id_to_bdf("00000000:18:00.0") == "0000:18:00.0"
    assert pcie.nvml_bus_id_to_bdf("not a bus id") is None


def test_real_h100_run_of_the_new_facts(kb: object) -> None:
    """The new facts as the probes reported them on a lent H100 (tests/fixtures/gpu-h100)."""
    import json

    from tests.conftest import FIXTURES

    data = json.loads((FIXTURES / "gpu-h100" / "probe-new-facts.json").read_text())
    facts = {k: v for p in data["probes"] for k, v in p["facts"].items()}
    catalogue = kb.facts  # type: ignore[attr-defined]
    assert set(facts) <= set(catalogue)
    assert facts["gpu.compute_capability"] == "sm_90" and facts["gpu.arch_supported"] is True
    assert facts["gpu.hardware_errors"] is False and facts["gpu.iommu"] == "off"
    assert facts["versions.cuda_archs"] == ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert facts["versions.nccl_built"] is True and facts["versions.known_bad"] is False
    assert facts["env.container"] == "docker" and facts["env.shm_small"] is False
    check = (FIXTURES / "gpu-h100" / "new-facts-check.txt").read_text()
    assert "same: True" in check  # the arch list read from files equals torch.cuda.get_arch_list()
