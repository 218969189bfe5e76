"""mistake: the launch line from the GPU cluster's docs, `torchrun --nproc-per-node gpu` (one worker
per visible GPU), is run on a CPU-only workstation to try the gloo path; the launcher itself
refuses before any worker starts.
label: none
alternates: E9
first_rank: none
launch: torchrun --nproc-per-node gpu eval/runs/scripts/nproc_gpu_cpu_host.py
source: none known
written: session 11, unseen
"""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    t = torch.ones(2)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
