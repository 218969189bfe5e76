"""mistake: gathering per-rank metrics with all_gather_object, where the metrics dict holds a
lambda (a formatter the logging helper attached) that pickle cannot serialise.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/object_unpicklable.py
source: none known
"""

import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    metrics = {"acc": 0.9 + 0.01 * dist.get_rank(), "fmt": lambda v: f"{v:.2%}"}
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, metrics)
    if dist.get_rank() == 0:
        print(everyone)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
