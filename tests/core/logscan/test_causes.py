"""Which line is the cause and which rank failed first, on real output: a warning beside an error,
NCCL's result codes, NCCL's umbrella classes, DeepSpeed's launcher's exit reports, mp.spawn naming
the survivor, a world size the script hard-codes.

`spawn-survivor-reported.log` and `torchrun-world-size-hardcoded.log` are torch 2.13 CPU/gloo runs
(paths shortened); the other lines are copied from users' reports of the failures.
"""

from __future__ import annotations

from pathlib import Path

from triage.core.logscan.patterns import compile_signatures
from triage.core.logscan.scanner import Scanner
from triage.core.logscan.verdict import THRESHOLD, Verdict, decide
from triage.core.model import KnowledgeBase

DATA = Path(__file__).resolve().parent / "data"


def diagnose(kb: KnowledgeBase, text: str) -> tuple[Scanner, Verdict]:
    scanner = Scanner(compile_signatures(kb))
    scanner.feed_block(scanner.source("paste"), text.encode(), 1)
    return scanner, decide(scanner.scan, kb)


def ids(verdict: Verdict) -> list[str]:
    return [d.entry_id for d in verdict.diagnoses]


def found(kb: KnowledgeBase, lines: list[str]) -> list[str]:
    """The entries a paste of `lines` is diagnosed with, best first (it must find one)."""
    _, verdict = diagnose(kb, "\n".join(lines))
    assert verdict.found, ids(verdict)
    return ids(verdict)


def test_an_error_line_comes_before_the_warnings_that_led_to_it(kb: KnowledgeBase) -> None:
    """c10d's warnings (`[W socket.cpp]`) that it cannot connect, then its error that the name
    resolves to no address it can reach: the error names the failure (E13), the warnings only
    what led up to it, however often they repeat."""
    warning = (
        "[W socket.cpp:697] [c10d] The client socket has failed to connect to [::ffff:0.104.99.143]:47389"
        " (errno: 110 - Connection timed out)."
    )
    error = (
        "[E socket.cpp:753] [c10d] The client socket has failed to connect to any network address of"
        " (6841231, 47389)."
    )
    _, verdict = diagnose(kb, "\n".join([warning, warning, warning, error, warning, error]))
    assert ids(verdict)[0] == "E13", ids(verdict)
    assert "P1" in ids(verdict)
    # with no error line, the warnings are the cause
    assert found(kb, [warning, warning])[0] == "P1"


def test_store_timeout_warnings_decide_when_the_traceback_is_cut_off(kb: KnowledgeBase) -> None:
    lines = [
        "[W228 18:45:15.738941174 socket.cpp:462] [c10d] waitForInput: poll for socket SocketImpl(fd=11,"
        " addr=[xxxxx.com]:38674, remote=[::ffff:33.148.62.162]:23456) returned 0, likely a timeout",
        "[W228 18:45:15.741177013 socket.cpp:487] [c10d] waitForInput: socket SocketImpl(fd=11,"
        " addr=[xxxxxx.com]:38674, remote=[::ffff:33.148.62.162]:23456) timed out after 900000ms",
        "Traceback (most recent call last):",
        'File "/opt/conda/lib/python3.10/site-packages/torch/distributed/run.py", line 910, in run',
        "elastic_lau",
    ]
    assert found(kb, lines)[0] == "P1"


def test_nccl_result_codes_separate_a_socket_error_from_an_internal_one(kb: KnowledgeBase) -> None:
    """NCCL's proxy connect failing with res=3 (ncclInternalError) follows whatever failed before
    it (here the verbs call that could not pin memory, E18): no network interface problem (MN2 is
    res=2, ncclSystemError: a socket)."""
    internal = [
        "msm-h200-2:4016:4653 [7] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_create_cq failed with error"
        " Cannot allocate memory",
        "msm-h200-2:4016:4653 [7] NCCL INFO transport/net_ib.cc:659 -> 2",
        "msm-h200-2:4011:4650 [2] proxy.cc:1533 NCCL WARN [Service thread] Error encountered progressing"
        " operation=Connect, res=3, closing connection",
    ]
    _, verdict = diagnose(kb, "\n".join(internal))
    assert "MN2" not in ids(verdict), ids(verdict)
    assert ids(verdict)[0] == "E18"
    _, verdict = diagnose(kb, internal[2].replace("res=3", "res=2"))
    assert ids(verdict)[0] == "MN2", ids(verdict)


