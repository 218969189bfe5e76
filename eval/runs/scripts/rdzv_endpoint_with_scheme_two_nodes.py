"""mistake: the multi-node launch line was written from a tcp:// init example, so both nodes pass
`--rdzv-endpoint tcp://127.0.0.1:PORT` to torchrun's c10d rendezvous, which expects `host:port`;
the agents never reach a store. Two c10d "nodes" on loopback (killed by the 120 s bound if waiting).
label: E13
alternates: P1
first_rank: none
launch: torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint tcp://127.0.0.1:$MASTER_PORT --rdzv-id job13bs eval/runs/scripts/rdzv_endpoint_with_scheme_two_nodes.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint tcp://127.0.0.1:$MASTER_PORT --rdzv-id job13bs eval/runs/scripts/rdzv_endpoint_with_scheme_two_nodes.py; wait
source: none known
written: session 13b, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    model = DDP(nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
