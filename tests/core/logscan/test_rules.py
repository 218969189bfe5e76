"""The consequence rules and the patterns across ranks, on real output.

`nccl-*.log` were captured on one H100 under torch 2.11 / NCCL 2.28 (a kernel holding the GPU past
a 5 s collective timeout, NCCL_SOCKET_IFNAME naming no interface, two ranks on one GPU); the
`repro-*` files and `spawn-exit-status.log` are the reproductions' output under torch 2.13
CPU/gloo; `fsdp-rank-skips-step.log` is a 2-rank FSDP run on gloo in which rank 1 skips a step.
"""

from __future__ import annotations

from pathlib import Path

from triage.core import matcher
from triage.core.logscan.blocks import canonical_collective, mismatch
from triage.core.logscan.ordering import order_events
from triage.core.logscan.patterns import compile_signatures
from triage.core.logscan.scanner import Scanner
from triage.core.logscan.verdict import ECHO_FACTOR, Verdict, decide, fallback_text
from triage.core.model import KnowledgeBase

DATA = Path(__file__).resolve().parent / "data"


def scan(kb: KnowledgeBase, *texts: tuple[str, str]) -> tuple[Scanner, Verdict]:
    scanner = Scanner(compile_signatures(kb))
    for name, text in texts:
        scanner.feed_block(scanner.source(name), text.encode(), 1)
    return scanner, decide(scanner.scan, kb)


def read(name: str) -> tuple[str, str]:
    return name, (DATA / name).read_text()


def test_one_name_per_collective() -> None:
    names = [
        "all_reduce",
        "allreduce",
        "ALLREDUCE",
        "_ALLREDUCE_BASE",
        "all_gather_into_tensor",
        "_REDUCE_SCATTER_BASE",
    ]
    assert [canonical_collective(n) for n in names] == [
        "all_reduce",
        "all_reduce",
        "all_reduce",
        "all_reduce",
        "all_gather",
        "reduce_scatter",
    ]
    assert canonical_collective("main") is None


def test_ranks_blocked_in_different_collectives_are_a_mismatch(kb: KnowledgeBase) -> None:
    scanner, verdict = scan(kb, read("repro-D21.log"))
    waits = scanner.scan.ranks.waits
    assert {rank: w.collective for rank, w in waits.items()} == {0: "all_reduce", 1: "barrier"}
    assert waits[0].where.startswith("train_rank0_collective.py:22")
    assert waits[1].where.startswith("train_rank0_collective.py:24")
    assert mismatch(waits) is not None
    best = verdict.diagnoses[0]
    assert best.entry_id == "D21"
    assert "rank 0 waits in all_reduce" in best.reason and "rank 1 waits in barrier" in best.reason


def test_a_diverged_rank_is_no_mismatch(kb: KnowledgeBase) -> None:
    """Rank 1 raised outside any collective; only rank 0 is blocked (in backward)."""
    scanner, verdict = scan(kb, read("repro-D20.log"))
    assert {rank: w.collective for rank, w in scanner.scan.ranks.waits.items()} == {0: "backward"}
    assert verdict.diagnoses[0].entry_id == "D20"
    assert "D21" not in [d.entry_id for d in verdict.diagnoses]


def test_a_rank_raising_in_its_own_code_inside_backward_is_not_waiting(kb: KnowledgeBase) -> None:
    """Rank 1's custom autograd Function raised inside loss.backward() (its own frame is the
    innermost); rank 0 is blocked in backward, in DDP's gradient all-reduce. Both tracebacks pass
    through backward from the same line, yet only rank 0 waits there: no mismatch, rank 1 diverged."""
    scanner, verdict = scan(kb, read("repro-D20-backward.log"))
    assert {rank: w.collective for rank, w in scanner.scan.ranks.waits.items()} == {0: "backward"}
    assert [d.entry_id for d in verdict.diagnoses][:1] == ["D20"]
    assert verdict.first_rank == 1
    assert "D21" not in [d.entry_id for d in verdict.diagnoses]


