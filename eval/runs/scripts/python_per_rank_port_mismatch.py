"""mistake: the two ranks are started by hand, one `python train.py` per terminal, and the second
terminal's MASTER_PORT was left from another experiment (one port higher), so rank 1 knocks on a
port where nobody listens while rank 0 waits for it (the script's init timeout is 15 s).
label: P1
first_rank: none
launch: MASTER_ADDR=127.0.0.1 RANK=0 WORLD_SIZE=2 python eval/runs/scripts/python_per_rank_port_mismatch.py & MASTER_ADDR=127.0.0.1 MASTER_PORT=$((MASTER_PORT + 1)) RANK=1 WORLD_SIZE=2 python eval/runs/scripts/python_per_rank_port_mismatch.py; wait
source: none known
written: session 9, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group(backend="gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    t = torch.ones(2)
    dist.all_reduce(t)
    print(f"rank {rank} {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
