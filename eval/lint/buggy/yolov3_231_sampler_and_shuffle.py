# source: https://github.com/ultralytics/yolov3/issues/231
# established (labelled bug, closed): with more than one GPU the DistributedSampler is set and the
#   DataLoader still passes shuffle=True: "ValueError: sampler option is mutually exclusive with shuffle".
# expect: TRG024
# (a minimal reconstruction of the pattern in the report)
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader


def train(model, dataset, opt, batch_size, epochs):
    if torch.cuda.device_count() > 1:
        dist.init_process_group(backend=opt.backend, init_method=opt.dist_url, world_size=opt.world_size, rank=opt.rank)
        model = torch.nn.parallel.DistributedDataParallel(model)
        sampler = torch.utils.data.distributed.DistributedSampler(dataset)
    else:
        sampler = None
    dataloader = DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=opt.num_workers,
        shuffle=True,
        pin_memory=True,
        collate_fn=dataset.collate_fn,
        sampler=sampler,
    )
    for epoch in range(epochs):
        for imgs, targets in dataloader:
            loss = model(imgs, targets)
            loss.backward()
