"""mistake: rank 0 saves a checkpoint and the other rank, instead of waiting on a barrier, polls
`os.path.exists(path)` and calls `torch.load` as soon as the file appears, so it reads the file
while rank 0 is still writing it. Per-rank log files (`--redirects 3 --log-dir`).
label: D23
alternates: D15
first_rank: 1
launch: rm -rf /tmp/r12c_ckpt /tmp/r12c_ckpt_logs && torchrun --redirects 3 --log-dir /tmp/r12c_ckpt_logs --nproc-per-node 2 eval/runs/scripts/ckpt_load_while_writing.py
source: none known
written: session 12c, unseen
"""

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

CKPT = "/tmp/r12c_ckpt/model.pt"


class SlowFile:
    """The shared filesystem: writes arrive in pieces."""

    def __init__(self, path):
        self.f = open(path, "wb")

    def write(self, b):
        n = self.f.write(b)
        self.f.flush()
        time.sleep(0.01)
        return n

    def flush(self):
        self.f.flush()

    def close(self):
        self.f.close()


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    if rank == 0:
        os.makedirs(os.path.dirname(CKPT), exist_ok=True)
        state = {f"layer{i}.weight": torch.randn(64, 64) for i in range(8)}
        f = SlowFile(CKPT)
        torch.save(state, f)
        f.close()
        print("rank 0 saved checkpoint", flush=True)
    else:
        while not os.path.exists(CKPT):
            time.sleep(0.01)
        state = torch.load(CKPT)
        print(f"rank {rank} loaded {len(state)} tensors", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
