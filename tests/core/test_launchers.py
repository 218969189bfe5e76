"""A rank's place in its job, read from torchrun's, SLURM's or MPI's variables."""

from __future__ import annotations

import pytest

from triage.core.launchers import LOCAL_WORLD_SIZE, RANK, WORLD_SIZE, first_int, under_launcher


@pytest.mark.parametrize(
    ("env", "rank", "world"),
    [
        ({"RANK": "3", "WORLD_SIZE": "8"}, 3, 8),
        ({"SLURM_PROCID": "5", "SLURM_NTASKS": "16"}, 5, 16),
        ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, 1, 2),
        ({"PMI_RANK": "0", "PMI_SIZE": "4"}, 0, 4),
        ({"RANK": "2", "SLURM_PROCID": "7", "WORLD_SIZE": "4"}, 2, 4),  # torchrun inside srun: torchrun's
    ],
)
def test_every_launcher_gives_rank_and_world(env: dict[str, str], rank: int, world: int) -> None:
    assert first_int(env, RANK) == rank and first_int(env, WORLD_SIZE) == world
    assert under_launcher(env)


def test_a_bare_python_has_no_launcher() -> None:
    assert not under_launcher({"RANK": "0"}) and not under_launcher({})
    assert first_int({"RANK": "x"}, RANK) is None


def test_slurm_per_node_counts_read_their_first_number() -> None:
    assert first_int({"SLURM_NTASKS_PER_NODE": "4(x2)"}, LOCAL_WORLD_SIZE) == 4
