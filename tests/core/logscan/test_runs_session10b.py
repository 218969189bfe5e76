"""The log engine on session 10b's stored real output (eval/runs/train.yaml; no torch launched here)."""

from __future__ import annotations

import pytest

from tests.core.logscan.test_runs_outputs import _item
from tests.log_paste import verdict_for
from triage.core.logscan.blocks import RankReader, mismatch
from triage.core.logscan.transport import transport_wait
from triage.core.model import KnowledgeBase

_SEND_TIMEOUT = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] "
    "Timed out waiting 10000ms for send operation to complete"
)


@pytest.mark.parametrize("setting", ["default", "detail"])
def test_every_rank_timing_out_in_a_send_on_a_p2p_handle_is_a_desync(kb: KnowledgeBase, setting: str) -> None:
    # batch_isend_irecv's handles waited on in the user's own line: no torch frame names the op
    verdict = verdict_for(kb, str(_item("batch_p2p_wrap_send.py", setting)["log"]))
    ids = [d.entry_id for d in verdict.diagnoses]
    assert verdict.found and ids[0] == "D19", verdict.diagnoses[:3]
    assert "send" in verdict.diagnoses[0].reason


def _read(lines: list[str], message: str) -> RankReader:
    reader = RankReader()
    for number, line in enumerate(lines, 1):
        reader.feed(0, number, 1, line)
    reader.exception(0, len(lines) + 1, 1, "RuntimeError", message)
    return reader


_USER_WAIT = [
    "Traceback (most recent call last):",
    '  File "/x/halo.py", line 36, in main',
    "    req.wait()",
]


def test_a_transport_timeout_under_the_users_line_is_a_point_to_point_wait() -> None:
    reader = _read(_USER_WAIT, _SEND_TIMEOUT)
    assert reader.waits[1].collective == "send" and reader.waits[1].where == "halo.py:36 in main"


def test_a_transport_timeout_inside_a_collective_keeps_the_collective() -> None:
    lines = [
        *_USER_WAIT[:2],
        "    dist.all_reduce(t)",
        '  File "/v/site-packages/torch/distributed/distributed_c10d.py", line 2950, in all_reduce',
        "    work.wait()",
    ]
    assert _read(lines, _SEND_TIMEOUT).waits[1].collective == "all_reduce"


def test_other_errors_under_the_users_line_name_no_wait() -> None:
    assert 1 not in _read(_USER_WAIT, "Operation timed out!").waits
    assert transport_wait("Timed out waiting 3000ms for recv operation to complete") == "recv"
    assert transport_wait("Connection closed by peer [127.0.0.1]:30402") is None


def test_a_send_and_a_recv_on_p2p_handles_are_a_pair_that_never_matches() -> None:
    reader = RankReader()
    for rank, op in ((0, "send"), (1, "recv")):
        for number, line in enumerate(_USER_WAIT, 10 * rank + 1):
            reader.feed(0, number, rank, line)
        reader.exception(
            0, 10 * rank + 5, rank, "RuntimeError", f"Timed out waiting 5000ms for {op} operation to complete"
        )
    pair = mismatch(reader.waits)
    assert pair is not None and {pair[0].collective, pair[1].collective} == {"send", "recv"}