def test_invalid_usage_is_a_shared_gpu_unless_the_last_error_says_otherwise(kb: KnowledgeBase) -> None:
    head = [
        "RuntimeError: NCCL error in: /opt/conda/conda-bld/pytorch_1614378062065/work/torch/lib/c10d/"
        "ProcessGroupNCCL.cpp:825, invalid usage, NCCL version 2.7.8",
        "ncclInvalidUsage: This usually reflects invalid usage of NCCL library (such as too many async"
        " ops, too many collectives at once, mixing streams in a group, etc).",
    ]
    assert found(kb, head)[0] == "D3"
    # the umbrella gives way to the line after `Last error:` when that names another cause
    named = [*head, "Last error:", "Invalid config blocking attribute value -2147483648"]
    _, verdict = diagnose(kb, "\n".join(named))
    assert ids(verdict)[0] == "E16", ids(verdict)


def test_deepspeed_launcher_exit_report_names_the_worker(kb: KnowledgeBase) -> None:
    """DeepSpeed's launcher reports a worker's end with the worker's command line, which carries
    its local rank: a SIGKILL with no error of any worker is a process that vanished (X3)."""
    killed = [
        "[2023-04-14 13:11:27,879] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 13266",
        "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u',"
        " 'main.py', '--local_rank=0', '--data_path', 'Dahoas/rm-static', '--zero_stage', '2',"
        " '--deepspeed'] exits with return code = -9",
    ]
    scanner, verdict = diagnose(kb, "\n".join(killed))
    exits = [e for e in scanner.scan.events if e.kind == "exit"]
    assert [(e.rank, e.exit_code) for e in exits] == [(0, -9)]
    assert verdict.found and ids(verdict)[0] == "X3" and verdict.first_rank == 0, ids(verdict)
    # status 1 and no traceback of that worker anywhere: its own output is missing (P4)
    failed = killed[1].replace("--local_rank=0", "--local_rank=1").replace("= -9", "= 1")
    _, verdict = diagnose(kb, failed)
    assert ids(verdict)[0] == "P4" and verdict.first_rank == 1, ids(verdict)


def test_deepspeed_stopping_its_workers_with_no_error_is_a_vanished_worker(kb: KnowledgeBase) -> None:
    lines = [
        "[2023-04-07 13:08:55,469] [INFO] [utils.py:838:see_memory_usage] CPU Virtual Memory:  used ="
        " 28.43 GB, percent = 22.6%",
        "[2023-04-07 13:09:33,201] [INFO] [launch.py:318:sigkill_handler] Killing subprocess 80",
    ]
    assert found(kb, lines)[0] == "X3"
    # after a worker's own error, the launcher's teardown is only its echo
    error = (
        "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one."
    )
    _, verdict = diagnose(kb, "\n".join([error, *lines]))
    assert ids(verdict)[0] == "D8", ids(verdict)


def test_spawn_reporting_the_survivor_names_the_process_that_died(kb: KnowledgeBase) -> None:
    """Process 1 raised (a NaN loss) while process 0 waited in all_reduce; both died at once and
    mp.spawn printed process 0's traceback: `Connection closed by peer`, an echo. Process 1 failed
    first, though none of its own words are in the output."""
    _, verdict = diagnose(kb, (DATA / "spawn-survivor-reported.log").read_text())
    assert ids(verdict)[0] == "D20", ids(verdict)
    assert verdict.first is not None and verdict.first.rank == 0 and verdict.first.echo
    assert verdict.first_rank == 1
    assert verdict.suspect_ranks == [1] and verdict.waiting_ranks == [0]
    assert "process 1" in verdict.first_rank_reason


