"""Log lines added as signatures in session 13, each read the way `triage log` reads a paste.

Real output: pytorch/pytorch#177472 (H100 CI runners whose fabric manager broke NVLS multicast)
and pytorch/pytorch#140563 (the flight recorder's trace analysis of a 128-rank hang), both stored
in eval/logs/y.yaml.
"""

from __future__ import annotations

from tests.log_paste import verdict_for
from triage.core.model import KnowledgeBase

NVLS_BIND = """\
torch.distributed.DistBackendError: NCCL error in: /var/lib/jenkins/workspace/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.29.3
ncclUnhandledCudaError: Call to CUDA function failed.
Last error:
Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 401 'the operation cannot be performed in the present state'.
This is usually caused by a system or configuration error in the Fabric Manager or NVSwitches.
Disable NVLS (NCCL_NVLS_ENABLE=0) if you wish to avoid this error in the future.
"""

FR_TRACE = """\
Collective 39 at entry 38 errors
group info: 0:default_pg
collective: nccl:all_reduce
input sizes: [[1025]]
output sizes: [[1025]]
world size: 128
collective state: scheduled
error msg: Culprit rank 22; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[1025]]' does not match found input sizes: '[[262144]]'
"""


def test_nccl_blaming_the_fabric_manager_for_nvls_is_the_fabric(kb: KnowledgeBase) -> None:
    """Under the generic "unhandled cuda error", NCCL's own last error names the NVSwitch fabric."""
    verdict = verdict_for(kb, NVLS_BIND)
    assert verdict.found and not verdict.by_query_engine
    assert verdict.diagnoses[0].entry_id == "MN1"


def test_a_flight_recorder_culprit_rank_is_a_desync(kb: KnowledgeBase) -> None:
    """fr_trace names a rank whose all_reduce differs in size from the others': the ranks desynced."""
    verdict = verdict_for(kb, FR_TRACE)
    assert verdict.found and not verdict.by_query_engine
    assert verdict.diagnoses[0].entry_id == "D19"
