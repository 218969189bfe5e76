"""An NCCL umbrella error and the WARN line that names its cause, when only one of them names a rank.

The paste is real (NVIDIA/nccl#962): torch's `DistBackendError ... internal error - please report
this issue` has no rank prefix, the NCCL WARN lines under it carry the device index `[0]`.
"""

from __future__ import annotations

from tests.log_paste import verdict_for
from triage.core.model import KnowledgeBase

UMBRELLA_THEN_WARN = """\
  File "torch/distributed/distributed_c10d.py", line 2448, in all_gather
    work = default_pg.allgather([tensor_list], [tensor])
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1296, \
internal error - please report this issue to the NCCL developers, NCCL version 2.18.1
NCCL version 2.18.1+cuda12.0
node:2134736:2285781 [0] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'
node:2134736:2285781 [0] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes
node:2134736:2285781 [0] proxy.cc:1518 NCCL WARN [Proxy Service 93] Failed to execute operation Setup from rank 93, retcode 1
"""


def test_a_rankless_umbrella_gives_way_to_the_warn_that_names_the_cause(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, UMBRELLA_THEN_WARN)
    assert verdict.found
    first = verdict.diagnoses[0]
    assert "out of memory" in first.evidence[0].text  # the WARN's cause, not the umbrella's class
    umbrella = [d for d in verdict.diagnoses if any("please report" in e.text for e in d.evidence)]
    assert all(d.score < first.score for d in umbrella)


def test_the_umbrella_alone_is_still_the_cause(kb: KnowledgeBase) -> None:
    """With no line naming why, the umbrella is all the log says: it is not demoted to context."""
    alone = "\n".join(UMBRELLA_THEN_WARN.splitlines()[:4]) + "\n"
    verdict = verdict_for(kb, alone)
    assert verdict.found
    assert any("please report" in e.text for e in verdict.diagnoses[0].evidence)
