# source: https://github.com/pytorch/pytorch/issues/46821
# established (closed; the maintainer's answer: the model must be moved to the GPU before DDP wraps
#   it): the imagenet-style script had `model.cuda(args.gpu)` commented out, so DDP got device_ids
#   for a CPU module: "device_ids and output_device arguments only work with single-device CUDA modules".
# expect: TRG004
# (a minimal reconstruction of the pattern in the report)
import torch
import torch.distributed as dist
import torchvision.models as models


def main_worker(gpu, ngpus_per_node, args):
    args.gpu = gpu
    args.rank = args.rank * ngpus_per_node + gpu
    dist.init_process_group(backend=args.dist_backend, init_method=args.dist_url, world_size=args.world_size, rank=args.rank)
    model = models.resnet50()
    if args.gpu is not None:
        torch.cuda.set_device(args.gpu)
        # model.cuda(args.gpu)
        args.batch_size = int(args.batch_size / ngpus_per_node)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu], find_unused_parameters=True)
    return model
