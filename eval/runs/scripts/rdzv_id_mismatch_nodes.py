"""mistake: a two-node job (torchrun --nnodes 2, c10d rendezvous; both "nodes" on loopback here)
where each node's launch script builds --rdzv-id from its own $SLURM_JOB_ID-like value (here the
second node's differs), so the two agents wait in different rendezvous and neither reaches its
minimum of 2 nodes before the rendezvous timeout (--rdzv-conf join_timeout=20).
label: P1
alternates: D2
first_rank: none
launch: torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id run_1041 --rdzv-conf join_timeout=20 eval/runs/scripts/rdzv_id_mismatch_nodes.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id run_1042 --rdzv-conf join_timeout=20 eval/runs/scripts/rdzv_id_mismatch_nodes.py; wait
source: none known
written: session 10, unseen
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
