"""Where a process stands in its job, read from the variables its launcher set.

torchrun, SLURM's srun and MPI launchers (Open MPI, MPICH/PMI) name the same things differently;
each tuple lists the variables for one quantity, most common first. The probes that need a rank's
place (the environment probe, the dist mini-test's workers, `triage hang` finding the ranks of a
running job) and the script linter (which rank a script's `os.environ[...]` reads) take the names
from here, so a launcher added once is understood everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping

RANK = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
WORLD_SIZE = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
LOCAL_RANK = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
LOCAL_WORLD_SIZE = ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE")
NODE_RANK = ("GROUP_RANK", "NODE_RANK", "SLURM_NODEID")


def first_int(env: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    """The value of the first of `names` that holds a non-negative integer. SLURM writes some
    counts per node as `4(x2)` or `4,2`; the first number is taken."""
    for name in names:
        head = env.get(name, "").strip().split("(")[0].split(",")[0]
        if head.isdigit():
            return int(head)
    return None


def under_launcher(env: Mapping[str, str]) -> bool:
    """Whether a launcher gave this process a rank and a world size."""
    return first_int(env, RANK) is not None and first_int(env, WORLD_SIZE) is not None
