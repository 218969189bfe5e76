"""The configurations a reproduction runs in: the ways users actually run and collect a job.

The same failure prints different lines depending on how the job was launched and how its output
was collected: debug variables add lines (and sometimes change the error itself), torchrun's
`--tee` puts a rank prefix on every worker line, `--log-dir` splits the output into one file per
rank, and log collectors put a timestamp in front of every line. A signature written from one
configuration's output only is a guess about the others, so each reproduction runs in several.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Setting:
    """A named set of environment variables a reproduction can run with."""

    name: str
    title: str
    env: dict[str, str] = field(default_factory=dict)
    torchrun_args: tuple[str, ...] = ()
    # The collector puts its own arrival time in front of every line (`kubectl logs --timestamps`).
    timestamps: bool = False
    # torchrun `--redirects 3 --log-dir DIR`: the workers' output goes to one file per rank, and the
    # diagnosis reads those files next to the launcher's console output.
    log_dir: bool = False


DEFAULT = Setting("default", "as launched, console output")
SETTINGS: tuple[Setting, ...] = (
    DEFAULT,
    Setting("debug-info", "TORCH_DISTRIBUTED_DEBUG=INFO", env={"TORCH_DISTRIBUTED_DEBUG": "INFO"}),
    Setting("debug-detail", "TORCH_DISTRIBUTED_DEBUG=DETAIL", env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}),
    Setting("cpp-info", "TORCH_CPP_LOG_LEVEL=INFO", env={"TORCH_CPP_LOG_LEVEL": "INFO"}),
    Setting("loglevel-debug", "LOGLEVEL=DEBUG (torchrun's own logger)", env={"LOGLEVEL": "DEBUG"}),
    Setting("tee", "torchrun --tee 3 (rank prefix on every worker line)", torchrun_args=("--tee", "3")),
    Setting("log-dir", "torchrun --redirects 3 --log-dir (one file per rank)", log_dir=True),
    Setting("timestamps", "a collector's timestamp on every line", timestamps=True),
)


def setting(name: str) -> Setting | None:
    """The setting called `name`, or None."""
    for item in SETTINGS:
        if item.name == name:
            return item
    return None
