"""The parts of a log the scanner reads itself, whatever the knowledge says.

- torchrun's exit reports (`failed (exitcode: 1) local_rank: 1`, the failure summary's `rank :` and
  `exitcode :` lines, the "Root Cause" marker), the legacy launcher's `CalledProcessError` and
  DeepSpeed's launcher's `... '--local_rank=1', ...] exits with return code = -9`;
- Python exceptions no signature explains, each ending its rank's traceback block (blocks.py);
- C++ `terminate called after throwing an instance of 'T'` with its `what():` line, and
  `terminate called without an active exception`: a rank aborting;
- NCCL's `WARN` lines, and the line after NCCL's `Last error:`, which names the cause that the
  umbrella error around it (`ncclSystemError: unhandled system error`) does not.

Each becomes an event through the callback the scanner gives; the verdict decides what they mean.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from dataclasses import dataclass

from triage.core.logscan.blocks import RankReader

_EXCEPTION = re.compile(
    r"^\s*(?:[^\]\[]{0,80}\] )?(?P<name>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt))"
    r"(?::\s*(?P<msg>.*))?$"
)
_EXIT_LINE = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<rank>\d+)")
# The same report with the launcher's own pid (its log prefix) and the worker's: one launcher that
# reports a failed worker twice, with different worker pids, started its workers again (a restart).
_AGENT_EXIT = re.compile(
    r"\b(?P<agent>\d+) \S*elastic/multiprocessing/api\.py:\d+\] failed \(exitcode: -?\d+\)"
    r" local_rank: \d+ \(pid: (?P<pid>\d+)\)"
)
_SUMMARY_RANK = re.compile(r"^\s*rank\s*: (?P<rank>\d+) \(local_rank: \d+\)")
_SUMMARY_EXIT = re.compile(r"^\s*exitcode\s*: (?P<code>-?\d+)")
SUMMARY_LINES = 3  # the exitcode, error_file and traceback lines under a summary block's `rank :`
# A worker's own traceback that @record put into the summary (`traceback : Traceback (most recent
# call last):`, then its frames and exception, indented under it): that worker's words.
_SUMMARY_TRACEBACK = re.compile(r"^\s*traceback\s*: Traceback \(most recent call last\)")
SUMMARY_TRACEBACK_LINES = 400  # a bound on how far one such traceback is followed
_SUMMARY_ROOT = re.compile(r"Root Cause \(first observed failure\)", re.IGNORECASE)
_NO_OTHER_FAILURES = "<NO_OTHER_FAILURES>"  # torchrun's summary: the root cause is the only failure
# Exit statuses as launchers report a death by signal (-N). SIGTERM: a worker torchrun stopped
# itself after another failed; SIGABRT: a C++ abort (terminate).
SIGTERM_EXIT = -int(signal.SIGTERM)
SIGABRT_EXIT = -int(signal.SIGABRT)
# The launcher's own SIGTERMs (`Sending process 953 closing signal SIGTERM`), and the worker pid of
# an exit report (`failed (exitcode: -15) local_rank: 1 (pid: 954)`, the summary's `exitcode : -15
# (pid: 954)`): a worker ended by SIGTERM that its launcher never sent was stopped from outside.
_LAUNCHER_SIGTERM = re.compile(r"Sending process (?P<pid>\d+) closing signal SIGTERM")
_EXIT_PID = re.compile(r"\(pid: (?P<pid>\d+)\)")
OUTSIDE_SIGTERM = "SIGTERM the launcher did not send"
_LEGACY_EXIT = re.compile(
    r"CalledProcessError: Command '.*--local_rank=(?P<rank>\d+).*' "
    r"(?:died with <Signals\.SIG\w+: (?P<signal>\d+)>|returned non-zero exit status (?P<code>\d+))"
)
# DeepSpeed's launcher: `[launch.py:434:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=1',
# ...] exits with return code = -9` (its command line carries the worker's local rank).
_DEEPSPEED_EXIT = re.compile(
    r"sigkill_handler\] \[.{0,2000}?--local_rank=(?P<rank>\d+).{0,4000}?\] exits with return code = (?P<code>-?\d+)"
)
_SPAWN_HEADER = re.compile(r"-- Process (?P<rank>\d+) terminated with the following error")
# mp.spawn stopping the processes still running after one failed.
_SPAWN_TEARDOWN = re.compile(r"multiprocessing/spawn\.py:\d+\] Terminating process \d+ via signal SIGTERM")
# mp.spawn's report of a process that died without a Python exception (a signal, os._exit, sys.exit).
_SPAWN_EXIT = re.compile(
    r"\bprocess (?P<rank>\d+) terminated with (?:signal (?P<signal>SIG[A-Z0-9]+)|exit code (?P<code>\d+))"
)
_NCCL_COMM = re.compile(
    r"\bcomm 0x[0-9a-f]+ rank (?P<rank>\d+) nranks \d+ cudaDev \d+ (?:nvmlDev \d+ )?busId (?P<bus>[0-9a-f]+)",
    re.IGNORECASE,
)
# mp.spawn's wrapper around the failed process's own exception, which it prints next (after
# `-- Process N terminated with the following error:`): the wrapper is no failure of its own.
_SPAWN_WRAPPER = "ProcessRaisedException"
# torchrun's report of a failed worker: its "message" below is the launcher's summary, not a cause.
_LAUNCHER_EXCEPTIONS = frozenset({"ChildFailedError", _SPAWN_WRAPPER})
_WORDS = re.compile(r"[A-Za-z]{3}")  # a message, not a separator line
_TERMINATE = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'")
_ABORT = re.compile(r"terminate called without an active exception|terminate called recursively")
_WHAT = re.compile(r"^\s*what\(\):\s*(?P<msg>.*)$")
_NCCL_WARN = re.compile(r"\bNCCL WARN (?P<msg>.*)$")
_LAST_ERROR = re.compile(r"^\s*Last error:\s*(?P<msg>.*)$")
# NCCL's error classes: they say which kind of call failed, not why. The `Last error:` line after
# them, or the first NCCL WARN of the rank, says why.
UMBRELLA = re.compile(
    r"ncclSystemError|ncclInternalError|ncclInvalidUsage|ncclUnhandledCudaError"
    r"|unhandled system error|unhandled cuda error|internal error - please report|invalid usage \(run with"
    r"|NCCL error in:",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Found:
    """One structural event: what the scanner turns into an Event."""

    kind: str  # "exit" | "exception" | "terminate" | "abort" | "warn" | "detail"
    rank: int | None
    text: str
    note: str = ""
    exit_code: int | None = None
    collective: str = ""  # exceptions: the collective the rank's traceback was blocked in
    refused: bool = False  # exceptions: raised by torch's own check on the call (blocks.Block.refused)
    native_check: bool = False  # exceptions: a C++ value or type check under torch's call (native_checks.py)


class Structure:
    """Per-source state for the multi-line structures; one per scanner."""

    def __init__(self, emit: Callable[[int, int, Found], None]) -> None:
        self.emit = emit
        self.reader = RankReader()
        self.root_cause_rank: int | None = None
        self.spawn_failed: int | None = None  # the process mp.spawn reports failed (its first)
        self.spawn_stopped = 0  # processes mp.spawn terminated after one failed (`Terminating process`)
        self._no_other_marker = False  # torchrun's summary printed <NO_OTHER_FAILURES>
        self._summary_exits: dict[int, int] = {}  # worker -> exit code, as torchrun's summary lists them
        self._summary_rank: dict[int, tuple[int, int]] = {}  # source -> (worker rank, its `rank :` line)
        self._summary_exited: set[int] = set()  # sources whose current summary block gave its exit
        self._summary_traceback: set[int] = set()  # sources inside a summary block's traceback
        self._summary_root: dict[int, bool] = {}
        self._terminate: dict[tuple[int, int | None], str] = {}
        self._last_error: dict[int, tuple[int, int | None]] = {}  # source -> (line, rank)
        # source -> (line, rank, name) of an exception whose message starts on the next line
        self._message_next: dict[int, tuple[int, int | None, str]] = {}
        self._spawn_rank: dict[int, int] = {}  # source -> the process mp.spawn said failed
        self.gpus: dict[tuple[str, str], set[int]] = {}  # (host, NCCL busId) -> ranks that use it
        self._agent_reports: dict[tuple[int, str], tuple[int, str]] = {}  # (source, agent) -> (line, pid)
        self._sigterm_sent: dict[int, set[str]] = {}  # source -> worker pids the launcher sent SIGTERM
        # (source, the launcher's first report, its next one after it started the workers again)
        self.restarted: tuple[int, int, int] | None = None

    @property
    def no_other_failures(self) -> bool:
        """torchrun's summary saw one worker fail and the others end well, or end only by the
        SIGTERM torchrun itself sends every survivor once one worker has failed (a rank still
        shutting down when its peer's collective broke is listed as a failure with exit -15)."""
        return self._no_other_marker or self.launcher_stopped_others

    @property
    def launcher_stopped_others(self) -> bool:
        """torchrun's summary: one worker failed and every other worker ended by the SIGTERM
        torchrun sends once one has failed (they were still waiting or working, not done)."""
        others = [code for worker, code in self._summary_exits.items() if worker != self.root_cause_rank]
        return self.root_cause_rank is not None and bool(others) and all(c == SIGTERM_EXIT for c in others)

    def summary_rank(self, source: int, number: int, line: str | None = None) -> int | None:
        """The worker a line of torchrun's failure summary is about (`exitcode :`, `traceback :`,
        and the indented lines of a traceback @record wrote there). `line`, the line as printed
        (its indent kept), moves the reading on; without it, only asks."""
        current = self._summary_rank.get(source)
        if current is None:
            return None
        if 0 < number - current[1] <= SUMMARY_LINES:
            if line is not None and _SUMMARY_TRACEBACK.match(line):
                self._summary_traceback.add(source)
            return current[0]
        if source in self._summary_traceback:
            if line is None or (line[:1].isspace() and number - current[1] <= SUMMARY_TRACEBACK_LINES):
                return current[0]
            self._summary_traceback.discard(source)  # the summary's own lines again, or the end
        return None

    def spawn_rank(self, source: int) -> int | None:
        """The process whose traceback mp.spawn is printing (`-- Process 1 terminated with ...`)."""
        return self._spawn_rank.get(source)

    def wants_next_line(self, source: int, number: int) -> bool:
        """Whether the line after `number` must be read even without an anchor (Last error's detail)."""
        pending = self._last_error.get(source)
        message = self._message_next.get(source)
        return (pending is not None and pending[0] == number) or (
            message is not None and message[0] == number
        )

    def feed(
        self,
        source: int,
        number: int,
        rank: int | None,
        host: str | None,
        body: str,
        short: str,
        matched: bool,
    ) -> None:
        """One line, after the signatures: `matched` when a non-echo or echo signature took it."""
        self.reader.feed(source, number, rank, body)
        spawn = _SPAWN_HEADER.search(body)
        if spawn is not None:
            self._spawn_rank[source] = int(spawn["rank"])
            if self.spawn_failed is None:  # mp.spawn reports the first process that failed
                self.spawn_failed = int(spawn["rank"])
            return
        comm = _NCCL_COMM.search(body)
        if comm is not None:
            self.gpus.setdefault((host or "", comm["bus"].lower()), set()).add(int(comm["rank"]))
            return
        if self._torchrun(source, number, rank, body, short):
            return
        below = self._message_next.pop(source, None)
        if below is not None and below[0] == number - 1 and _WORDS.search(body) and not matched:
            # `MisconfigurationException:` with its message on the lines below: the message is
            # what says what went wrong (and what the query engine reads when nothing else does)
            self.emit(
                source,
                number,
                Found("detail", rank if rank is not None else below[1], f"{below[2]}: {short}"),
            )
            return
        pending = self._last_error.pop(source, None)
        if pending is not None and pending[0] == number - 1 and body.strip():
            if not matched:
                self.emit(source, number, Found("detail", rank if rank is not None else pending[1], short))
            return
        last = _LAST_ERROR.match(body)
        if last is not None:
            if last["msg"].strip():
                if not matched:
                    self.emit(source, number, Found("detail", rank, last["msg"].strip()[: len(short)]))
            else:
                self._last_error[source] = (number, rank)
            return
        terminate = _TERMINATE.search(body)
        if terminate is not None:
            self._terminate[(source, rank)] = terminate["type"]
            return
        what = _WHAT.match(body)
        if what is not None:
            thrown = self._terminate.pop((source, rank), "")
            if not matched:
                message = what["msg"].strip() or short
                text = f"{thrown}: {message}" if thrown else message  # the C++ type says what kind of error
                self.emit(source, number, Found("terminate", rank, text, note=thrown))
            return
        if _ABORT.search(body):
            self.emit(source, number, Found("abort", rank, short))
            return
        warn = _NCCL_WARN.search(body)
        if warn is not None:
            if not matched:
                self.emit(source, number, Found("warn", rank, warn["msg"].strip()))
            return
        exception = _EXCEPTION.match(body)
        if exception is not None:
            self._spawn_rank.pop(source, None)
            name = exception["name"].rsplit(".", 1)[-1]
            if (
                exception["msg"] is not None
                and not exception["msg"].strip()
                and name not in _LAUNCHER_EXCEPTIONS
            ):
                self._message_next[source] = (number, rank, name)
            block = self.reader.exception(source, number, rank, name, exception["msg"] or "")
            if not matched and name != _SPAWN_WRAPPER:
                collective = block.collective if block is not None and block.collective else ""
                refused = block is not None and block.refused
                native = block is not None and block.native_check
                found = Found("exception", rank, short, exception["name"], None, collective, refused, native)
                self.emit(source, number, found)

    def _torchrun(self, source: int, number: int, rank: int | None, body: str, short: str) -> bool:
        """torchrun's (and the legacy launcher's) reports of a worker's exit."""
        if _NO_OTHER_FAILURES in body:
            self._no_other_marker = True
            return True
        if _SUMMARY_ROOT.search(body):
            self._summary_root[source] = True
            return True
        sent = _LAUNCHER_SIGTERM.search(body)
        if sent is not None:
            self._sigterm_sent.setdefault(source, set()).add(sent["pid"])
        exit_line = _EXIT_LINE.search(body)
        if exit_line:
            self._restart(source, number, body)
            code = int(exit_line["code"])
            note = self._outside(source, code, body)
            self.emit(source, number, Found("exit", int(exit_line["rank"]), short, note=note, exit_code=code))
            return True
        summary_rank = _SUMMARY_RANK.match(body)
        if summary_rank:
            self._summary_rank[source] = (int(summary_rank["rank"]), number)
            self._summary_exited.discard(source)
            self._summary_traceback.discard(source)
            if self._summary_root.pop(source, False):
                self.root_cause_rank = int(summary_rank["rank"])
            return True
        summary_exit = _SUMMARY_EXIT.match(body)
        worker = self.summary_rank(source, number)
        if summary_exit and worker is not None and source not in self._summary_exited:
            self._summary_exited.add(source)
            code = int(summary_exit["code"])
            self._summary_exits[worker] = code
            note = self._outside(source, code, body)
            self.emit(source, number, Found("exit", worker, short, note=note, exit_code=code))
            return True
        legacy = _LEGACY_EXIT.search(body)
        if legacy:
            code = -int(legacy["signal"]) if legacy["signal"] else int(legacy["code"])
            self.emit(source, number, Found("exit", int(legacy["rank"]), short[-200:], exit_code=code))
            return True
        deepspeed = _DEEPSPEED_EXIT.search(body) if "exits with return code" in body else None
        if deepspeed:
            code = int(deepspeed["code"])
            self.emit(source, number, Found("exit", int(deepspeed["rank"]), short[-200:], exit_code=code))
            return True
        if _SPAWN_TEARDOWN.search(body):
            self.spawn_stopped += 1
            return True
        spawned = _SPAWN_EXIT.search(body)
        if spawned:
            status = _signal_exit(spawned["signal"]) if spawned["signal"] else int(spawned["code"])
            # mp.spawn reports only the process that died first, never one it stopped itself
            note = OUTSIDE_SIGTERM if status == SIGTERM_EXIT else ""
            self.emit(
                source, number, Found("exit", int(spawned["rank"]), short[-200:], note=note, exit_code=status)
            )
            return True
        return False

    def _outside(self, source: int, code: int, body: str) -> str:
        """OUTSIDE_SIGTERM for a worker that died of SIGTERM while this launcher, which has been seen
        stopping workers, never sent it one (a person, a scheduler or a cleanup job did)."""
        sent = self._sigterm_sent.get(source)
        pid = _EXIT_PID.search(body)
        if code != SIGTERM_EXIT or not sent or pid is None or pid["pid"] in sent:
            return ""
        return OUTSIDE_SIGTERM

    def _restart(self, source: int, number: int, body: str) -> None:
        """A launcher's second report of a failed worker, about another worker process: the first
        attempt failed and torchrun (--max-restarts) started the group again."""
        report = _AGENT_EXIT.search(body)
        if report is None or self.restarted is not None:
            return
        earlier = self._agent_reports.setdefault((source, report["agent"]), (number, report["pid"]))
        if earlier[1] != report["pid"]:
            self.restarted = (source, earlier[0], number)


def _signal_exit(name: str) -> int | None:
    """The exit status a launcher gives a process ended by the signal `name` (-9 for SIGKILL)."""
    try:
        return -int(signal.Signals[name])
    except KeyError:
        return None
