"""mistake: the job script exports GLOO_SOCKET_IFNAME=ib0 (copied from the cluster's launch
template, whose nodes have an InfiniBand interface); this machine has no interface of that name,
so gloo cannot create its device on any rank.
label: E17
first_rank: none
launch: GLOO_SOCKET_IFNAME=ib0 torchrun --nproc-per-node 2 eval/runs/scripts/gloo_ifname_missing.py
source: https://github.com/AMD-AGI/Primus/pull/1063
written: session 9b, unseen
"""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.full((2,), float(rank))
    dist.all_reduce(t)
    print(f"rank {rank} {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
