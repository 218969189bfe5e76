"""E4: an evaluation script run with plain `python` calls torch.distributed (and builds a model with
SyncBatchNorm) although nothing ever created the default process group."""

import torch
import torch.distributed as dist


def is_main_process() -> bool:
    return dist.get_rank() == 0  # the helper every training repo has, without an is_initialized() guard


def main() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8))
    model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)  # type: ignore[no-untyped-call]  # SyncBN
    print("evaluating checkpoint on one process ...", flush=True)
    if is_main_process():
        print("metrics:", model(torch.randn(4, 8)).mean().item(), flush=True)


if __name__ == "__main__":
    main()
