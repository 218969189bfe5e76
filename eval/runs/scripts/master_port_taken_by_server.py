"""mistake: the user picked `--master-port` equal to the port of a web dashboard they had left running
on the same machine (a plain HTTP server here, started in the background); torchrun's own store
cannot listen on that port and the job dies before any worker starts.
label: D4
first_rank: none
launch: python -m http.server $MASTER_PORT >/dev/null 2>&1 & sleep 2; torchrun --master-port $MASTER_PORT --nproc-per-node 2 eval/runs/scripts/master_port_taken_by_server.py; kill $!
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
    for step in range(5):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
