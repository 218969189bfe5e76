"""E17: GLOO_SOCKET_IFNAME names an interface this host does not have (copied from another
cluster's job script), so gloo cannot create its device and init_process_group fails on every rank."""

import datetime

import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
