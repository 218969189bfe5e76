"""What a paste adds to real output (colour codes, indentation, `> ` quote marks, a pdsh host) and what it
loses (everything but torchrun's summary) must not change the diagnosis or the first rank.

The output is the harvested real run of reproductions (torch 2.13, CPU/gloo).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.log_paste import verdict_for
from triage.core.logscan.prefixes import split_prefix
from triage.core.model import KnowledgeBase
from triage.repro.harvest import read_archive

ARCHIVE = Path(__file__).resolve().parents[2] / "repro" / "data" / "outputs.tar.gz"


def output(run: str) -> str:
    return "\n".join(text for _, text in read_archive(ARCHIVE)[run])


NOISE: dict[str, Callable[[str], str]] = {
    "colour": lambda line: f"\x1b[31m{line}\x1b[0m",
    "indented": lambda line: f"    {line}",
    "quoted": lambda line: f"> {line}",
    "pdsh": lambda line: f"worker-1: {line}",  # DeepSpeed's multi-node runner names the host
}


@pytest.mark.parametrize("noise", sorted(NOISE))
@pytest.mark.parametrize(("run", "entry"), [("D21--default", "D21"), ("MN3-RANK0--default", "MN3")])
def test_paste_noise_changes_nothing(kb: KnowledgeBase, noise: str, run: str, entry: str) -> None:
    text = output(run)
    plain = verdict_for(kb, text)
    noisy = verdict_for(kb, "\n".join(NOISE[noise](line) for line in text.splitlines()))
    assert plain.diagnoses[0].entry_id == entry
    assert noisy.diagnoses[0].entry_id == entry
    assert noisy.first_rank == plain.first_rank


def test_noise_is_peeled_before_the_rank_prefix() -> None:
    for line in ("\x1b[1;31m[rank3]: RuntimeError: boom\x1b[0m", "  > [rank3]: RuntimeError: boom"):
        split = split_prefix(line)
        assert (split.rank, split.body) == (3, "RuntimeError: boom")
    assert split_prefix(">>> import torch").body == ">>> import torch"
    pdsh = split_prefix("ip-10-0-0-1: [rank8]: Traceback (most recent call last):")
    assert (pdsh.host, pdsh.rank, pdsh.body) == ("ip-10-0-0-1", 8, "Traceback (most recent call last):")
    for not_a_host in ("torch.distributed.DistNetworkError: timed out", "ValueError: bad rank"):
        assert split_prefix(not_a_host).body == not_a_host


def test_only_the_launcher_summary_means_the_traceback_is_missing(kb: KnowledgeBase) -> None:
    """The last lines of a failed run: torchrun's own traceback and its summary, nothing of the
    worker's: the honest answer is that the worker's traceback is missing, from the rank that died."""
    tail = "\n".join(output("D20--default").splitlines()[-40:])
    verdict = verdict_for(kb, tail)
    assert verdict.diagnoses[0].entry_id == "P4"
    assert verdict.first_rank == 1


@pytest.mark.parametrize(
    ("run", "entry"), [("D21--default", "D21"), ("D20--default", "D20"), ("MN3--default", "MN3")]
)
def test_a_paste_that_lost_its_newlines_reads_as_the_log(kb: KnowledgeBase, run: str, entry: str) -> None:
    """Real torch 2.13 output pasted where the newlines are lost (one line): the rank prefixes,
    tracebacks and error lines run together are read apart again, to the same diagnosis and the
    same first failing rank."""
    text = output(run)
    flat = " ".join(line.strip() for line in text.splitlines())
    plain, read = verdict_for(kb, text), verdict_for(kb, flat)
    assert plain.diagnoses[0].entry_id == entry
    assert read.diagnoses[0].entry_id == entry
    assert read.first_rank == plain.first_rank


def test_a_long_line_with_few_marks_is_one_line() -> None:
    from triage.core.logscan.flattened import split_flattened

    assert split_flattened("RuntimeError: " + "x " * 400) is None
    assert split_flattened("[rank0]: a " * 10) is None  # short: a line, however many marks
