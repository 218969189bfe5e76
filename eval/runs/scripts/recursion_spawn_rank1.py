"""mistake: under mp.spawn, rank 1's shard holds a self-referencing record (a JSON tree whose node
lists itself as its child) and the recursive flatten() used to build its features hits Python's
recursion limit while rank 0 waits in the all-reduce.
label: D20
first_rank: 1
launch: python eval/runs/scripts/recursion_spawn_rank1.py
source: none known
written: session 9, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def flatten(node):
    out = [node["value"]]
    for child in node["children"]:
        out.extend(flatten(child))
    return out


def load_record(rank):
    node = {"value": 1.0, "children": []}
    if rank == 1:
        node["children"].append(node)
    return node


def worker(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    feats = torch.tensor(flatten(load_record(rank)))
    total = feats.sum()
    dist.all_reduce(total)
    print(f"rank {rank}: {total.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29533")
    mp.spawn(worker, args=(2,), nprocs=2)
