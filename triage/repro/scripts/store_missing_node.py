"""P1 (store timeout): node 0 of a two-node job starts and hosts the TCP store; node 1 never
connects (its launch failed, a firewall drops the port, it points at another address). Node 0's
store waits for the missing client until the timeout and gives up."""

import datetime
import os
import socket

import torch.distributed as dist


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    os.environ.update(
        {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "RANK": "0", "WORLD_SIZE": "2"}
    )
    print("node 0: waiting for node 1 to join the rendezvous ...", flush=True)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
