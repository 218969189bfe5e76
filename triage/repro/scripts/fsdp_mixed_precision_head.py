"""D14: FSDP1 casts the parameters it wraps to bf16 (MixedPrecision(param_dtype=torch.bfloat16)),
but the classification head was left outside the wrapped model in fp32: the bf16 features meet
the fp32 head's weight in its matmul on every rank."""

import datetime

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    body = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    head = torch.nn.Linear(8, 1)  # kept outside FSDP "to keep the loss in full precision"
    sharded = FullyShardedDataParallel(
        body, device_id=torch.device("cpu"), mixed_precision=MixedPrecision(param_dtype=torch.bfloat16)
    )
    loss = head(sharded(torch.randn(4, 8))).pow(2).mean()
    loss.backward()
    print(f"rank {dist.get_rank()} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