def test_mp_spawn_reporting_an_exit_status_is_a_missing_traceback(kb: KnowledgeBase) -> None:
    """Process 1 called sys.exit(3) with nothing printed; the only traceback is mp.spawn's own,
    which passes through the user's main() to report the exit: it is not the worker's."""
    _, verdict = scan(kb, read("spawn-exit-status.log"))
    assert verdict.diagnoses[0].entry_id == "P4"
    assert verdict.first_rank == 1


def test_what_follows_a_watchdog_timeout_echoes_it(kb: KnowledgeBase) -> None:
    """The FlightRecorder hint, 'taking the entire process down', the C++ terminate and the
    SIGABRT exit all come after the timeout on the same rank: the timeout is the story."""
    scanner, verdict = scan(kb, read("nccl-watchdog-timeout.log"))
    assert verdict.diagnoses[0].entry_id == "MN3"
    assert verdict.first is not None and "Watchdog caught collective operation timeout" in verdict.first.text
    assert verdict.first_rank == 0
    events, _ = order_events(scanner.scan)
    terminate = [e for e in events if e.kind == "terminate" or "what():" in e.text]
    assert terminate, "the terminate/what() block is read"
    assert "P6" not in [d.entry_id for d in verdict.diagnoses[:1]]


def test_nccl_umbrella_error_routes_on_its_last_error_line(kb: KnowledgeBase) -> None:
    """`ncclInvalidUsage` says only which kind of call failed; `Last error:` and the NCCL WARN
    name the cause (no socket interface: the NIC setting, MN2)."""
    scanner, verdict = scan(kb, read("nccl-last-error.log"))
    assert verdict.diagnoses[0].entry_id == "MN2"
    assert verdict.first_rank == 0
    umbrella = [e for e in scanner.scan.events if e.role == "umbrella"]
    assert all(e.entry_id != "MN2" or "no socket interface" in e.text for e in umbrella)


def test_nccl_warn_and_last_error_lines_become_events(kb: KnowledgeBase) -> None:
    text = (
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: NCCLUtils.cpp:93, unhandled system error\n"
        "[rank0]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
        "[rank0]: Last error:\n"
        "[rank0]: socketPollConnect: connect returned Connection refused, exceeded error retry count (35)\n"
        "host1:2049:2049 [1] misc/socket.cc:584 NCCL WARN unknown-thing happened on the proxy\n"
    )
    scanner, _ = scan(kb, ("x.log", text))
    kinds = {(e.kind, e.rank) for e in scanner.scan.events}
    assert ("detail", 0) in kinds
    assert ("warn", 1) in kinds
    detail = next(e for e in scanner.scan.events if e.kind == "detail")
    assert detail.text.startswith("socketPollConnect: connect returned Connection refused")
    assert "socketPollConnect" in fallback_text(scanner.scan, scanner.scan.events)


def test_grep_and_python_engines_read_the_line_after_last_error(kb: KnowledgeBase, tmp_path: Path) -> None:
    from triage.core.logscan.reading import scan_grep

    name, text = read("nccl-last-error.log")
    path = tmp_path / name
    path.write_text(text)
    signatures = compile_signatures(kb)
    python = Scanner(signatures)
    python.feed_block(python.source(name), text.encode(), 1)
    grep = Scanner(signatures)
    with path.open("rb") as stream:
        scan_grep(grep, grep.source(name), name, stream, 1 << 20, signatures.anchors)

    def seen(s: Scanner) -> list[tuple[int, str, str]]:
        return [(e.line, e.kind, e.entry_id) for e in s.scan.events]

    assert seen(python) == seen(grep)
    assert any("no socket interface found" in e.text for e in grep.scan.events if e.line > 1)


def test_an_abort_after_a_ranks_own_error_is_its_echo(kb: KnowledgeBase) -> None:
    """Under --tee 3, rank 1's FloatingPointError is followed by `terminate called without an
    active exception` and a SIGABRT exit: the first failure stays the exception."""
    _, verdict = scan(kb, read("repro-D20-tee.log"))
    assert verdict.first is not None and "FloatingPointError" in verdict.first.text
    assert verdict.first_rank == 1
    assert verdict.diagnoses[0].entry_id == "D20"


