"""The gpu probe on realistic NVML answers (a fake pynvml, since CI has no GPU) and on this machine."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pynvml
import pytest

from probes import gpu
from tests.probes.fake_nvml import GIB, FakeGpu, make_nvml
from triage.core.facts import ProbeOptions


def run_with(monkeypatch: pytest.MonkeyPatch, module: object) -> gpu.ProbeResult:
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
    state, proof = gpu.fabricmanager_state(2.0, threading.Event())
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
    gpus = gpu.parse_smi(SMI_GPUS, SMI_APPS)
    assert [g.index for g in gpus] == [0, 1, 2]
    assert gpus[0].memory_used == 45012 << 20 and gpus[0].util_gpu == 99
    assert [p.pid for p in gpus[0].processes] == [4242, 4243] and not gpus[1].processes
    assert gpus[2].memory_used is None and gpus[2].util_gpu is None
    facts = gpu.facts_from_gpus(gpus)
    assert facts["gpu.all_ranks_on_gpu0"] is True
    assert "gpu.zombie_memory" not in facts  # GPU 2 cannot say: the probe does not guess
    assert "gpu.nvswitch" not in facts
