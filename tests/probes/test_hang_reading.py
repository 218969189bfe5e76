"""What the hang probe reads beyond a rank's own stack: the rank an mp.spawn process was given (its
arguments, as py-spy --locals prints them) and the frames of a DataLoader worker that are its own."""

from __future__ import annotations

from probes.hang.pyspy import rank_argument
from probes.hang.workers import own_frames
from triage.core.hang.stacks import Frame

SCRIPT = "/job/train.py"
STDLIB = "/usr/lib/python3.11/"
DATA = "/venv/lib/python3.11/site-packages/torch/utils/data/"


def test_a_spawned_rank_is_read_from_its_arguments() -> None:
    def frame(name: str, file: str, **args: str) -> dict[str, object]:
        return {
            "name": name, "filename": file,
            "locals": [{"name": k, "arg": True, "repr": v} for k, v in args.items()],
        }  # fmt: skip

    wrap = frame("_wrap", "/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", i="3")
    user = frame("run", SCRIPT, rank="1", world_size="4")
    assert rank_argument([user, wrap]) == 3
    assert rank_argument([user, frame("run", STDLIB + "multiprocessing/process.py")]) == 1
    assert rank_argument([frame("run", SCRIPT, rank="'zero'")]) is None


def test_a_forked_worker_s_own_frames_stop_at_its_loop() -> None:
    forked = (Frame("_worker_loop", DATA + "_utils/worker.py", 374), Frame("main", SCRIPT, 9))
    stuck = (Frame("__getitem__", SCRIPT, 4), Frame("fetch", DATA + "_utils/fetch.py", 54), *forked)
    idle = (Frame("get", STDLIB + "multiprocessing/queues.py", 113), *forked)
    assert own_frames(stuck) == stuck[:2] and own_frames(idle) == idle[:1]
    assert own_frames((Frame("main", SCRIPT, 9),)) == ()  # a rank, not a worker