def test_spawn_reporting_the_process_that_failed_keeps_it(kb: KnowledgeBase) -> None:
    text = (DATA / "spawn-survivor-reported.log").read_text()
    own = text.replace("-- Process 0 terminated", "-- Process 1 terminated").replace(
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection"
        " closed by peer",
        "FloatingPointError: loss is nan at step 2 (",
    )
    _, verdict = diagnose(kb, own)
    assert verdict.first_rank == 1 and not verdict.first_rank_reason
    assert ids(verdict)[0] == "D20", ids(verdict)


def test_world_size_larger_than_the_processes_torchrun_started(kb: KnowledgeBase) -> None:
    """init_process_group(world_size=4) in a job torchrun started with two processes: gloo waits
    for rank 2's address, which nobody publishes. The launch contract (D1), not the network (P1)."""
    _, verdict = diagnose(kb, (DATA / "torchrun-world-size-hardcoded.log").read_text())
    assert ids(verdict)[0] == "D1", ids(verdict)
    assert verdict.first_rank == 1  # both fail alike; torchrun saw rank 1 first


def test_syncbatchnorm_outside_ddp_is_syncbatchnorm_usage(kb: KnowledgeBase) -> None:
    line = "AttributeError: SyncBatchNorm is only supported within torch.nn.parallel.DistributedDataParallel"
    _, verdict = diagnose(kb, line)
    assert ids(verdict)[:2] == ["D10", "E4"], ids(verdict)


def test_lightning_message_on_the_lines_below_its_exception(kb: KnowledgeBase) -> None:
    lines = [
        '  File "/home/bruce/anaconda3/envs/ln2/lib/python3.7/site-packages/pytorch_lightning/trainer/'
        'distrib_parts.py", line 533, in sanitize_gpu_ids',
        "    raise MisconfigurationException(message)",
        "pytorch_lightning.utilities.debugging.MisconfigurationException: ",
        "            You requested GPUs: [0]",
        "            But your machine only has: []",
    ]
    assert found(kb, lines)[0] == "E9"


def test_a_bare_cuda_error_belongs_to_the_rank_whose_process_group_ends(kb: KnowledgeBase) -> None:
    """A device-side assert prints no rank; ProcessGroupNCCL's destructor then names the rank."""
    lines = [
        "/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu:276: operator(): block: [0,0,0], thread:"
        ' [26,0,0] Assertion `idx_dim >= 0 && idx_dim < index_size && "index out of bounds"` failed.',
        "RuntimeError: CUDA error: device-side assert triggered",
        "terminate called after throwing an instance of 'c10::Error'",
        "  what():  NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:181, unhandled cuda error,"
        " NCCL version 21.0.3",
        "Process Group destroyed on rank 0",
    ]
    _, verdict = diagnose(kb, "\n".join(lines))
    assert ids(verdict)[0] == "P5" and verdict.first_rank == 0, (ids(verdict), verdict.first)
    _, unnamed = diagnose(kb, "\n".join(lines[:-1]))
    assert unnamed.first_rank is None


def test_a_traceback_cut_off_before_its_error_is_read_from_its_deepest_frames(kb: KnowledgeBase) -> None:
    """A paste that ends inside a traceback: the frames a signature knows say where it failed. With
    the error line there, the same frames are only context beside it."""
    frames = [
        "Traceback (most recent call last):",
        '  File "/home/u/.local/lib/python3.6/site-packages/torch/nn/modules/batchnorm.py", line 455, in forward',
        "    world_size = torch.distributed.get_world_size(process_group)",
        '  File "/home/u/.local/lib/python3.6/site-packages/torch/distributed/distributed_c10d.py", line 584,'
        " in get_world_size",
        "    return _get_group_size(group)",
        '  File "/home/u/.local/lib/python3.6/site-packages/torch/distributed/distributed_c10d.py", line 200,'
        " in _get_group_size",
        "    _check_default_pg()",
    ]
    assert found(kb, frames)[0] == "E4"
    error = "ValueError: Some value was out of range for this layer"
    scanner = Scanner(compile_signatures(kb))
    scanner.feed_block(scanner.source("paste"), "\n".join([*frames, error]).encode(), 1)
    verdict = decide(scanner.scan, kb, fallback=False)
    assert [(d.entry_id, d.score < THRESHOLD) for d in verdict.diagnoses] == [("E4", True)]


