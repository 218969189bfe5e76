"""mistake: FSDP (FSDP1, CPU/gloo) with MixedPrecision(param_dtype=torch.bfloat16) only; the loss
projects the model's bf16 output through a float32 matrix kept outside the FSDP module (a frozen
label-embedding table), so the matmul of bf16 and float32 fails on every rank.
label: D14
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/fsdp_mixed_precision_proj.py
source: https://github.com/pytorch/pytorch/issues/75676
written: session 12, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16))
    model = FSDP(
        encoder,
        device_id=torch.device("cpu"),
        mixed_precision=MixedPrecision(param_dtype=torch.bfloat16),
    )
    label_table = torch.randn(10, 16)  # frozen label embeddings, float32
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        x = torch.randn(4, 32)
        y = torch.randint(0, 10, (4,))
        z = model(x)
        logits = z @ label_table.t()
        loss = nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
