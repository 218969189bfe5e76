# source: https://github.com/pytorch/pytorch/issues/100243
# established (closed; the traceback is the report): DDP(model, device_ids=[LOCAL_RANK]) on a model
#   that was never moved to its GPU: "got device_ids [0], output_device 0, and module parameters
#   {device(type='cpu')}".
# expect: TRG004
# (a minimal reconstruction of the pattern in the report)
import os

import torch
import torch.distributed as dist

LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))


def main(opt):
    torch.cuda.set_device(LOCAL_RANK)
    dist.init_process_group(backend="nccl")
    model = torch.nn.Sequential(torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[LOCAL_RANK], output_device=LOCAL_RANK)
    return model


if __name__ == "__main__":
    main(None)
