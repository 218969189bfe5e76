"""mistake: the source rank builds the scatter list from the number of data files (3), not the
world size (2).
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/scatter_list_length.py
source: none known
"""

import torch
import torch.distributed as dist

FILES = ["part-000.jsonl", "part-001.jsonl", "part-002.jsonl"]


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = torch.zeros(5)
    chunks = [torch.arange(5, dtype=torch.float) + 10 * i for i in range(len(FILES))] if rank == 0 else None
    dist.scatter(out, scatter_list=chunks, src=0)
    print(rank, out.tolist())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
