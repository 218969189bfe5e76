"""Pastes that start in the middle of a traceback, and NCCL's lines from a Windows desktop (WSL).

`paste-starts-mid-traceback.log` is a user's paste (4x3090, ncclSystemError) that begins with the
code line under a frame the paste cut off; `nccl-wsl-desktop.log` is nccl-tests under WSL, whose
NCCL lines name the host DESKTOP. Both copied from users' reports.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from triage.core.logscan.patterns import compile_signatures
from triage.core.logscan.scanner import Scanner
from triage.core.logscan.source_lines import is_source_line
from triage.core.logscan.verdict import decide
from triage.core.model import KnowledgeBase

DATA = Path(__file__).resolve().parent / "data"


@pytest.mark.parametrize(
    "line",
    [
        '    with training_args.main_process_first(desc="load dataset"):',
        "    work = group.barrier(opts=opts)",
        "    return func(*args, **kwargs)",
        "    torch._C._cuda_setDevice(device)",
        "    raise ValueError(",
    ],
)
def test_code_a_traceback_quotes_is_a_source_line(line: str) -> None:
    assert is_source_line(line)


@pytest.mark.parametrize(
    "line",
    [
        "    RuntimeError: Default process group has not been initialized",
        "  rank      : 1 (local_rank: 1)",
        "  traceback : Signal 7 (SIGBUS) received by PID 5063",
        "loss = 3.2",
        "        size mismatch for fc.weight: copying a param with shape torch.Size([0]) from checkpoint",
        "    host:1:2 [0] NCCL WARN Call to connect returned Connection refused",
    ],
)
def test_a_message_is_no_source_line(line: str) -> None:
    assert not is_source_line(line)


def test_code_whose_frame_the_paste_lost_is_context_not_the_cause(kb: KnowledgeBase) -> None:
    """The paste opens with `with training_args.main_process_first(...)` (MN3's context line) and
    ends with NCCL's `Last error:` naming /dev/shm: the code line says where rank 1 was, the last
    error why it failed (E3)."""
    scanner = Scanner(compile_signatures(kb))
    scanner.feed_block(scanner.source("paste"), (DATA / "paste-starts-mid-traceback.log").read_bytes(), 1)
    verdict = decide(scanner.scan, kb)
    assert verdict.diagnoses[0].entry_id == "E3", verdict.diagnoses
    code = [e for e in scanner.scan.events if e.kind == "hit" and "main_process_first(" in e.text]
    assert code and all(e.role == "frame" for e in code)


def test_nccl_lines_from_a_windows_desktop_point_to_the_platform(kb: KnowledgeBase) -> None:
    """nccl-tests under WSL: NCCL cannot read the PCI topology WSL does not expose. No signature names
    that warning; the host name NCCL prints (DESKTOP) says the machine runs Windows (E2)."""
    scanner = Scanner(compile_signatures(kb))
    scanner.feed_block(scanner.source("paste"), (DATA / "nccl-wsl-desktop.log").read_bytes(), 1)
    verdict = decide(scanner.scan, kb)
    assert verdict.found and verdict.diagnoses[0].entry_id == "E2", verdict.diagnoses
