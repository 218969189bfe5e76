"""mistake: the second node of a two-node job is started with the first node's public address as
--master-addr, which the cluster's firewall does not let through on the rendezvous port; the
worker node's agent cannot reach the store (here: a non-routable address stands for it).
label: P1
first_rank: none
launch: torchrun --nnodes 2 --node-rank 1 --master-addr 10.255.255.1 --nproc-per-node 1 eval/runs/scripts/worker_node_unreachable_master.py
source: none known
written: session 9b, unseen
"""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} {t.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
