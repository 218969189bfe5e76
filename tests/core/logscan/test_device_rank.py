"""A GPU picked by the global rank (D3) against more processes than GPUs (E5).

Stored real output only: two pastes whose traceback quotes the call that handed the global rank to
the device (vllm's sampler on a second node, a Horovod data pipeline using hvd.rank()), and one
whose call uses the local rank on a box with fewer GPUs than processes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.log_paste import verdict_for
from triage.core.logscan.device_rank import _rank_call_above
from triage.core.model import KnowledgeBase

DATA = Path(__file__).resolve().parent / "data"


@pytest.mark.parametrize(
    "name",
    [
        "device-by-global-rank-vllm.log",  # init_tensors(self.rank, ...) on the second 8-GPU node
        "device-by-global-rank-cupy.log",  # cp.cuda.Device(self.hvd_rank).use() on the second machine
    ],
)
def test_the_global_rank_handed_to_the_device_is_d3(kb: KnowledgeBase, name: str) -> None:
    verdict = verdict_for(kb, (DATA / name).read_text(encoding="utf-8"))
    assert verdict.found and verdict.diagnoses[0].entry_id == "D3"
    assert "global rank" in verdict.diagnoses[0].reason


def test_the_local_rank_leaves_the_ordinal_error_to_e5(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, (DATA / "device-by-local-rank-too-many.log").read_text(encoding="utf-8"))
    assert verdict.found and verdict.diagnoses[0].entry_id == "E5"


@pytest.mark.parametrize(
    ("code", "global_rank"),
    [
        ("    torch.cuda.set_device(rank)", True),
        ('    device = torch.device(f"cuda:{rank}")', True),
        ("    torch.cuda.set_device(dist.get_rank())", True),
        ("    torch.cuda.set_device(int(os.environ['RANK']))", True),
        ("    torch.cuda.set_device(local_rank)", False),
        ("    torch.cuda.set_device(int(os.environ['LOCAL_RANK']))", False),
        ("    torch.cuda.set_device(args.gpu)", False),
        ("    ranks = sorted(rank_list)", False),  # a name that only contains the word
    ],
)
def test_which_calls_hand_over_the_global_rank(code: str, global_rank: bool) -> None:
    head = f"{code}\nRuntimeError: CUDA error: invalid device ordinal\n"
    assert (_rank_call_above(head, 2) is not None) is global_rank
