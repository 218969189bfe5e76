"""P1 (seen from the worker node): node 1 of a two-node job starts with MASTER_ADDR and MASTER_PORT
pointing at node 0's rendezvous, but nothing answers there (node 0's job is not up, a firewall
rejects the port, the port is another one). Its TCP store client retries until the timeout."""

import datetime
import os
import socket

import torch.distributed as dist


def closed_port() -> int:
    """A port on loopback that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    os.environ.update(
        {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(closed_port()), "RANK": "1", "WORLD_SIZE": "2"}
    )
    print("node 1: joining the rendezvous on node 0 ...", flush=True)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
