"""Which launcher a process is, from its command line as /proc shows it: every launcher's shapes."""

from __future__ import annotations

import pytest

from probes.hang.discover import launcher_name


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (("/venv/bin/python", "/venv/bin/torchrun", "--nproc-per-node=8", "train.py"), "torchrun"),
        (("torchrun", "--nnodes=2", "train.py"), "torchrun"),
        (("python", "-m", "torch.distributed.run", "--nproc-per-node=2", "train.py"), "torchrun"),
        (("python3", "-m", "torch.distributed.launch", "--use-env", "train.py"), "torchrun"),
        (
            ("/venv/bin/python", "/venv/bin/accelerate", "launch", "--multi_gpu", "train.py"),
            "accelerate launch",
        ),
        (
            ("python", "-m", "accelerate.commands.launch", "--num_processes=2", "train.py"),
            "accelerate launch",
        ),
        (("/venv/bin/python", "/venv/bin/deepspeed", "--num_gpus=8", "train.py"), "deepspeed"),
        (("python", "-u", "-m", "deepspeed.launcher.launch", "--world_info=e30=", "train.py"), "deepspeed"),
        (("srun", "-N", "2", "python", "train.py"), "srun"),
        (("mpirun", "-np", "8", "python", "train.py"), "mpirun"),
    ],
)
def test_each_launcher_is_recognised_from_its_command_line(argv: tuple[str, ...], name: str) -> None:
    assert launcher_name(argv) == name


@pytest.mark.parametrize(
    "argv",
    [
        ("python", "train.py", "--launcher", "torchrun"),
        ("python", "-u", "train.py"),
        ("/venv/bin/python", "/venv/bin/accelerate", "config"),
        (),
    ],
)
def test_a_rank_or_another_command_is_not_a_launcher(argv: tuple[str, ...]) -> None:
    assert launcher_name(argv) is None
