"""What one failure reproduction is: its script, its launch, what it should show."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from triage.repro.settings import SETTINGS, Setting

HERE = Path(__file__).resolve().parent / "scripts"
# torch's CPU build segfaults (exit -11) when a DDP model is built under DETAIL: the run then shows
# a segfault (P6), not the failure the scenario is about.
_DDP_UNDER_DETAIL = {
    "debug-detail": "this torch build segfaults building DDP under TORCH_DISTRIBUTED_DEBUG=DETAIL"
}


@dataclass(frozen=True)
class Scenario:
    """A reproduction: the script, how to launch it, and what it should show."""

    id: str  # the scenario's name on the command line (the entry it reproduces, mostly)
    title: str
    script: str  # file in this package
    expect: str  # the entry `triage log` must rank first on its output
    first_rank: int | None  # the rank that fails first (None: no rank, e.g. a launcher error)
    # "torchrun" | "launch" (the deprecated `python -m torch.distributed.launch`) | "python" | "two-jobs"
    # | "shell" (one `python` per rank with RANK, WORLD_SIZE, MASTER_ADDR... exported, as a shell loop does)
    # | "accelerate" (`accelerate launch --multi_gpu` with no config file)
    launch: str = "torchrun"
    bound_s: float = 60.0  # hard wall-clock limit for the whole run
    env: dict[str, str] = field(default_factory=dict)
    torchrun_args: tuple[str, ...] = ()
    also: tuple[str, ...] = ()  # entries that should appear among the next diagnoses
    # settings (triage.repro.settings) this scenario is not run in, and why
    skip: dict[str, str] = field(default_factory=dict)
    # Python modules the script needs beyond torch (module -> why)
    needs: dict[str, str] = field(default_factory=dict)
    # False when the launcher itself fails before it starts any worker: no rank exists to name
    workers_start: bool = True
    # launch="python" scripts that start their ranks with torch.multiprocessing.spawn
    spawns_ranks: bool = False
    # True when the job is stopped from outside (a signal to the launcher): no rank fails first
    stopped_from_outside: bool = False

    @property
    def path(self) -> Path:
        return HERE / self.script

    @property
    def torchrun(self) -> bool:
        """Whether torchrun (or the deprecated launcher) starts the job, so its options apply."""
        return self.launch in ("torchrun", "launch", "two-jobs")

    @property
    def ranked(self) -> bool:
        """Whether a launcher starts the job's ranks (so a diagnosis can name the one that failed)."""
        return (
            (self.launch in ("torchrun", "launch", "shell", "accelerate") or self.spawns_ranks)
            and self.workers_start
            and not self.stopped_from_outside
        )

    def missing(self) -> list[str]:
        """The modules this scenario needs that cannot be imported here, each with why it is needed."""
        import importlib.util

        return [
            f"{name} ({why})" for name, why in self.needs.items() if importlib.util.find_spec(name) is None
        ]

    def settings(self) -> tuple[Setting, ...]:
        """The settings this scenario runs in: torchrun's own options need torchrun."""
        found = []
        for item in SETTINGS:
            if item.name in self.skip:
                continue
            if not self.torchrun and (item.torchrun_args or item.log_dir):
                continue
            found.append(item)
        return tuple(found)
