# source: https://github.com/kakaobrain/scrl/issues/5
# established (the maintainer agreed, the reporter confirmed the fix): the trainer's best checkpoint
#   was written by every process at once, and loading it failed ("file not found: archive/data/...");
#   guarding the write with `comm.is_main_process()` fixed it.
# expect: TRG023
# (a minimal reconstruction of the pattern in the report)
import torch
import torch.distributed as dist


class Trainer:
    def __init__(self, cfg, model):
        self.cfg = cfg
        self.model = model
        self.cur_epoch = 0
        dist.init_process_group("nccl")

    def _save_checkpoint(self, tag):
        save_path = f"{self.cfg.save_dir}/checkpoint_" + str(tag) + ".pth"
        state_dict = {"tag": str(tag), "epoch": self.cur_epoch, "model": self.model.state_dict()}
        torch.save(state_dict, save_path)

    def train(self, loader, evaluate):
        best = 0.0
        for epoch in range(self.cfg.epochs):
            self.cur_epoch = epoch
            for batch in loader:
                self.model(batch).backward()
            score = evaluate(self.model)
            if score > best:
                best = score
                self._save_checkpoint("best")
