"""mistake: a tensor-parallel group holds ranks 0 and 1 of four; the script sizes every rank's
chunk with `hidden // dist.get_world_size(tp_group)`, but on ranks 2 and 3, which are not in the
group, get_world_size returns -1, so their chunk is negative and allocating the shard fails there.
label: none
alternates: none
first_rank: none
launch: torchrun --nproc-per-node 4 eval/runs/scripts/get_world_size_nonmember.py
source: none known
written: session 11b, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    tp_group = dist.new_group([0, 1])
    hidden = 64
    chunk = hidden // dist.get_world_size(tp_group)
    weight = torch.randn(chunk, hidden)
    x = torch.randn(2, hidden)
    out = x @ weight.t()
    if rank in (0, 1):
        gathered = [torch.empty_like(out) for _ in range(2)]
        dist.all_gather(gathered, out, group=tp_group)
        out = torch.cat(gathered, dim=-1)
    dist.all_reduce(out.sum().reshape(1))
    print(f"rank {rank}: out {tuple(out.shape)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
