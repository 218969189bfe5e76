"""mistake: init_process_group(init_method="tcp://127.0.0.1:PORT") in a script started with plain
python, with neither rank nor world_size passed (the author expected tcp:// to work them out).
label: D1
first_rank: none
launch: python eval/runs/scripts/tcp_init_no_rank.py
written: after the log engine was read (session 8, second batch)
source: none known
"""

import os

import torch.distributed as dist


def main():
    port = os.environ.get("MASTER_PORT", "23456")
    print("connecting to the group ...", flush=True)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}")
    print("rank", dist.get_rank(), flush=True)


if __name__ == "__main__":
    main()
