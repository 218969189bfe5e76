"""mistake: a unit test of the data-parallel setup checks that DDP's averaged gradient equals the
gradient of one process over the whole batch with torch.testing.assert_close(rtol=0, atol=0); the
two sum the same numbers in a different order, so the float32 results differ in the last bits and
the exact check fails on every rank. Launched as one `python` per rank.
label: P9
first_rank: none
launch: MASTER_ADDR=127.0.0.1 RANK=1 WORLD_SIZE=2 python eval/runs/scripts/ddp_grad_assert_close.py & MASTER_ADDR=127.0.0.1 RANK=0 WORLD_SIZE=2 python eval/runs/scripts/ddp_grad_assert_close.py; wait
source: https://discuss.pytorch.org/t/ddp-gradients-not-exactly-equal-to-single-gpu/
written: session 12, unseen
"""

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(256, 512), nn.Tanh(), nn.Linear(512, 1))
    ddp = DDP(copy.deepcopy(ref))
    x, y = torch.randn(64, 256), torch.randn(64, 1)

    nn.functional.mse_loss(ref(x), y).backward()
    shard = slice(rank * 32, (rank + 1) * 32)
    nn.functional.mse_loss(ddp(x[shard]), y[shard]).backward()

    for p_ref, p_ddp in zip(ref.parameters(), ddp.parameters()):
        torch.testing.assert_close(p_ddp.grad, p_ref.grad, rtol=0, atol=0)
    print(f"rank {rank}: gradients match", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
