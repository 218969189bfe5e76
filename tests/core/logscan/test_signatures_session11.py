"""Log lines added as signatures in session 11, each read the way `triage log` reads a paste.

Real output: pytorch/pytorch#43685 (nvidia-smi after a GPU dropped out of a DDP run), the
facebookincubator/submitit#1618 test run (a SLURM preemption caught and requeued), and horovodrun's
ssh pre-check as horovod/runner/launch.py raises it.
"""

from __future__ import annotations

from tests.log_paste import verdict_for
from triage.core.model import KnowledgeBase

GPU_LOST = "Unable to determine the device handle for GPU 0000:17:00.0: GPU is lost.  Reboot the system to recover this GPU\n"

SUBMITIT_PREEMPTED = """\
submitit WARNING (2021-04-01 02:26:27,643) - Bypassing signal SIGCONT
submitit INFO (2021-04-01 02:26:27,643) - Job has not timed out. Ran 61 minutes out of requested 120 minutes.
submitit WARNING (2021-04-01 02:26:27,643) - Caught signal SIGUSR1 on learnfair4096: this job is preempted.
submitit INFO (2021-04-01 02:26:28,004) - Requeued job 39025082 (3 remaining timeouts)
"""

HOROVOD_SSH = """\
Checking ssh on all remote hosts.
Traceback (most recent call last):
  File "/usr/local/lib/python3.7/dist-packages/horovod/runner/launch.py", line 586, in _run_static
    raise RuntimeError('could not connect to some hosts via ssh')
RuntimeError: could not connect to some hosts via ssh
"""


def test_nvidia_smi_losing_a_gpu_is_the_hardware(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, GPU_LOST)
    assert verdict.found and verdict.diagnoses[0].entry_id == "E10"


def test_a_preemption_caught_by_submitit_is_preemption_handling(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, SUBMITIT_PREEMPTED)
    assert verdict.diagnoses and verdict.diagnoses[0].entry_id == "X2"


def test_horovodrun_s_failed_ssh_check_is_the_multi_node_launch(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, HOROVOD_SSH)
    assert verdict.found and verdict.diagnoses[0].entry_id == "P3"
