"""Average a dict of metrics across ranks, one all_reduce per key; one rank has an extra key.

Hang class: ranks issue different numbers of collectives (the keys differ per rank).
Label: D19
Odd ranks: 1
Launch: torchrun 3
Held out: written after the first fixes, measured once

Rank 1 logs `grad_norm` too, so it issues one all_reduce more: it waits in that all_reduce while
ranks 0 and 2 wait in the barrier after the loop over the keys.
"""

import torch
import torch.distributed as dist


def reduce_metrics(metrics: dict[str, float]) -> dict[str, float]:
    out = {}
    for key in sorted(metrics):
        value = torch.tensor([metrics[key]])
        dist.all_reduce(value)
        out[key] = value.item() / dist.get_world_size()
    return out


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(100):
        metrics = {"loss": 1.0 / (step + 1), "lr": 0.1}
        if rank == 1:
            metrics["grad_norm"] = 3.0
        averaged = reduce_metrics(metrics)
        dist.barrier()
        if rank == 0:
            print(step, averaged)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
