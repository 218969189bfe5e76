"""The rank whose watchdog timed out first, as ProcessGroupNCCL's dump request names it.

The lines are real: OpenRLHF/OpenRLHF#1126 (rank 5 receives the dump signal for a timeout of
rank 34 in the default group, the other ranks only observe it) and the same line from
2U1/Qwen-VL-Series-Finetune#194 on the rank that timed out itself ("this local rank").
"""

from __future__ import annotations

from tests.log_paste import verdict_for
from triage.core.model import KnowledgeBase

OBSERVED = (
    "[rank{r}]:[E901 05:20:03.110823792 ProcessGroupNCCL.cpp:1685] [PG ID 0 PG GUID 0(default_pg)"
    " Rank {r}] Observed flight recorder dump signal from another rank via TCPStore.\n"
)
RECEIVED = (
    "[rank5]:[E901 05:20:03.110956967 ProcessGroupNCCL.cpp:1746] [PG ID {pg} PG GUID {pg}{name}"
    " Rank 5] Received a dump signal due to a collective timeout from  rank 34 and we will try our"
    " best to dump the debug info. Last enqueued NCCL work: 460631, last completed NCCL work: 460630.\n"
)
OWN = (
    "[rank1]:[E1002 16:04:30.984862016 ProcessGroupNCCL.cpp:1870] [PG ID 0 PG GUID 0(default_pg)"
    " Rank 1] Received a dump signal due to a collective timeout from this local rank and\n"
)


def _paste(pg: str = "0", name: str = "(default_pg)") -> str:
    return "".join(OBSERVED.format(r=r) for r in (5, 1, 3, 7, 0)) + RECEIVED.format(pg=pg, name=name)


def test_the_rank_the_dump_request_names_timed_out_first(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, _paste())
    assert verdict.diagnoses[0].entry_id == "MN3"
    assert verdict.first_rank == 34


def test_a_sub_group_s_rank_is_not_a_global_one(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, _paste(pg="2", name=""))
    assert verdict.first_rank != 34


def test_this_local_rank_is_the_printing_rank(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, _paste().replace(RECEIVED.format(pg="0", name="(default_pg)"), OWN))
    assert verdict.first_rank == 1
