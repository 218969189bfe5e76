"""mistake: a two-node job with the static rendezvous (`--nnodes 2 --node-rank N --master-addr`,
both "nodes" on loopback here); the second node's command was pasted from the first node's and
still says `--node-rank 0`, so both agents claim node 0 and both try to host the store: the second
agent fails to bind the port and the first waits for a second node until the capture's bound
(120 s) kills it.
label: D2
alternates: D4
first_rank: none
launch: torchrun --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port $MASTER_PORT --nproc-per-node 1 eval/runs/scripts/node_rank_copied.py & sleep 2; torchrun --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port $MASTER_PORT --nproc-per-node 1 eval/runs/scripts/node_rank_copied.py; wait
source: none known
written: session 10b, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    t = torch.ones(3)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
