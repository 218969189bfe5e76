# source: https://github.com/cszn/KAIR/pull/106
# established (merged): the distributed sampler of the training scripts never had set_epoch called,
#   so every epoch used the same data order (pytorch/pytorch#31771).
# expect: TRG022
# (a minimal reconstruction of the pattern)
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def main(opt, model, train_set):
    dist.init_process_group("nccl")
    dataset_opt = opt["datasets"]["train"]
    train_sampler = DistributedSampler(
        train_set, shuffle=dataset_opt["dataloader_shuffle"], drop_last=True, seed=opt["train"]["manual_seed"]
    )
    train_loader = DataLoader(
        train_set,
        batch_size=dataset_opt["dataloader_batch_size"] // opt["num_gpu"],
        shuffle=False,
        num_workers=dataset_opt["dataloader_num_workers"] // opt["num_gpu"],
        drop_last=True,
        pin_memory=True,
        sampler=train_sampler,
    )
    current_step = 0
    for epoch in range(1000000):
        for i, train_data in enumerate(train_loader):
            current_step += 1
            model.feed_data(train_data)
            model.optimize_parameters(current_step)


if __name__ == "__main__":
    main({}, None, None)
