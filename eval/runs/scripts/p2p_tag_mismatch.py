"""mistake: a two-stage pipeline started by hand, one `python` per rank with env://; the sender
tags its activations with the micro-batch index (tag=step+1) while the receiver uses tag=step, so the
first recv never pairs with the send and both ranks wait until the 15 s timeout.
label: D19
first_rank: none
launch: MASTER_ADDR=127.0.0.1 RANK=0 WORLD_SIZE=2 python eval/runs/scripts/p2p_tag_mismatch.py & MASTER_ADDR=127.0.0.1 RANK=1 WORLD_SIZE=2 python eval/runs/scripts/p2p_tag_mismatch.py; wait
source: none known
written: session 10, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    for step in range(3):
        if rank == 0:
            act = torch.randn(4, 8)
            dist.send(act, dst=1, tag=step + 1)
            print(f"stage 0 sent micro-batch {step}", flush=True)
        else:
            act = torch.empty(4, 8)
            dist.recv(act, src=0, tag=step)
            print(f"stage 1 got micro-batch {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
