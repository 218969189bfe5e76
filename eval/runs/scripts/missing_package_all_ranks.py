"""mistake: the training script imports a package that is not installed in this environment
(the experiment tracker); every rank fails at import time under torchrun.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/missing_package_all_ranks.py
source: none known
"""

import torch.distributed as dist

import experiment_tracker_client as tracker


def main():
    dist.init_process_group("gloo")
    tracker.init(project="demo")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
