"""mistake: a halo exchange along a chain of ranks with batch_isend_irecv, started by hand (one
`python` per rank, tcp:// init); the send to the right neighbour wraps around (periodic, copied from
a ring code) while the receive from the left is skipped on the first rank (non-periodic boundary),
so the last rank's send to rank 0 is never received (init timeout 10 s).
label: D19
first_rank: none
launch: RANK=0 python eval/runs/scripts/batch_p2p_wrap_send.py & RANK=1 python eval/runs/scripts/batch_p2p_wrap_send.py; wait
source: none known
written: session 10b, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    rank = int(os.environ["RANK"])
    port = os.environ.get("MASTER_PORT", "29500")
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
        timeout=timedelta(seconds=10),
    )
    world = dist.get_world_size()
    right = (rank + 1) % world
    left = rank - 1
    halo_out = torch.full((4,), float(rank))
    halo_in = torch.zeros(4)
    ops = [dist.P2POp(dist.isend, halo_out, right)]
    if left >= 0:
        ops.append(dist.P2POp(dist.irecv, halo_in, left))
    for step in range(3):
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        print(f"rank {rank} step {step}", flush=True)
    print(f"rank {rank} got halo {halo_in.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
