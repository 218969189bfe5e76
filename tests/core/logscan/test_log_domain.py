"""Whether a log comes from the stack triage knows, before the query engine may answer from words.

The pastes are real: Open MPI's daemon failure under Horovod (horovod/horovod#504), flash-attn's
undefined torch symbol (ayulockin/neurips-llm-efficiency-challenge#12) and torch's DataLoader bus
error inside a training loop (qubvel-org/segmentation_models.pytorch#172). Each names no torch,
NCCL or launcher word, and each was left unanswered by the fallback when no signature knew it.
"""

from __future__ import annotations

from triage.core.logscan.query_reading import in_domain
from triage.core.logscan.scanner import Scan
from triage.core.model import KnowledgeBase

OPEN_MPI = """\
ssh: connect to host 192.168.11.1 port 50000: Connection refused

ORTE was unable to reliably start one or more daemons.
  settings, or configure OMPI with --enable-orterun-prefix-by-default
"""

FLASH_ATTN = (
    "ImportError: /lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so:"
    " undefined symbol: _ZN3c104cuda9SetDeviceEi"
)

DATALOADER_BUS_ERROR = """\
Epoch: 0
train:   2%|##         | 1/46 [00:01<01:10,  1.56s/it, dice_loss - 0.9637, iou_score - 0.01636]\
ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).
"""

NGINX_BIND = """\
nginx: [emerg] bind() to 0.0.0.0:1935 failed (98: Address already in use)
nginx: [emerg] still could not bind()
"""


def _scan(text: str) -> Scan:
    return Scan(heads=[text])


def test_mpi_runtimes_and_torch_libraries_are_the_domain() -> None:
    assert in_domain(OPEN_MPI, _scan(OPEN_MPI))
    assert in_domain(FLASH_ATTN, _scan(FLASH_ATTN))  # the mangled c10 symbol and flash_attn


def test_a_training_loop_is_the_domain_by_the_knowledge_words(kb: KnowledgeBase) -> None:
    """No torch word at all, but the progress of a training loop (the words `ask` reads too)."""
    assert not in_domain(DATALOADER_BUS_ERROR, _scan(DATALOADER_BUS_ERROR))
    assert in_domain(DATALOADER_BUS_ERROR, _scan(DATALOADER_BUS_ERROR), kb)


def test_another_stacks_error_is_still_not(kb: KnowledgeBase) -> None:
    assert not in_domain(NGINX_BIND, _scan(NGINX_BIND), kb)
