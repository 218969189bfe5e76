"""The mechanisms session 13d's train evidence needed (eval/lint/README.md, "Session 13d"), quoting the
real code of train-split files: the finding appears for the real idiom and goes away for its fix or a
near miss."""

from __future__ import annotations

import textwrap

from triage.core.lint import lint_source


def codes(body: str) -> list[str]:
    return [f.code for f in lint_source(textwrap.dedent(body), "snippet.py")]


# huggingface/accelerate#2733, as pasted: no imports, Accelerate's `gather_object` called bare under
# the main-process test; the maintainer: every process must call it.
GATHER_SNIPPET = """
    distributed_state = Accelerator()
    if distributed_state.is_main_process:
      print(gather_object(txt_out)[0])
"""


def test_a_bare_gather_object_under_the_main_process_is_a_collective() -> None:
    assert codes(GATHER_SNIPPET) == ["TRG021"]


def test_gathering_on_every_process_then_printing_on_one_is_clean() -> None:
    fixed = """
        distributed_state = Accelerator()
        gathered = gather_object(txt_out)
        if distributed_state.is_main_process:
          print(gathered[0])
    """
    assert "TRG021" not in codes(fixed)


def test_a_gather_object_the_file_defines_is_its_own() -> None:
    own = "def gather_object(x):\n    return [x]\n" + textwrap.dedent(GATHER_SNIPPET)
    assert "TRG021" not in codes(own)


# pytorch/pytorch#24397, the worker as pasted (its `mp.spawn` lies past where the stored copy ends).
WORKER = """
    import os
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    def worker(rank):
        torch.cuda.set_device(rank)
        device = torch.device(rank)
        dist.init_process_group(backend='nccl', world_size=NUM_GPUS, rank=rank)
        model = Model().to(device)
        model = nn.parallel.DistributedDataParallel(model, device_ids=[rank])
"""


def test_a_rendezvous_pinned_to_this_machine_makes_every_rank_local() -> None:
    assert "TRG003" in codes(WORKER)
    pinned = WORKER + "\n    def main():\n        os.environ['MASTER_ADDR'] = '127.0.0.1'\n"
    assert "TRG003" not in codes(pinned)
    by_url = WORKER.replace("backend='nccl',", "backend='nccl', init_method='tcp://localhost:23456',")
    assert "TRG003" not in codes(by_url)


def test_a_default_address_or_another_host_does_not_pin_it() -> None:
    default = WORKER + "\n    os.environ.setdefault('MASTER_ADDR', 'localhost')\n"
    assert "TRG003" in codes(default)
    remote = WORKER + "\n    os.environ['MASTER_ADDR'] = '10.0.0.1'\n"
    assert "TRG003" in codes(remote)
