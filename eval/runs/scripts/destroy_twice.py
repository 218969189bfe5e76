"""mistake: the trainer's cleanup() destroys the process group, and the script's own `finally:`
destroys it again.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/destroy_twice.py
source: none known
"""

import torch
import torch.distributed as dist


class Trainer:
    def fit(self):
        t = torch.ones(3)
        dist.all_reduce(t)
        print("fit done", dist.get_rank(), t.tolist())

    def cleanup(self):
        dist.destroy_process_group()


def main():
    dist.init_process_group("gloo")
    trainer = Trainer()
    try:
        trainer.fit()
        trainer.cleanup()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
