"""The log engine on session 10's stored real output (eval/runs/train.yaml; no torch launched here)."""

from __future__ import annotations

import pytest

from tests.core.logscan.test_runs_outputs import _item
from tests.log_paste import verdict_for
from triage.core.logscan.blocks import RankReader
from triage.core.model import KnowledgeBase


@pytest.mark.parametrize(
    ("script", "setting"),
    [
        ("gather_list_every_rank.py", "default"),  # non-destination ranks refused, rank 0 loses them
        ("gather_list_every_rank.py", "detail"),  # ... and its monitored barrier reports them
        ("broadcast_src_outside_group.py", "default"),  # the group's ranks refused, rank 0 in a barrier
        ("lazy_module_ddp.py", "default"),  # mp.spawn: DDP refuses uninitialised parameters
        ("manual_grad_avg_frozen.py", "default"),  # all_reduce(None): torch's type check
    ],
)
def test_a_call_torch_refused_is_no_diverged_rank(kb: KnowledgeBase, script: str, setting: str) -> None:
    verdict = verdict_for(kb, str(_item(script, setting)["log"]))
    assert verdict.first is not None and verdict.first.refused, verdict.first
    assert not verdict.found, verdict.diagnoses[:3]


def test_a_rank_that_failed_on_its_own_data_still_diverged(kb: KnowledgeBase) -> None:
    # the DataLoader worker's error is re-raised by torch (`raise exception`): no call was refused
    verdict = verdict_for(kb, str(_item("loader_worker_raises_rank1.py")["log"]))
    assert verdict.first is not None and not verdict.first.refused
    assert verdict.found and verdict.diagnoses[0].entry_id == "D20", verdict.diagnoses[:3]
    assert verdict.first_rank == 1


def test_the_same_error_from_the_users_own_raise_is_a_diverged_rank(kb: KnowledgeBase) -> None:
    log = str(_item("gather_list_every_rank.py")["log"])
    # had the script's own helper raised it, rank 1 would have failed on its own (D20)
    own = log.replace("site-packages/torch/distributed/distributed_c10d.py", "mylib/collect.py")
    assert own != log
    verdict = verdict_for(kb, own)
    assert verdict.first is not None and not verdict.first.refused
    assert verdict.found and verdict.diagnoses[0].entry_id == "D20", verdict.diagnoses[:3]


def test_a_refused_rank_is_not_waiting_in_its_collective() -> None:
    reader = RankReader()
    lines = [
        "Traceback (most recent call last):",
        '  File "/x/train.py", line 21, in main',
        "    dist.broadcast(table, src=0, group=workers)",
        '  File "/v/site-packages/torch/distributed/distributed_c10d.py", line 2801, in broadcast',
        "    group_src = _canonicalize_group_rank(group, src, group_src, return_global=False)",
        '  File "/v/site-packages/torch/distributed/distributed_c10d.py", line 1111, in get_group_rank',
        '    raise ValueError(f"Global rank {global_rank} is not part of group {group}")',
    ]
    for number, line in enumerate(lines, 1):
        reader.feed(0, number, 1, line)
    block = reader.exception(0, len(lines) + 1, 1, "ValueError")
    assert block is not None and block.refused and block.collective == "broadcast"
    assert 1 not in reader.waits
    # the same traceback ending in a timeout's class: the rank was waiting
    for number, line in enumerate(lines, 20):
        reader.feed(0, number, 1, line)
    block = reader.exception(0, 40, 1, "DistBackendError")
    assert block is not None and not block.refused and reader.waits[1].collective == "broadcast"


@pytest.mark.parametrize("setting", ["default", "detail"])
def test_a_send_and_a_recv_that_never_match_are_no_skipped_collective(
    kb: KnowledgeBase, setting: str
) -> None:
    verdict = verdict_for(kb, str(_item("p2p_tag_mismatch.py", setting)["log"]))
    ids = [d.entry_id for d in verdict.diagnoses]
    assert verdict.found and ids[0] == "D19" and "D21" not in ids, verdict.diagnoses[:3]
    assert "send" in verdict.diagnoses[0].reason and "recv" in verdict.diagnoses[0].reason
