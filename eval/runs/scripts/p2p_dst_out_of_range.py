"""mistake: a hand-rolled two-stage pipeline computes the next stage as `rank + 1` without checking
for the last stage, so rank 1 (the last stage) tries to send its activations to a rank 2 that does
not exist (gloo waits for that peer to show up in the store), while rank 0 waits to receive the
gradient from it; both time out (the script's init timeout is 20 s). The two ranks are started by
hand, one `python train.py` per terminal.
label: D19
alternates: D20
first_rank: 1
launch: MASTER_ADDR=127.0.0.1 RANK=0 WORLD_SIZE=2 python eval/runs/scripts/p2p_dst_out_of_range.py & MASTER_ADDR=127.0.0.1 RANK=1 WORLD_SIZE=2 python eval/runs/scripts/p2p_dst_out_of_range.py; wait
source: none known
written: session 9b, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group(backend="gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    stage = nn.Linear(8, 8)
    for step in range(2):
        if rank == 0:
            act = stage(torch.randn(4, 8))
            dist.send(act.detach(), dst=rank + 1)
            grad = torch.empty(4, 8)
            dist.recv(grad, src=rank + 1)
            act.backward(grad)
        else:
            act = torch.empty(4, 8)
            dist.recv(act, src=rank - 1)
            out = stage(act.requires_grad_())
            dist.send(out.detach(), dst=rank + 1)  # meant for the loss stage
            out.sum().backward()
            dist.send(act.grad, dst=rank - 1)
        print(f"rank {rank} step {step} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
