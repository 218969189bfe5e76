"""D10: a model converted to SyncBatchNorm (to average BatchNorm statistics across ranks) is wrapped
in DDP while it lives on the CPU."""

import datetime

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
    net = torch.nn.SyncBatchNorm.convert_sync_batchnorm(net)  # type: ignore[no-untyped-call]
    model = torch.nn.parallel.DistributedDataParallel(net)
    loss = model(torch.randn(16, 8)).mean()
    loss.backward()
    print(f"rank {dist.get_rank()} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