def test_one_rank_failing_alone_is_not_a_diverged_rank(kb: KnowledgeBase) -> None:
    """D20 needs another rank's echo: torchrun stopping the other worker is not one."""
    text = (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "train.py", line 12, in <module>\n'
        "[rank1]: FileNotFoundError: [Errno 2] No such file or directory: 'data/shard-0001.arrow'\n"
        "W1122 04:23:38.283000 27487 torch/distributed/elastic/multiprocessing/api.py:1028] "
        "Sending process 27548 closing signal SIGTERM\n"
        "E1122 04:23:38.351000 27487 torch/distributed/elastic/multiprocessing/api.py:1002] "
        "failed (exitcode: 1) local_rank: 1 (pid: 27549) of binary: /usr/bin/python\n"
    )
    _, verdict = scan(kb, ("one.log", text))
    assert verdict.first_rank == 1
    assert "D20" not in [d.entry_id for d in verdict.diagnoses if d.score >= 0.4]


def test_a_rank_exiting_with_no_output_of_its_own_misses_its_traceback(kb: KnowledgeBase) -> None:
    """Only torchrun's side of a failure pasted: rank 0 exited 1 and its traceback is not there (P4)."""
    name, text = read("nccl-last-error.log")
    launcher_only = "\n".join(line for line in text.splitlines() if not line.startswith(("[rank0]", "[2026")))
    _, verdict = scan(kb, (name, launcher_only))
    assert verdict.first is not None and verdict.first.kind == "exit"
    assert verdict.first_rank == 0
    assert verdict.diagnoses[0].entry_id == "P4"


def test_frames_are_context_never_the_cause(kb: KnowledgeBase) -> None:
    """FSDP's `_all_gather_flat_param` frame names where rank 0 waited (D12's signature matches
    it), not why: the cause is rank 1 leaving, which rank 0's `Connection closed` echoes."""
    scanner, verdict = scan(kb, read("fsdp-rank-skips-step.log"))
    frames = [e for e in scanner.scan.events if e.kind == "hit" and e.entry_id == "D12"]
    assert frames and all(e.role == "frame" for e in frames)
    assert verdict.diagnoses[0].entry_id != "D12"
    d12 = [d for d in verdict.diagnoses if d.entry_id == "D12"]
    assert not d12 or d12[0].score < 0.4


def test_launcher_reports_come_after_the_rank_files_without_a_clock(kb: KnowledgeBase) -> None:
    """--log-dir: the console's summary names rank 1 (SIGTERM) before rank 0's own file is read."""
    root = DATA / "repro-MN3-log-dir"
    files = [root / "console.log", *sorted(root.glob("attempt_0/*/std*.log"))]
    _, verdict = scan(kb, *((str(p.relative_to(root)), p.read_text()) for p in files))
    assert verdict.ordered_by == "position"
    assert verdict.first_rank == 0
    assert verdict.diagnoses[0].entry_id == "MN3"


def test_no_signature_falls_back_to_the_query_engine(kb: KnowledgeBase) -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 40, in <module>\n'
        "RuntimeError: DDP hangs at the end of the epoch: one rank ran out of batches, uneven inputs\n"
    )
    scanner, verdict = scan(kb, ("fb.log", text))
    assert not any(e.kind == "hit" and not e.echo and e.weight >= 0.5 for e in scanner.scan.events)
    expected = matcher.rank(kb, fallback_text(scanner.scan, scanner.scan.events), top=3)
    assert expected.verdict == "match" and expected.best is not None
    assert verdict.found and verdict.by_query_engine
    assert verdict.diagnoses[0].entry_id == expected.best.entry.id


# Short excerpts of real pasted output (public threads, quoted as posted).


