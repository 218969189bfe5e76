"""mistake: a hand-made key-value store for sharing run metadata: every rank creates
`TCPStore(host, port, is_master=True)` on the same fixed port (the copied snippet hard-codes
is_master=True), so all but the first cannot bind it.
label: D4
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/tcpstore_every_rank_master.py
written: after the log engine was read (session 8, second batch)
source: none known
"""

import os
import time
from datetime import timedelta

import torch.distributed as dist


def metadata_store():
    port = int(os.environ["MASTER_PORT"]) + 7
    return dist.TCPStore("127.0.0.1", port, is_master=True, timeout=timedelta(seconds=10))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    time.sleep(0.5 * rank)
    store = metadata_store()
    store.set(f"rank{rank}", "ready")
    dist.barrier()
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
