"""NCCL's collective trace (NCCL_DEBUG_SUBSYS=COLL): ranks whose n-th collective differs.

The traces are real: NVIDIA/nccl#147 (rank 0's first Broadcast sends 25503912 elements of one
datatype, its peers 53 of another) and ROCm/rccl#429 (at opCount 28c one process calls AllReduce,
another AllGather; the maintainer's reading).
"""

from __future__ import annotations

from tests.log_paste import verdict_for
from triage.core.logscan.nccl_coll import diverged_collectives
from triage.core.model import KnowledgeBase

BROADCAST = """\
LOG1.0.txt:learnfair062:32615:32615 [0] NCCL INFO Broadcast: opCount 0 sendbuff 0x7f88e4000000 \
recvbuff 0x7f88e4000000 count 25503912 datatype 6 op 0 root 0 comm 0x7f88e005a260 [nranks=8] stream 0x55f20d2f5db0
LOG1.1.txt:learnfair062:32617:32617 [1] NCCL INFO Broadcast: opCount 0 sendbuff 0x7f3bfe7f5400 \
recvbuff 0x7f3bfe7f5400 count 53 datatype 4 op 0 root 0 comm 0x7f3bf405a260 [nranks=8] stream 0x55d5ffb73110
LOG1.2.txt:learnfair062:32619:32619 [2] NCCL INFO Broadcast: opCount 0 sendbuff 0x7fc1407f5400 \
recvbuff 0x7fc1407f5400 count 53 datatype 4 op 0 root 0 comm 0x7fc13805a260 [nranks=8] stream 0x55cefcc3b0e0
"""

ALLREDUCE_VS_ALLGATHER = """\
h03r3n06:45006:45006 [0] NCCL INFO AllReduce: opCount 28c sendbuff 0x7f5dd32b2100 recvbuff 0x7f5dd32b2100 \
count 9984512 datatype 7 op 0 root 0 comm 0x55bef0201370 [nranks=4] stream 0x55bef0208bd0
h03r3n06:45006:45006 [0] NCCL INFO AllReduce: opCount 28d sendbuff 0x7f5dd139b900 recvbuff 0x7f5dd139b900 \
count 8149504 datatype 7 op 0 root 0 comm 0x55bef0201370 [nranks=4] stream 0x55bef0208bd0
h03r3n06:45012:45012 [2] NCCL INFO AllGather: opCount 28c sendbuff 0x7f1fd894af00 recvbuff 0x7f1ed1c00100 \
count 59205120 datatype 0 op 0 root 0 comm 0x559c24b55610 [nranks=4] stream 0x559c248a3630
h03r3n06:45012:45012 [2] NCCL INFO AllGather: opCount 28d sendbuff 0x7f1fce20e500 recvbuff 0x7f2032532100 \
count 15360 datatype 0 op 0 root 0 comm 0x559c24b55610 [nranks=4] stream 0x559c248a3630
"""


def test_a_broadcast_of_different_sizes_at_one_opcount_is_a_divergence(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, BROADCAST)
    assert verdict.found
    assert verdict.diagnoses[0].entry_id == "D19"
    assert "25503912" in verdict.diagnoses[0].reason


def test_different_collectives_at_one_opcount_are_a_divergence() -> None:
    found = diverged_collectives([ALLREDUCE_VS_ALLGATHER])
    assert [f.entry_id for f in found] == ["D19"]
    assert "AllGather" in found[0].reason and "AllReduce" in found[0].reason


def test_matching_traces_and_one_process_alone_are_not() -> None:
    rank0 = [line for line in ALLREDUCE_VS_ALLGATHER.splitlines() if ":45006:" in line]
    assert diverged_collectives(["\n".join(rank0)]) == []  # one process: nothing to compare
    peer = [line.replace(":45006:45006 [0]", ":45007:45007 [1]") for line in rank0]
    assert diverged_collectives(["\n".join(rank0 + peer)]) == []  # the same calls: in step


def test_two_communicators_of_one_size_are_not_compared() -> None:
    """A process that shows two calls at one opCount counts on two communicators of that size."""
    both = ALLREDUCE_VS_ALLGATHER.replace(":45012:45012 [2]", ":45006:45006 [0]")
    assert diverged_collectives([both]) == []