def test_two_ranks_on_one_gpu_from_nccls_comm_lines(kb: KnowledgeBase) -> None:
    """pytorch/examples#1279: both ranks report the same busId on the same host."""
    text = (
        "d-9-11-1:2870757:2870757 [0] NCCL INFO comm 0x560c6a8aafd0 rank 0 nranks 2 cudaDev 0 busId 86000 - Abort COMPLETE\n"
        "d-9-11-1:2870756:2870756 [0] NCCL INFO comm 0x55592676f080 rank 1 nranks 2 cudaDev 0 busId 86000 - Abort COMPLETE\n"
    )
    scanner, verdict = scan(kb, ("x.log", text))
    assert scanner.scan.gpus == {("d-9-11-1", "86000"): {0, 1}}
    assert verdict.diagnoses[0].entry_id == "D3"
    assert "busId 86000" in verdict.diagnoses[0].reason


def test_spawn_names_the_process_whose_traceback_follows(kb: KnowledgeBase) -> None:
    """accelerate#182: mp.spawn prints `-- Process 1 terminated with the following error:`."""
    text = (
        "-- Process 1 terminated with the following error:\n"
        "Traceback (most recent call last):\n"
        '  File "/envs/cups/lib/python3.7/site-packages/torch/multiprocessing/spawn.py", line 59, in _wrap\n'
        "    fn(i, *args)\n"
        "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing,"
        " you must use the 'spawn' start method\n"
    )
    _, verdict = scan(kb, ("x.log", text))
    assert verdict.first is not None and "Cannot re-initialize CUDA" in verdict.first.text
    assert verdict.first_rank == 1


def test_an_error_line_leads_a_warning_line_of_the_same_failure(kb: KnowledgeBase) -> None:
    """vllm#7074: rank 9 warns (W) that gloo fell back to loopback, rank 8 fails (E): rank 8's
    error is the first failure, though the warning came first."""
    text = (
        "(RayWorkerWrapper pid=1978, ip=10.41.0.8) [rank9]:[W ProcessGroupGloo.cpp:721] **Warning: Unable to "
        "resolve hostname to a (local) address. Using the loopback address as fallback. Manually set the network "
        "interface to bind to with** GLOO_SOCKET_IFNAME. (function operator())\n"
        "(RayWorkerWrapper pid=1890, ip=10.41.0.8) [rank8]:[E ProcessGroupGloo.cpp:144] Gloo connectFullMesh "
        "failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error\n"
    )
    scanner, verdict = scan(kb, ("x.log", text))
    assert any(e.role == "warning" and e.rank == 9 for e in scanner.scan.events)
    assert verdict.first_rank == 8


def test_two_processes_announcing_one_rank_is_a_single_node_launch_repeated(kb: KnowledgeBase) -> None:
    """NeMo on two SLURM nodes (srun --label): each node numbers its processes from 1 again."""
    text = (
        "0: Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/8\n"
        "0: Initializing distributed: GLOBAL_RANK: 3, MEMBER: 4/8\n"
        "1: Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/8\n"
        "1: Initializing distributed: GLOBAL_RANK: 3, MEMBER: 4/8\n"
    )
    _, verdict = scan(kb, ("x.log", text))
    assert verdict.diagnoses[0].entry_id == "D2"


def test_every_rank_printing_the_same_progress_lines(kb: KnowledgeBase) -> None:
    """A Lightning job whose every process prints the progress bar (each line once per rank)."""
    text = (
        "Epoch 0: : 2it [00:47, 23.73s/it, loss=0.178, v_num=11, train_loss=0.178]\n"
        "Epoch 0: : 2it [00:47, 23.73s/it, loss=0.178, v_num=11, train_loss=0.178]\n"
        "Epoch 0: : 3it [00:54, 18.23s/it, loss=0.161, v_num=11, train_loss=0.145]\n"
        "Epoch 0: : 3it [00:54, 18.23s/it, loss=0.161, v_num=11, train_loss=0.145]\n"
    )
    _, verdict = scan(kb, ("x.log", text))
    assert verdict.diagnoses[0].entry_id == "D23"
    # the same lines from two ranks of a crash are not this signal
    _, crash = scan(kb, read("repro-D8.log"))
    assert crash.diagnoses[0].entry_id == "D8"


