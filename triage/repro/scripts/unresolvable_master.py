"""E13 (hostname resolution): node 1 of a two-node job is given the head node's name as
MASTER_ADDR, and that name does not resolve here (a name only the head node's own /etc/hosts
knows; `.invalid` never resolves anywhere). c10d warns that it cannot resolve it, retries, and
times out."""

import datetime
import os

import torch.distributed as dist


def main() -> None:
    os.environ.update(
        {"MASTER_ADDR": "head-node.invalid", "MASTER_PORT": "29500", "RANK": "1", "WORLD_SIZE": "2"}
    )
    print("node 1: joining the job at head-node.invalid:29500 ...", flush=True)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
