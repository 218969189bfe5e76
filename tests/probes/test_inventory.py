"""The report's inventory: settings and rank variables from an environment (redacted), interfaces
from a /sys tree, driver and GPU models through NVML (the fake at the library boundary), and the
node comparison `triage report merge` makes."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pynvml
import pytest

from probes import inventory
from tests.conftest import result
from tests.probes.fake_nvml import FakeGpu, make_nvml
from triage.core.inventory import Inventory, differences, summarise_node

TOKEN = "hf_" + "x9" * 12


def test_settings_and_rank_variables_are_split_and_redacted() -> None:
    env = {
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_HCA": f"mlx5 {TOKEN}",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "OMP_NUM_THREADS": "8",
        "MASTER_ADDR": "10.1.1.1",
        "RANK": "3",
        "SLURM_NNODES": "2",
        "ACCELERATE_MIXED_PRECISION": "bf16",
        "HOME": "/root",
        "AWS_SECRET_ACCESS_KEY": "abc",
    }
    settings, ranks = inventory.split_environment(env)
    assert list(settings) == [
        "CUDA_VISIBLE_DEVICES",
        "NCCL_DEBUG",
        "NCCL_IB_HCA",
        "OMP_NUM_THREADS",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    ]
    assert TOKEN not in settings["NCCL_IB_HCA"] and settings["NCCL_IB_HCA"].startswith("mlx5 ")
    assert ranks == {
        "ACCELERATE_MIXED_PRECISION": "bf16",
        "MASTER_ADDR": "10.1.1.1",
        "RANK": "3",
        "SLURM_NNODES": "2",
    }


def test_interfaces_that_are_up_with_their_mtu(tmp_path: Path) -> None:
    for name, state, mtu in (
        ("eth0", "up", "9000"),
        ("ib0", "unknown", "2044"),
        ("lo", "unknown", "65536"),
        ("docker0", "down", "1500"),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "operstate").write_text(state + "\n")
        (tmp_path / name / "mtu").write_text(mtu + "\n")
    (tmp_path / "broken").mkdir()  # no files: skipped, not a crash
    assert inventory.interfaces(tmp_path) == {"eth0": 9000, "ib0": 2044}
    assert inventory.interfaces(tmp_path / "missing") == {}


def test_driver_and_gpus_through_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        sys.modules, "pynvml", make_nvml([FakeGpu(), FakeGpu(name="NVIDIA A100")], driver="535.1")
    )
    driver, _cuda, names, why = inventory.nvml_inventory()
    assert (driver, names, why) == ("535.1", ("NVIDIA H100 80GB HBM3", "NVIDIA A100"), "")
    monkeypatch.setitem(sys.modules, "pynvml", make_nvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    driver, _cuda, names, why = inventory.nvml_inventory()
    assert (driver, names) == ("", ())
    assert why.startswith("GPUs and driver: NVML did not start")


def test_collect_on_this_machine_says_what_it_could_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", make_nvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    found = inventory.collect(5.0, threading.Event(), env={"NCCL_DEBUG": "WARN"})
    assert found.settings == {"NCCL_DEBUG": "WARN"} and found.gpus == ()
    assert any(u.startswith("GPUs and driver") for u in found.unseen)
    assert found.system


def test_nodes_differ_in_driver_settings_and_versions() -> None:
    results = [result("versions", "ok", {"versions.torch": "2.4.0", "versions.python": "3.11.9"})]
    other = [result("versions", "ok", {"versions.torch": "2.5.1", "versions.python": "3.11.9"})]
    one = Inventory(
        driver="550.54", gpus=("H100",) * 8, settings={"NCCL_DEBUG": "INFO"}, rank_variables={"RANK": "0"}
    )
    two = Inventory(driver="535.10", gpus=("H100",) * 8, settings={}, rank_variables={"RANK": "8"})
    found = differences([summarise_node("a", "", results, one), summarise_node("b", "", other, two)])
    assert {(d.area, d.name): d.values for d in found} == {
        ("versions", "torch"): ("2.4.0", "2.5.1"),
        ("drivers", "driver"): ("550.54", "535.10"),
        ("settings", "NCCL_DEBUG"): ("INFO", "(unset)"),
    }  # RANK differs on every node by design: not flagged


def test_topology_comes_without_terminal_escapes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What `nvidia-smi topo -m` printed on a lent H100 (driver 580.159.04), header underlined."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\nprintf '\\t\\033[4mGPU0\\tCPU Affinity\\tNUMA Affinity\\tGPU NUMA ID\\033[0m\\n"
        "GPU0\\t X \\t0-15\\t0\\t\\tN/A\\n'\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    text, why = inventory.topology(5.0, threading.Event())
    assert why == ""
    assert "\x1b" not in text and text.splitlines()[0].split() == [
        "GPU0",
        "CPU",
        "Affinity",
        "NUMA",
        "Affinity",
        "GPU",
        "NUMA",
        "ID",
    ]
