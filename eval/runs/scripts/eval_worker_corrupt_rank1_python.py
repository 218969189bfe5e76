"""mistake: the evaluation set is read by DataLoader workers (num_workers=2) that decode each record;
one record in rank 1's half of the set is corrupt, so a worker of rank 1 raises during evaluation,
while rank 0 finishes its half and waits in `dist.all_gather_object` of its predictions. The ranks
are started as one `python` per rank (env://, 15 s timeout), so no launcher kills rank 0: it fails on
the connection rank 1's exit closed.
label: D20
first_rank: 1
launch: MASTER_ADDR=127.0.0.1 RANK=0 WORLD_SIZE=2 python eval/runs/scripts/eval_worker_corrupt_rank1_python.py & MASTER_ADDR=127.0.0.1 RANK=1 WORLD_SIZE=2 python eval/runs/scripts/eval_worker_corrupt_rank1_python.py; wait
source: none known
written: session 13c, unseen
"""

import json
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class JsonlEval(Dataset):
    def __init__(self, rank, world, n=40):
        lines = [json.dumps({"x": [float(i % 7)] * 8, "y": i % 3}) for i in range(n)]
        lines[27] = lines[27][:-9]  # a truncated record
        self.lines = lines[rank::world]

    def __len__(self):
        return len(self.lines)

    def __getitem__(self, i):
        rec = json.loads(self.lines[i])
        return torch.tensor(rec["x"]), rec["y"]


def main():
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=15))
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.Linear(8, 3).eval()
    loader = DataLoader(JsonlEval(rank, world), batch_size=4, num_workers=2)
    preds = []
    with torch.no_grad():
        for x, _ in loader:
            preds.extend(model(x).argmax(-1).tolist())
    gathered = [None] * world
    dist.all_gather_object(gathered, preds)
    if rank == 0:
        print("predictions:", sum(len(p) for p in gathered))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
