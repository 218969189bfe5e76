"""mistake: the standalone evaluation script reuses the training code's `reduce_mean()` helper
(an all_reduce divided by the world size) to report the validation loss, and is run with plain
`python evaluate.py` on one process, where no process group was ever created.
label: E4
first_rank: none
launch: python eval/runs/scripts/eval_script_reduce_helper.py
source: https://github.com/facebookresearch/detectron2/issues/1481
written: session 11c, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn


def reduce_mean(t):
    t = t.clone()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t / dist.get_world_size()


@torch.no_grad()
def evaluate(model, batches):
    losses = [nn.functional.mse_loss(model(x), y) for x, y in batches]
    return reduce_mean(torch.stack(losses).mean())


def main():
    model = nn.Linear(5, 1)
    batches = [(torch.randn(8, 5), torch.randn(8, 1)) for _ in range(3)]
    print(f"val loss {evaluate(model, batches).item():.4f}")


if __name__ == "__main__":
    main()
