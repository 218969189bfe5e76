"""mistake: reduce_scatter of the gradient shards with the input list built per model layer (3
layers) instead of one chunk per rank (world size 2).
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/reduce_scatter_list_len.py
source: none known
written: session 9, unseen
"""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    layer_grads = [torch.full((4,), float(rank + i)) for i in range(3)]
    out = torch.empty(4)
    dist.reduce_scatter(out, layer_grads)
    print(f"rank {rank} shard {out.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
