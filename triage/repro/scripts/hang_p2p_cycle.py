"""D19, hanging: a two-stage pipeline whose ranks both receive before they send.

Each stage hands its activations to the other: rank 0 should send first and rank 1 receive first,
but both were written "receive, then send", so each waits for a message the other never sends.
No rank is missing and none has crashed: every rank of the world is in recv().
"""

import datetime

import torch
import torch.distributed as dist


def exchange(activations: torch.Tensor, peer: int) -> torch.Tensor:
    """Swap activations with the other stage (the bug: both stages receive first)."""
    received = torch.empty_like(activations)
    dist.recv(received, src=peer)  # the suspect stops here: every rank waits to receive
    dist.send(activations, dst=peer)
    return received


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    activations = torch.ones(8) * rank
    dist.all_reduce(activations)  # the group works: the collectives before the exchange complete
    exchange(activations, peer=1 - rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
