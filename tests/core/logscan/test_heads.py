"""Patterns read from the top of a paste: torchrun's launch configuration, tracebacks of several
processes glued together, the same lines printed once per rank. The texts are the real shapes
torchrun and Python print (torchrun's INFO configuration block, unprefixed concurrent tracebacks).
"""

from __future__ import annotations

from triage.core.logscan.heads import from_heads

CONFIG = """\
[2024-04-18 10:41:06,648] torch.distributed.launcher.api: [INFO] Starting elastic_operator with launch configs:
[2024-04-18 10:41:06,648] torch.distributed.launcher.api: [INFO]   entrypoint       : multinode.py
[2024-04-18 10:41:06,648] torch.distributed.launcher.api: [INFO]   min_nodes        : {nodes}
[2024-04-18 10:41:06,648] torch.distributed.launcher.api: [INFO]   max_nodes        : {nodes}
[2024-04-18 10:41:06,648] torch.distributed.launcher.api: [INFO]   nproc_per_node   : 4
[2024-04-18 10:41:06,648] torch.distributed.launcher.api: [INFO]   rdzv_backend     : c10d
[2024-04-18 10:41:06,648] torch.distributed.launcher.api: [INFO]   rdzv_endpoint    : {endpoint}
"""


def ids(text: str) -> list[str]:
    return [item.entry_id for item in from_heads([text])]


def test_several_nodes_meeting_on_localhost_is_a_single_node_launch_repeated() -> None:
    assert ids(CONFIG.format(nodes=2, endpoint="localhost:10010")) == ["D2"]
    assert ids(CONFIG.format(nodes=2, endpoint="10.0.0.5:29400")) == []
    assert ids(CONFIG.format(nodes=1, endpoint="localhost:29400")) == []


GLUED = """\
    torch.distributed.init_process_group(backend,  File "/opt/venv/lib/python3.9/site-packages/torch/distributed/distributed_c10d.py", line 895, in init_process_group

    torch.distributed.init_process_group(backend,  File "/opt/venv/lib/python3.9/site-packages/torch/distributed/distributed_c10d.py", line 895, in init_process_group
  File "/opt/venv/lib/python3.9/site-packages/torch/distributed/distributed_c10d.py", line 1009, in _new_process_group_helper
"""


def test_frames_glued_behind_other_output_are_mixed_tracebacks() -> None:
    assert ids(GLUED) == ["P4"]


def test_rank_prefixes_in_front_of_frames_are_not_glue() -> None:
    dump = "\n".join(
        f'[rank{r}]:  File "/usr/lib/python3.11/threading.py", line 324 in wait' for r in range(4)
    )
    assert "P4" not in ids(dump)


def test_every_rank_quoting_the_same_line_in_its_traceback_is_not_duplicated_output() -> None:
    traceback = "".join(
        f'[rank{r}]: Traceback (most recent call last):\n[rank{r}]:   File "train.py", line 3, in <module>\n'
        f'[rank{r}]:     dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))\n'
        f"[rank{r}]: ValueError: trying to initialize the default process group twice!\n"
        for r in range(2)
    )
    assert ids(traceback) == []
    progress = "".join(f"[rank{r}]: epoch 1 step 100 loss 0.2345 lr 0.001\n" for r in range(2)) * 2
    progress += "".join(f"[rank{r}]: epoch 1 step 200 loss 0.1234 lr 0.001\n" for r in range(2))
    assert ids(progress) == ["D23"]


LIGHTNING = "GPU available: True, used: True\nTPU available: False, using: 0 TPU cores\n"


