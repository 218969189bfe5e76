# source: https://github.com/AgatheSenellart/MultiVae/issues/33
# established (fixed by the maintainer's PR): the trainer hard-codes shuffle=True on the train loader,
#   so distributed training (a DistributedSampler) fails with "sampler option is mutually exclusive
#   with shuffle".
# expect: TRG024
# (a minimal reconstruction of the pattern in the report)
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


class BaseTrainer:
    def __init__(self, model, train_dataset, training_config, distributed):
        self.model = model
        self.distributed = distributed
        self.train_loader = self.get_train_dataloader(train_dataset, training_config)

    def get_train_dataloader(self, train_dataset, config):
        if self.distributed:
            train_sampler = DistributedSampler(
                train_dataset, num_replicas=dist.get_world_size(), rank=dist.get_rank()
            )
        else:
            train_sampler = None
        return DataLoader(
            dataset=train_dataset,
            batch_size=config.per_device_train_batch_size,
            num_workers=config.train_dataloader_num_workers,
            shuffle=True,
            sampler=train_sampler,
        )
