"""mistake: the checkpoint is written under `if rank == 0:` and the barrier that should follow it
sits inside the same block, so rank 0 waits at the barrier while rank 1 waits in the next step's
all-reduce; nothing prints, and after a while the user presses Ctrl+C and pastes what the
terminal shows (the default collective timeout has not expired).
label: D21
first_rank: none
launch: set -m; torchrun --nproc-per-node 2 eval/runs/scripts/ctrl_c_hung_barrier.py & sleep 15; kill -INT -- -$!; wait
source: none known
written: session 9, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for step in range(4):
            loss = model(torch.randn(4, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            torch.save(model.module.state_dict(), "/tmp/r9_ckpt.pt")
            print(f"epoch {epoch} saved", flush=True)
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
