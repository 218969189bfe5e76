"""mistake: a parameter-server style loop where every rank "receives the weights from the server
rank", `dist.recv(w, src=server)`, including the server itself (the `if rank != server` guard was
lost in a refactor); the server rank raises for receiving from itself while the worker waits in its
recv. Output goes to per-rank files (`--redirects 3 --log-dir`).
label: none
first_rank: 0
launch: rm -rf /tmp/r10b_logs && torchrun --redirects 3 --log-dir /tmp/r10b_logs --nproc-per-node 2 eval/runs/scripts/recv_from_self.py
source: none known
written: session 10b, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist

SERVER = 0


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    w = torch.zeros(5)
    for step in range(3):
        if rank == SERVER:
            w += 1.0
            for dst in range(1, dist.get_world_size()):
                dist.send(w, dst=dst)
        dist.recv(w, src=SERVER)
        print(f"rank {rank} step {step} w {w[0].item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
