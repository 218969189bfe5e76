"""A data-preparation bar cut off after running as long as a default collective timeout.

The bars are real: huggingface/transformers#17106 (run_clm's tokenizer bar stops at 32:13 and the
traceback starts on its line; the waiting ranks' 30-minute socket timeout) and
axolotl-ai-cloud/axolotl#2684 (the prompt-tokenising bar at 29:58, then rank 1's c10d socket
timing out after 1800000 ms on the same line).
"""

from __future__ import annotations

from tests.log_paste import verdict_for
from triage.core.logscan.timeout_bars import preparation_at_timeout
from triage.core.model import KnowledgeBase

RUN_CLM = """\
Running tokenizer on dataset:  38%|███▊      | 32066/85249 [32:12<53:25, 16.59ba/s]
Running tokenizer on dataset:  38%|███▊      | 32068/85249 [32:13<53:59, 16.42ba/s]Traceback (most recent call last):
  File "run_clm.py", line 579, in <module>
"""

AXOLOTL = (
    "Tokenizing Prompts (num_proc=64):  92%|█████████▏| 328986/359152 [29:58<12:05, 41.59 examples/s]"
    "[rank1]:[W516 14:34:56.854597329 socket.cpp:489] [c10d] waitForInput: socket SocketImpl(fd=79,"
    " addr=[localhost]:41170, remote=[localhost]:29500) timed out after 1800000ms\n"
)


def test_a_tokenizer_bar_cut_off_at_the_thirty_minute_deadline_is_the_timeout(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, RUN_CLM)
    assert verdict.found
    assert verdict.diagnoses[0].entry_id == "MN3"
    assert "32:13" in verdict.diagnoses[0].reason and "30-minute" in verdict.diagnoses[0].reason


def test_the_failure_may_follow_on_the_bar_s_own_line() -> None:
    found = preparation_at_timeout([AXOLOTL])
    assert [f.entry_id for f in found] == ["MN3"]
    assert "Tokenizing Prompts" in found[0].reason


def test_a_bar_far_from_any_deadline_or_finished_or_not_preparing_data_is_not() -> None:
    early = RUN_CLM.replace("[32:12<", "[12:12<").replace("[32:13<", "[12:13<")
    assert preparation_at_timeout([early]) == []
    done = RUN_CLM.replace(" 38%|", "100%|")
    assert preparation_at_timeout([done]) == []
    training = RUN_CLM.replace("Running tokenizer on dataset", "Epoch 3").replace("ba/s", "it/s")
    assert preparation_at_timeout([training]) == []


def test_a_bar_with_more_progress_after_it_is_not() -> None:
    """The bar went on past the deadline: nothing failed when it read 30 minutes."""
    going_on = RUN_CLM.replace(
        'Traceback (most recent call last):\n  File "run_clm.py", line 579, in <module>\n', "\n"
    )
    going_on += "Running tokenizer on dataset:  39%|███▉      | 33000/85249 [33:10<52:00, 16.40ba/s]\n"
    assert preparation_at_timeout([going_on]) == []