def test_a_faulthandler_dump_names_the_collective(kb: KnowledgeBase) -> None:
    """torchtitan#168: the dump printed at the timeout shows rank 0's main thread in scatter."""
    text = (
        "[rank0]:Thread 0x00007f13c65f5400 (most recent call first):\n"
        '[rank0]:  File "/envs/llm/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3230 in scatter\n'
        '[rank0]:  File "/work/train.py", line 88 in save\n'
    )
    scanner, _ = scan(kb, ("x.log", text))
    scanner.scan.ranks.finish()
    assert scanner.scan.ranks.waits[0].collective == "scatter"


def test_a_peer_still_shutting_down_is_stopped_not_failed(kb: KnowledgeBase) -> None:
    """Rank 1 finished its shorter loop and closed its sockets but had not exited when rank 0's
    extra all-reduce broke; torchrun then stopped it with SIGTERM and listed it under `Failures:`
    (exit -15). That is torchrun's teardown, not a second failure: the peer left (D9), rank 0 first."""
    scanner, verdict = scan(kb, read("repro-D9-NOJOIN-sigterm.log"))
    assert "exitcode  : -15" in read("repro-D9-NOJOIN-sigterm.log")[1]
    assert scanner.scan.no_other_failures
    assert verdict.diagnoses[0].entry_id == "D9"
    assert verdict.first_rank == 0


def test_a_second_real_failure_in_the_summary_is_another_failure(kb: KnowledgeBase) -> None:
    """The same summary with rank 1 listed as exiting 1 (its own error): not a teardown."""
    name, text = read("repro-D9-NOJOIN-sigterm.log")
    changed = text.replace("exitcode  : -15 (pid: 17255)  (SIGTERM)", "exitcode  : 1 (pid: 17255)")
    assert changed != text
    scanner, verdict = scan(kb, (name, changed))
    assert not scanner.scan.no_other_failures
    assert verdict.diagnoses[0].entry_id != "D9"


def test_a_worker_traceback_relayed_by_torchs_logger_is_the_workers_own(kb: KnowledgeBase) -> None:
    """Real output of a fork-started worker (accelerate's notebook_launcher): torch's logger relays
    its traceback behind `E0422 ... api.py:732]`. That is the worker's error, read as a traceback
    (no frame `glued behind other output`), and no traceback is missing."""
    prefix = "E0422 05:07:49.013000 204 torch/distributed/elastic/multiprocessing/api.py:732] "
    worker = [
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.11/dist-packages/torch/cuda/__init__.py", line 305, in _lazy_init',
        "    raise RuntimeError(",
        "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing,"
        " you must use the 'spawn' start method",
    ]
    summary = [
        "Root Cause (first observed failure):",
        "[0]:",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : 1 (pid: 240)",
    ]
    text = "\n".join([prefix + line for line in worker] + summary) + "\n"
    _, verdict = scan(kb, ("relayed.log", text))
    assert verdict.first is not None and verdict.first.text.startswith("RuntimeError: Cannot re-initialize")
    assert verdict.first_rank == 0
    assert {d.entry_id for d in verdict.diagnoses if d.score >= 0.4} & {"E14"}
    assert all(d.entry_id != "P4" for d in verdict.diagnoses)


def test_a_log_of_symptoms_only_says_so_at_lower_scores(kb: KnowledgeBase) -> None:
    """Rank 1's watchdog timeout (real torch 2.13 lines) and nothing else: a failure is there, but
    a timeout follows any failure. The verdict says it has only symptoms, and scores its candidates
    lower than the same timeout's entry gets beside a cause (which is no 'symptoms only' log)."""
    timeout = (
        "[rank1]:[E1122 20:37:55.288269587 ProcessGroupNCCL.cpp:689] [Rank 1] Watchdog caught collective"
        " operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=5000)"
        " ran for 5012 milliseconds before timing out.\n"
    )
    _, alone = scan(kb, ("timeout.log", timeout))
    assert alone.found and alone.only_symptoms
    assert alone.diagnoses[0].entry_id == "MN3" and alone.diagnoses[0].generic
    cause = "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB\n"
    _, with_cause = scan(kb, ("both.log", cause + timeout))
    assert not with_cause.only_symptoms
    unscaled = max(d.score for d in with_cause.diagnoses if d.entry_id == "MN3") / ECHO_FACTOR
    assert alone.diagnoses[0].score < unscaled
