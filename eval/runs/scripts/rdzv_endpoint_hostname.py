"""mistake: the launch script of a two-node job points both agents at `--rdzv-endpoint
trainer-master-0:PORT`, the head node's name in the cluster's DNS, and is run on machines where
that name does not resolve (a fresh cloud VPC with no shared DNS); the agents cannot reach the
rendezvous (both "nodes" on loopback here).
label: E13
alternates: P1
first_rank: none
launch: torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint trainer-master-0:$MASTER_PORT --rdzv-id run3 eval/runs/scripts/rdzv_endpoint_hostname.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint trainer-master-0:$MASTER_PORT --rdzv-id run3 eval/runs/scripts/rdzv_endpoint_hostname.py; wait
source: https://github.com/pytorch/pytorch/issues/74824
written: session 11c, unseen
"""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} sum {t.item()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
