# source: https://github.com/EleutherAI/sparsify/pull/5
# established (merged): save() returned early on every rank but 0, so only rank 0 reached the
#   dist.barrier() at its end; with TORCH_DISTRIBUTED_DEBUG=DETAIL the job reported rank 0 in a barrier
#   while the others had moved on to a reduce.
# expect: TRG021
# (a minimal reconstruction of the pattern in the report)
import torch.distributed as dist


class SaeTrainer:
    def __init__(self, saes, cfg):
        self.saes = saes
        self.cfg = cfg

    def save(self):
        rank = dist.get_rank() if dist.is_initialized() else 0
        if rank != 0:
            return
        for hook, sae in self.saes.items():
            sae.save_to_disk(f"checkpoints/{self.cfg.run_name}/{hook}")
        if dist.is_initialized():
            dist.barrier()

    def fit(self, loader):
        dist.init_process_group("nccl")
        for step, batch in enumerate(loader):
            if (step + 1) % self.cfg.save_every == 0:
                self.save()
