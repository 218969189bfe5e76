"""mistake: the multi-task model builds one output head per task by iterating over
`set(task_sizes)`-derived names (deduplicating the task list from the config), so the order in
which the heads, and their parameters, are registered follows Python's per-process string hashing
and differs between the ranks; DDP finds the ranks' parameter shapes in different orders when it
is constructed. Output collected with TORCH_SHOW_CPP_STACKTRACES=1 in the second setting.
label: E20
first_rank: none
launch: torchrun --nproc-per-node 4 eval/runs/scripts/ddp_heads_from_set.py
source: none known
written: session 11, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

TASKS = ["sentiment", "topic", "language", "toxicity", "topic", "sentiment"]
SIZES = {"sentiment": 3, "topic": 20, "language": 7, "toxicity": 2}


class MultiTask(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(32, 64)
        self.heads = nn.ModuleDict()
        for task in set(TASKS):
            self.heads[task] = nn.Linear(64, SIZES[task])

    def forward(self, x):
        h = torch.relu(self.encoder(x))
        return {task: head(h) for task, head in self.heads.items()}


def main():
    dist.init_process_group("gloo")
    model = DDP(MultiTask())
    out = model(torch.randn(4, 32))
    loss = sum(o.pow(2).mean() for o in out.values())
    loss.backward()
    print(f"rank {dist.get_rank()} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