def test_torchrun_summary_alone_names_its_root_cause_rank(kb: KnowledgeBase) -> None:
    """torchrun lists the other failures above the root cause: when its summary is all the log
    has, the root cause is the first failing rank."""

    def block(rank: int, pid: int) -> list[str]:
        return [
            f"[{0 if rank == 0 else 1}]:",
            "  time      : 2024-12-31_16:45:52",
            "  host      : server",
            f"  rank      : {rank} (local_rank: {rank})",
            f"  exitcode  : -7 (pid: {pid})",
            "  error_file: <N/A>",
            f"  traceback : Signal 7 (SIGBUS) received by PID {pid}",
        ]

    summary = [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "tools/train_rec.py FAILED",
        "Failures:",
        *block(1, 467398),
        "Root Cause (first observed failure):",
        *block(0, 467397),
    ]
    _, verdict = diagnose(kb, "\n".join(summary))
    assert ids(verdict)[0] == "E3" and verdict.first_rank == 0, (ids(verdict), verdict.first)


def test_ddp_unused_parameter_report_names_its_rank(kb: KnowledgeBase) -> None:
    lines = [
        "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new"
        " one. This error indicates that your module has parameters that were not used in producing loss.",
        "Parameters which did not receive grad for rank 4: model.22.cv4.2.2.bias, model.22.cv4.2.2.weight",
    ]
    _, verdict = diagnose(kb, "\n".join(lines))
    assert ids(verdict)[0] == "D8" and verdict.first_rank == 4, (ids(verdict), verdict.first)


def test_spawn_reporting_a_rank_whose_peers_had_ended_well(kb: KnowledgeBase) -> None:
    """mp.spawn: rank 0 waits in a barrier only it calls; rank 1 ends its work and exits cleanly,
    so rank 0 loses its peer. mp.spawn had no process left to stop: the others ended well. Rank 0
    is the first (and only) failure, and the barrier nobody else called is the cause (D21)."""
    _, verdict = diagnose(kb, (DATA / "spawn-peer-left-barrier.log").read_text())
    assert ids(verdict)[0] == "D21", ids(verdict)
    assert verdict.first_rank == 0 and not verdict.first_rank_reason


def test_spawn_reporting_a_timeout_keeps_the_rank_that_gave_up(kb: KnowledgeBase) -> None:
    """A timeout is no lost peer: the rank mp.spawn reports timed out first (rank 1, in the barrier
    after its shorter loop)."""
    _, verdict = diagnose(kb, (DATA / "spawn-timeout-reported.log").read_text())
    assert verdict.first_rank == 1 and not verdict.first_rank_reason, (ids(verdict), verdict.first)


def test_a_rank_that_ended_while_another_waited_in_a_barrier_it_never_called(kb: KnowledgeBase) -> None:
    """torchrun --log-dir: rank 0 alone calls a barrier at the end; rank 1 prints `done` and exits,
    its teardown aborting (SIGABRT, `terminate called without an active exception`) with the group
    still alive. Rank 0 loses it inside the barrier: the barrier only one rank calls (D21), not a
    rank that died without a word (P4)."""
    root = DATA / "barrier-alone-log-dir"
    scanner = Scanner(compile_signatures(kb))
    for path in [root / "console.log", *sorted(root.glob("attempt_0/*/std*.log"))]:
        scanner.feed_block(scanner.source(str(path.relative_to(root))), path.read_bytes(), 1)
    verdict = decide(scanner.scan, kb)
    assert ids(verdict)[0] == "D21", ids(verdict)
    assert all(d.score < THRESHOLD for d in verdict.diagnoses if d.entry_id == "P4")