def test_members_that_never_announce_themselves_were_never_launched() -> None:
    """Lightning's `initializing ddp` lines for ranks 0-3 of 8, then nothing: the other node's
    processes never started (a finding only in a log where nothing failed)."""
    members = "".join(f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8\n" for r in (1, 2, 0, 3))
    assert [i.entry_id for i in from_heads([LIGHTNING + members], quiet=True)] == ["P3"]
    assert from_heads([LIGHTNING + members], quiet=False) == []
    every = "".join(f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4\n" for r in range(4))
    assert from_heads([LIGHTNING + every], quiet=True) == []


def test_nccl_tests_header_twice_is_each_process_running_alone() -> None:
    """nccl-tests started by mpirun on two hosts but built without MPI: each process runs the
    whole test on its own GPUs and prints the job's header."""
    header = (
        "# nThread 1 nGpus 8 minBytes 1073741824 maxBytes 8589934592 step: 2(factor) warmup iters: 5"
        " iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n"
    )
    assert ids(header) == []
    assert ids(header * 2) == ["D2"]


def test_every_process_printing_its_import_warning_is_not_every_rank_printing() -> None:
    """torch 2.13 on a host without NumPy (real output of the reproductions): each of the three
    processes prints the same UserWarning and the source line it quotes. Warnings are printed once
    per process whoever prints progress: not D23's duplicated output."""
    warning = (
        "/work/main/.venv/lib/python3.11/site-packages/torch/_subclasses/functional_tensor.py:368: UserWarning:"
        " Failed to initialize NumPy: No module named 'numpy' (Triggered internally at"
        " /__w/pytorch/pytorch/torch/csrc/utils/tensor_numpy.cpp:84.)\n"
        '  cpu = _conversion_method_template(device=torch.device("cpu"))\n'
    )
    text = warning * 3 + "rank 0 step 0 loss 0.3125\nrank 1 step 0 loss 0.3814\n"
    assert [i.entry_id for i in from_heads([text], quiet=True)] == []


# Ray's deduplicated output of a vLLM job whose every data-parallel worker printed its progress bar
# (a user's paste: each progress line had been printed by several workers).
RAY_FOLDED = """\
Processed prompts:   0%|          | 0/4 [00:00<?, ?it/s, est. speed input: 0.00 toks/s, output: 0.00 toks/s] [repeated 7x across cluster]
Processed prompts:  25%|██▌       | 1/4 [00:14<00:43, 14.53s/it, est. speed input: 15.14 toks/s, output: 221.23 toks/s] [repeated 3x across cluster]
Processed prompts:  50%|█████     | 2/4 [00:22<00:23, 11.99s/it, est. speed input: 14.81 toks/s, output: 299.95 toks/s] [repeated 2x across cluster]
Processed prompts: 100%|██████████| 4/4 [00:35<00:00,  8.89s/it, est. speed input: 27.27 toks/s, output: 577.98 toks/s]
"""


def test_lines_ray_folded_from_several_workers_are_duplicated_output() -> None:
    assert ids(RAY_FOLDED) == ["D23"]
    unfolded = "\n".join(line.split(" [repeated")[0] for line in RAY_FOLDED.splitlines())
    assert ids(unfolded) == []


# Two ranks' tracebacks as `torchrun --tee 3` prints them when both fail at once (eval/runs,
# tee_all_ranks_raise.py): lines of the two blocks alternate.
_RANK0 = [
    "[default0]:[rank0]: Traceback (most recent call last):",
    '[default0]:[rank0]:   File "/work/train.py", line 32, in <module>',
    "[default0]:[rank0]:     main()",
    '[default0]:[rank0]:   File "/work/train.py", line 18, in schedule',
    '[default0]:[rank0]:     return min(1.0, step / CONFIG["warmup_steps"])',
    "[default0]:[rank0]: TypeError: unsupported operand type(s) for /: 'int' and 'str'",
]
_RANK1 = [line.replace("default0]:[rank0", "default1]:[rank1") for line in _RANK0]


def test_tracebacks_of_ranks_alternating_line_by_line_are_interleaved() -> None:
    mixed = [line for pair in zip(_RANK0, _RANK1, strict=True) for line in pair]
    assert ids("\n".join(mixed)) == ["P4"]
    assert ids("\n".join(_RANK0 + _RANK1)) == []  # one whole traceback after the other
    # a rank's progress line between two tracebacks is not a traceback line
    assert ids("\n".join([*_RANK0, "[default1]:[rank1]: step 3 loss 0.5", *_RANK1])) == []


def _bars(totals: dict[int, int]) -> str:
    """Progress bars as a rank-prefixed print redraws them with a carriage return."""
    return "".join(
        f"\r[rank{rank}] eval |{'#' * (5 * i)}| {i}/{total} acc=0.375"
        for i in range(1, 4)
        for rank, total in totals.items()
        if i <= total
    )


def test_progress_counting_to_different_totals_per_rank_is_uneven_data() -> None:
    assert ids(_bars({0: 3, 1: 4})) == ["D9"]
    assert "D9" not in ids(_bars({0: 3, 1: 3}))  # (every rank printing the same lines is D23's)
    assert ids("rank 0 batch 1/3 loss 0.1\nrank 1 batch 1/2 loss 0.2\nrank 1 batch 2/2") == ["D9"]
    # a log where nothing failed: progress alone is no failure to explain
    assert [i.entry_id for i in from_heads([_bars({0: 3, 1: 4})], quiet=True)] == []
    # the same counter's total changing within one rank (a new epoch's length) is not compared
    assert "D9" not in ids("rank 0 step 1/3\nrank 0 step 1/4\nrank 1 step 1/4")
